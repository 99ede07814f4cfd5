// Gradients and behaviour of autograd/functions/activation.h: relu, leaky_relu, sigmoid, tanh.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using gc_util::away_from_zero;
using gc_util::uniform;

namespace {

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> list = {{3, 4}, {}, {1}, {1, 6}, {2, 3, 2}};
  return list;
}

}  // namespace

TEST_CASE("relu and leaky_relu gradients away from the kink", "[activation][gradcheck]") {
  // |x| >= 0.05 > eps = 1e-3: the central differences never straddle 0.
  std::uint64_t seed = 1;
  for (const Shape& shape : shapes()) {
    INFO("shape " << shape_str(shape));
    const Tensor x = away_from_zero(shape, seed++, 0.05, 2.0);
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::relu(v[0])}; }, {x});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::leaky_relu(v[0])}; }, {x});
    for (double slope : {0.0, 0.01, 0.5, 1.0, 2.0}) {
      INFO("slope " << slope);
      REQUIRE_GRADCHECK([slope](const Variables& v) -> Variables { return {F::leaky_relu(v[0], slope)}; }, {x});
    }
  }
}

TEST_CASE("sigmoid and tanh gradients", "[activation][gradcheck]") {
  std::uint64_t seed = 100;
  for (const Shape& shape : shapes()) {
    INFO("shape " << shape_str(shape));
    const Tensor x = uniform(shape, seed++, -3, 3);
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::sigmoid(v[0])}; }, {x});
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::tanh(v[0])}; }, {x});
  }
  // Saturated regions: the gradients are tiny but still right.
  const Tensor large = gc_util::f64({-20, -8, 8, 20}, {4});
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::sigmoid(v[0])}; }, {large});
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::tanh(v[0])}; }, {large});
}

TEST_CASE("activation forward values", "[activation]") {
  const Variable x(gc_util::f64({-2, -0.5, 0, 0.5, 3}, {5}));
  REQUIRE_NEAR_VALUES(F::relu(x).data(), {0, 0, 0, 0.5, 3});
  REQUIRE_NEAR_VALUES(F::leaky_relu(x).data(), {-0.4, -0.1, 0, 0.5, 3});  // default slope 0.2
  REQUIRE_NEAR_VALUES(F::leaky_relu(x, 0.1).data(), {-0.2, -0.05, 0, 0.5, 3});
  std::vector<double> sig, th;
  for (double v : {-2.0, -0.5, 0.0, 0.5, 3.0}) {
    sig.push_back(1 / (1 + std::exp(-v)));
    th.push_back(std::tanh(v));
  }
  REQUIRE_NEAR_VALUES(F::sigmoid(x).data(), sig);
  REQUIRE_NEAR_VALUES(F::tanh(x).data(), th);
  // Extreme inputs saturate without overflow or NaN.
  const Variable big(gc_util::f64({-1000, 1000}, {2}));
  REQUIRE_NEAR_VALUES(F::sigmoid(big).data(), {0, 1});
  REQUIRE_NEAR_VALUES(F::tanh(big).data(), {-1, 1});
}

TEST_CASE("activation gradients by hand, including at exactly 0", "[activation]") {
  Variable x(gc_util::f64({-2, -0.5, 0, 0.5, 3}, {5}), true);
  F::sum(F::relu(x)).backward();
  REQUIRE_NEAR_VALUES(x.grad(), {0, 0, 0, 1, 1});  // the gradient at 0 is taken as 0 (Chainer)
  x.cleargrad();
  F::sum(F::leaky_relu(x, 0.3)).backward();
  REQUIRE_NEAR_VALUES(x.grad(), {0.3, 0.3, 0.3, 1, 1});
  x.cleargrad();
  F::sum(F::sigmoid(x)).backward();
  std::vector<double> ds, dt;
  for (double v : {-2.0, -0.5, 0.0, 0.5, 3.0}) {
    const double s = 1 / (1 + std::exp(-v));
    ds.push_back(s * (1 - s));
    dt.push_back(1 - std::tanh(v) * std::tanh(v));
  }
  REQUIRE_NEAR_VALUES(x.grad(), ds);
  x.cleargrad();
  F::sum(F::tanh(x)).backward();
  REQUIRE_NEAR_VALUES(x.grad(), dt);
}

TEST_CASE("activations of a constant record no graph; chained activations backpropagate", "[activation]") {
  const Variable c(gc_util::f64({-1, 1}, {2}));
  for (const Variable& y : {F::relu(c), F::leaky_relu(c), F::sigmoid(c), F::tanh(c)}) {
    REQUIRE_FALSE(y.requires_grad());
    REQUIRE(y.is_leaf());
  }
  const Tensor x = away_from_zero({3, 4}, 200, 0.05, 2.0);
  const Tensor w = uniform({3, 4}, 201);
  auto fn = [](const Variables& v) -> Variables {
    return {F::tanh(F::mul(F::sigmoid(v[0]), v[1])), F::relu(F::leaky_relu(v[0], 0.1))};
  };
  REQUIRE_GRADCHECK(fn, {x, w});
  // Only the constant-free path: w constant, its gradient stays undefined.
  Variable xv(x, true);
  const Variable wv(w);
  F::sum(F::tanh(F::mul(xv, wv))).backward();
  REQUIRE(xv.grad().defined());
  REQUIRE_FALSE(wv.grad().defined());
}

TEST_CASE("activations in f32 agree with f64", "[activation][f32]") {
  const Tensor x = away_from_zero({4, 5}, 300, 0.05, 3.0);
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::relu(v[0])}; }, {x});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::leaky_relu(v[0])}; }, {x});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::sigmoid(v[0])}; }, {x});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::tanh(v[0])}; }, {x});
  gc_util::check_f32_against_f64([](const Variables& v) -> Variables { return {F::gelu(v[0])}; }, {x});
}

TEST_CASE("gelu: the tanh form's values and gradients", "[activation][gradcheck]") {
  std::uint64_t seed = 40;
  for (const Shape& shape : shapes()) {
    INFO("shape " << shape_str(shape));
    const Tensor x = uniform(shape, seed++, -3, 3);
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::gelu(v[0])}; }, {x});
    const std::vector<double> in = x.to_vector<double>(), out = F::gelu(Variable(x)).data().to_vector<double>();
    for (std::size_t i = 0; i < in.size(); ++i) {
      const double v = in[i];
      const double want = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      CHECK(out[i] == Approx(want).epsilon(1e-14).margin(1e-15));
    }
  }
  // A long tensor: the backward kernel runs in blocks (of 512), each with its own upstream gradient.
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(dtype_name(dtype));
    Variable x(uniform({3, 1001}, seed++, -4, 4).to(dtype), true);
    const Tensor w = uniform({3, 1001}, seed++, -2, 2).to(dtype);
    F::sum(F::gelu(x) * Variable(w)).backward();
    const std::vector<double> in = x.data().to_vector<double>(), ws = w.to_vector<double>(),
                              grad = x.grad().to_vector<double>();
    for (std::size_t i = 0; i < in.size(); ++i) {
      const double v = in[i], k = std::sqrt(2 / M_PI), t = std::tanh(k * (v + 0.044715 * v * v * v));
      const double want = ws[i] * (0.5 * (1 + t) + 0.5 * k * v * (1 - t * t) * (1 + 3 * 0.044715 * v * v));
      INFO("element " << i);
      REQUIRE(grad[i] == Approx(want).epsilon(dtype == DType::f64 ? 1e-13 : 1e-5).margin(dtype == DType::f64 ? 1e-13 : 2e-5));
    }
  }
  // Known values: gelu(0) = 0, gelu(1) = 0.8411920..., gelu(-1) = -0.1588079...
  const std::vector<double> y = F::gelu(Variable(from_vector(std::vector<double>{0, 1, -1}, {3}))).data().to_vector<double>();
  CHECK(y[0] == 0);
  CHECK(y[1] == Approx(0.8411919906082768).epsilon(1e-12));
  CHECK(y[2] == Approx(-0.15880800939172324).epsilon(1e-12));
}
