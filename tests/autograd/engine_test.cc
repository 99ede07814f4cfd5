// The backward engine: tape order, accumulation, seeds, deep graphs, freed graphs, no-grad,
// delegates (size-0 outputs) and unchaining.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "autograd/functions.h"
#include "core/ops.h"

using namespace tandem;

namespace {

Variable scalar_var(double v, bool requires_grad = true) {
  return Variable(full({}, v, DType::f64), requires_grad);
}

// Identity that records, in `log`, the sequence number of each node whose backward runs.
class Probe : public FunctionNode {
 public:
  explicit Probe(std::vector<std::int64_t>* log, bool always = false) : log_(log), always_(always) {}
  std::string name() const override { return "probe"; }
  bool always_run_backward() const override { return always_; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0]}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    log_->push_back(sequence_number());
    return {gy[0]};
  }

 private:
  std::vector<std::int64_t>* log_;
  bool always_;
};

// Consumes x and returns a size-0 "delegate" output, like comm's send.
class DelegateMaker : public FunctionNode {
 public:
  explicit DelegateMaker(bool* ran) : ran_(ran) {}
  std::string name() const override { return "delegate_maker"; }
  bool always_run_backward() const override { return true; }
  bool zero_fill_grad_outputs() const override { return false; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    shape_ = in[0].shape();
    return {zeros({0}, in[0].dtype())};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    *ran_ = true;
    REQUIRE_FALSE(gy[0].defined());  // no gradient reached the delegate
    return {full(shape_, 3.0, DType::f64)};
  }

 private:
  bool* ran_;
  Shape shape_;
};

class WrongShapeGrad : public FunctionNode {
 public:
  std::string name() const override { return "wrong_shape_grad"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0].clone()}; }
  std::vector<Tensor> backward(const std::vector<Tensor>&) override { return {zeros({7}, DType::f64)}; }
};

}  // namespace

TEST_CASE("backward of a scalar seeds one and reaches the leaves", "[engine]") {
  Variable x = scalar_var(3.0);
  Variable y = F::mul(x, x) + x * 2.0;  // dy/dx = 2x + 2
  y.backward();
  REQUIRE(x.grad().item() == Approx(8.0));
}

TEST_CASE("a variable used several times accumulates its gradient", "[engine]") {
  Variable x(from_vector<double>({1, 2, 3}), true);
  Variable y = F::sum(x * x * x + x);  // 3x^2 + 1
  y.backward();
  REQUIRE(x.grad().to_vector<double>() == std::vector<double>{4, 13, 28});
}

TEST_CASE("gradients accumulate across backward calls until cleargrad", "[engine]") {
  Variable x = scalar_var(2.0);
  (x * 5.0).backward();
  (x * 5.0).backward();
  REQUIRE(x.grad().item() == Approx(10.0));
  x.cleargrad();
  REQUIRE_FALSE(x.grad().defined());
  (x * 5.0).backward();
  REQUIRE(x.grad().item() == Approx(5.0));
}

TEST_CASE("a leaf's gradient is never shared with another leaf", "[engine]") {
  // add hands one tensor to both inputs; an optimizer updating one gradient in place must not
  // change the other.
  Variable a(from_vector<double>({1, 2}), true), b(from_vector<double>({3, 4}), true);
  F::sum(a + b).backward();
  REQUIRE_FALSE(a.grad().shares_storage_with(b.grad()));
}

TEST_CASE("non-scalar outputs need an explicit seed", "[engine]") {
  Variable x(from_vector<double>({1, 2}), true);
  Variable y = x * 3.0;
  REQUIRE_THROWS_WITH(y.backward(), Catch::Contains("not a scalar") && Catch::Contains("[2]"));
  REQUIRE_THROWS_WITH(y.backward(from_vector<double>({1, 2, 3})), Catch::Contains("does not match"));
  y.backward(from_vector<double>({1, 10}));
  REQUIRE(x.grad().to_vector<double>() == std::vector<double>{3, 30});
}

TEST_CASE("nodes run in strictly decreasing sequence number", "[engine]") {
  std::vector<std::int64_t> log;
  Variable x = scalar_var(1.0);
  // Two branches created in an interleaved order, then joined.
  Variable a = call<Probe>({x}, &log)[0];
  Variable b = call<Probe>({x}, &log)[0];
  Variable a2 = call<Probe>({a}, &log)[0];
  Variable b2 = call<Probe>({b}, &log)[0];
  Variable c = call<Probe>({a2 + b2}, &log)[0];
  c.backward();
  REQUIRE(log.size() == 5);
  for (std::size_t i = 1; i < log.size(); ++i) REQUIRE(log[i - 1] > log[i]);
  REQUIRE(x.grad().item() == Approx(2.0));
}

TEST_CASE("backward through a chain of 100,000 nodes and its destruction do not recurse", "[engine]") {
  Variable x = scalar_var(0.0);
  {
    Variable h = x;
    for (int i = 0; i < 100000; ++i) h = h + 1.0;
    REQUIRE(h.data().item() == Approx(100000.0));
    h.backward();
    REQUIRE(x.grad().item() == Approx(1.0));
  }
  // A graph that is never backpropagated is freed iteratively too.
  {
    Variable h = x;
    for (int i = 0; i < 100000; ++i) h = h * 1.0;
  }
  SUCCEED("no stack overflow");
}

TEST_CASE("a second backward through a freed graph is a clear error", "[engine]") {
  Variable x = scalar_var(2.0);
  Variable y = F::mul(x, x);
  y.backward();
  REQUIRE_THROWS_WITH(y.backward(), Catch::Contains("already freed") && Catch::Contains("mul"));
}

TEST_CASE("retain_graph allows backward twice", "[engine]") {
  Variable x = scalar_var(2.0);
  Variable y = F::mul(x, x);
  y.backward(BackwardOptions{true, false});
  y.backward();
  REQUIRE(x.grad().item() == Approx(8.0));
}

TEST_CASE("retain_grad keeps intermediate gradients", "[engine]") {
  Variable x = scalar_var(2.0);
  Variable h = x * 3.0;
  Variable y = F::mul(h, h);
  y.backward();
  REQUIRE_FALSE(h.grad().defined());
  Variable h2 = x * 3.0;
  Variable y2 = F::mul(h2, h2);
  y2.backward(BackwardOptions{false, true});
  REQUIRE(h2.grad().item() == Approx(12.0));
}

TEST_CASE("no-grad guard records nothing", "[engine]") {
  Variable x = scalar_var(2.0);
  Variable y;
  {
    NoGradGuard guard;
    y = x * 3.0;
  }
  REQUIRE(y.is_leaf());
  REQUIRE_FALSE(y.requires_grad());
  REQUIRE(grad_enabled());
  Variable z = x * 3.0;
  REQUIRE_FALSE(z.is_leaf());
}

TEST_CASE("inputs that do not require grad get none and stop the walk", "[engine]") {
  Variable w(from_vector<double>({2, 3}), false);
  Variable x(from_vector<double>({5, 7}), true);
  F::sum(w * x).backward();
  REQUIRE_FALSE(w.grad().defined());
  REQUIRE(x.grad().to_vector<double>() == std::vector<double>{2, 3});
}

TEST_CASE("backward on a size-0 delegate walks the graph with no seed", "[engine]") {
  bool ran = false;
  Variable x(from_vector<double>({1, 2}), true);
  Variable h = x * 2.0;
  Variable delegate = call<DelegateMaker>({h}, &ran)[0];
  REQUIRE(delegate.numel() == 0);
  delegate.backward();
  REQUIRE(ran);
  REQUIRE(x.grad().to_vector<double>() == std::vector<double>{6, 6});
}

TEST_CASE("nodes without a gradient still let communication nodes behind them run", "[engine]") {
  std::vector<std::int64_t> log;
  Variable x = scalar_var(1.0);
  Variable comm_like = call<Probe>({x}, &log, true)[0];
  Variables pieces = F::split_axis(F::reshape(comm_like, {1}) * 1.0, std::vector<std::int64_t>{}, 0);
  Variable unrelated = scalar_var(4.0);
  // The loss depends on `unrelated` only; pieces[0] is reachable via the zero-weight product.
  Variable loss = F::sum(pieces[0]) * 0.0 + unrelated;
  loss.backward();
  REQUIRE(log.size() == 1);
}

TEST_CASE("unchain_backward cuts the graph", "[engine]") {
  Variable x = scalar_var(2.0);
  Variable h = x * 3.0;
  Variable y = h * 4.0;
  h.unchain_backward();
  REQUIRE(h.is_leaf());
  y.backward();
  REQUIRE_FALSE(x.grad().defined());
}

TEST_CASE("a gradient of the wrong shape names the function", "[engine]") {
  Variable x(from_vector<double>({1, 2}), true);
  Variable y = call<WrongShapeGrad>({x})[0];
  REQUIRE_THROWS_WITH(F::sum(y).backward(), Catch::Contains("wrong_shape_grad") && Catch::Contains("[7]"));
}

TEST_CASE("integer variables cannot require a gradient", "[engine]") {
  REQUIRE_THROWS_AS(Variable(from_vector<std::int64_t>({1, 2}), true), Error);
  Variable t(from_vector<std::int64_t>({1, 2}));
  REQUIRE_THROWS_AS(t.set_requires_grad(true), Error);
}

TEST_CASE("recorded outputs link to a creator with a sequence number; later nodes get larger ones", "[engine]") {
  Variable x(from_vector<double>({1, 2}), true);
  Variable y = x * 2.0;
  Variable z = y * 2.0;
  REQUIRE(y.requires_grad());
  REQUIRE(y.creator() != nullptr);
  REQUIRE(z.creator()->sequence_number() > y.creator()->sequence_number());
  REQUIRE(z.creator()->inputs()[0] == y.node());
}
