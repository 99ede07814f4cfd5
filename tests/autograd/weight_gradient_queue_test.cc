// WeightGradientQueue (autograd/weight_gradient_queue.h): a linear function's weight gradient
// queued over several backwards and computed in one product equals the gradient computed in
// each backward; the input's and bias's gradients are never queued; nothing is queued where it
// would change what someone sees (a backward observer, check_finite) or where the weight is not
// a leaf.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "autograd/backward_observer.h"
#include "autograd/check_finite.h"
#include "autograd/functions.h"
#include "autograd/weight_gradient_queue.h"
#include "core/ops.h"
#include "core/random.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;

namespace {

void require_close(const Tensor& got, const Tensor& want) {
  REQUIRE(got.defined());
  REQUIRE(got.shape() == want.shape());
  REQUIRE_VALUES(got, test_util::values(want), 1e-12, 1e-12);
}

struct Model {
  Variable W, b;
  explicit Model(std::uint64_t seed) {
    Generator gen(seed);
    W = Variable(randn({4, 3}, gen, 0, 1, DType::f64), true);
    b = Variable(randn({4}, gen, 0, 1, DType::f64), true);
  }
};

// Three microbatches of different sizes through tanh(linear(x, W, b)), summed.
std::vector<Tensor> microbatches() {
  Generator gen(5);
  return {randn({2, 3}, gen, 0, 1, DType::f64), randn({5, 3}, gen, 0, 1, DType::f64),
          randn({1, 3}, gen, 0, 1, DType::f64)};
}

void backward_of(Model& m, const Tensor& x, Variable* input = nullptr) {
  Variable xv(x, input != nullptr);
  if (input != nullptr) *input = xv;
  F::sum(F::tanh(F::linear(xv, m.W, m.b))).backward();
}

}  // namespace

TEST_CASE("queued weight gradients equal the ones each backward computes; inputs and biases are not queued") {
  Model plain(1), queued(1);
  for (const Tensor& x : microbatches()) backward_of(plain, x);

  WeightGradientQueue queue;
  for (const Tensor& x : microbatches()) {
    Variable input;
    {
      WeightGradientQueue::Scope deferring(queue);
      backward_of(queued, x, &input);
    }
    REQUIRE(input.grad().defined());  // the input's gradient comes at once
  }
  REQUIRE_FALSE(queued.W.grad().defined());  // W's waits in the queue
  require_close(queued.b.grad(), plain.b.grad());
  REQUIRE(queue.queued_bytes() == (8 * 4 + 8 * 3) * 8);  // 8 rows of dY [., 4] and X [., 3], f64
  REQUIRE(queue.flush() == 8);
  REQUIRE(queue.empty());
  require_close(queued.W.grad(), plain.W.grad());
}

TEST_CASE("a flush adds to a gradient already there, and a shared gradient is not written through") {
  Model plain(2), queued(2);
  const std::vector<Tensor> xs = microbatches();
  backward_of(plain, xs[0]);
  backward_of(plain, xs[1]);
  backward_of(queued, xs[0]);  // not queued: W.grad() holds it
  const Tensor users_copy = queued.W.grad();  // shares the gradient's memory
  const std::vector<double> before = users_copy.to_vector<double>();
  WeightGradientQueue queue;
  {
    WeightGradientQueue::Scope deferring(queue);
    backward_of(queued, xs[1]);
  }
  queue.flush();
  require_close(queued.W.grad(), plain.W.grad());
  REQUIRE(users_copy.to_vector<double>() == before);
}

TEST_CASE("nothing is queued under a backward observer, under check_finite, or for a weight that is not a leaf") {
  const Tensor x = microbatches()[1];
  SECTION("a backward observer") {
    struct Quiet : BackwardObserver {} observer;
    const std::shared_ptr<void> registered = add_backward_observer(&observer);
    Model m(3);
    WeightGradientQueue queue;
    {
      WeightGradientQueue::Scope deferring(queue);
      backward_of(m, x);
    }
    REQUIRE(queue.empty());
    REQUIRE(m.W.grad().defined());
  }
  SECTION("check_finite") {
    set_check_finite(true);
    Model m(3);
    WeightGradientQueue queue;
    {
      WeightGradientQueue::Scope deferring(queue);
      backward_of(m, x);
    }
    set_check_finite(false);
    REQUIRE(queue.empty());
    REQUIRE(m.W.grad().defined());
  }
  SECTION("a weight computed from a parameter") {
    Model m(3), plain(3);
    WeightGradientQueue queue;
    {
      WeightGradientQueue::Scope deferring(queue);
      F::sum(F::linear(Variable(x), F::mul(m.W, m.W), m.b)).backward();
    }
    F::sum(F::linear(Variable(x), F::mul(plain.W, plain.W), plain.b)).backward();
    REQUIRE(queue.empty());
    require_close(m.W.grad(), plain.W.grad());
  }
  SECTION("outside a scope, and a cleared queue computes nothing") {
    Model m(3);
    WeightGradientQueue queue;
    {
      WeightGradientQueue::Scope deferring(queue);
      backward_of(m, x);
    }
    REQUIRE_FALSE(queue.empty());
    queue.clear();
    REQUIRE(queue.flush() == 0);
    REQUIRE_FALSE(m.W.grad().defined());
    backward_of(m, x);  // no scope now
    REQUIRE(m.W.grad().defined());
  }
}
