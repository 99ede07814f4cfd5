// The README's "API in a page" snippet, compiled and run, so the documentation cannot rot.
#include <catch2/catch.hpp>

#include "autograd/functions.h"
#include "core/ops.h"

using namespace tandem;

TEST_CASE("the README API snippet compiles and computes what it says", "[readme]") {
  Generator gen(42);
  Tensor a = randn({2, 3}, gen);
  Tensor b = from_vector<float>({1, 2, 3}, {3});
  Tensor c = a * b + 1.0;
  Tensor d = matmul(a, transpose(a));
  Tensor s = sum(a, {1}, /*keepdims=*/true);
  Tensor v = a.reshape({3, 2});
  Tensor w = a.clone().to(DType::f64);
  auto parts = split(a, 3, /*axis=*/1);
  std::vector<float> host = a.to_vector<float>();
  REQUIRE(c.shape() == Shape{2, 3});
  REQUIRE(d.shape() == Shape{2, 2});
  REQUIRE(s.shape() == Shape{2, 1});
  REQUIRE(v.shares_storage_with(a));
  REQUIRE(w.dtype() == DType::f64);
  REQUIRE(parts.size() == 3);
  REQUIRE(c.to_vector<float>()[1] == Approx(host[1] * 2 + 1));
  REQUIRE_THROWS_AS(add(a, w), Error);

  Variable x(randn({8, 784}, gen));
  Variable W(randn({10, 784}, gen, 0, 0.03), /*requires_grad=*/true);
  Variable bias(zeros({10}), true);
  Variable t(from_vector<std::int64_t>({0, 1, 2, 3, 4, 5, 6, 7}));
  Variable loss = F::softmax_cross_entropy(F::linear(x, W, bias), t);
  loss.backward();
  REQUIRE(W.grad().shape() == Shape{10, 784});
  REQUIRE(bias.grad().shape() == Shape{10});
  // The bias gradient of a mean cross-entropy sums to zero over classes (softmax - one-hot).
  REQUIRE(sum(bias.grad()).item() == Approx(0.0).margin(1e-6));
  {
    NoGradGuard no_grad;
    REQUIRE(F::relu(W).is_leaf());
  }
  {
    TrainModeGuard test_mode(false);
    REQUIRE(F::dropout(x).same_as(x));
  }
}
