// A ReLU taken into linear and convolution_2d (autograd/functions/fused_activation.h): asked for
// (the activation argument, the links' options) or joined by F::relu of a temporary output
// (FunctionNode::absorb_relu). Values and gradients against the unfused functions and gradcheck;
// the cases where F::relu must not overwrite its argument.
#include <catch2/catch.hpp>

#include <algorithm>

#include "autograd/grad_mode.h"
#include "layers/links/convolution_2d.h"
#include "layers/links/linear.h"
#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using gc_util::uniform;

namespace {

const auto kRelu = F::Activation::relu;

struct Grads {
  Tensor y, gx, gW, gb;
};

// y = fn(x, W, b) and the gradients of sum(y * weights) (weights fixed, of y's shape).
template <typename Fn>
Grads run(const Fn& fn, const Tensor& x, const Tensor& W, const Tensor& b) {
  Variable vx(x, true), vW(W, true), vb(b, true);
  const Variable y = fn(vx, vW, vb);
  const Variable weights(uniform(y.shape(), 99, -1, 1, y.dtype()));
  F::sum(F::mul(y, weights)).backward();
  return {y.data(), vx.grad(), vW.grad(), vb.grad()};
}

void require_same(const Grads& got, const Grads& want, double tol) {
  REQUIRE_NEAR_VALUES(got.y, want.y, tol);
  REQUIRE_NEAR_VALUES(got.gx, want.gx, tol);
  REQUIRE_NEAR_VALUES(got.gW, want.gW, tol);
  REQUIRE_NEAR_VALUES(got.gb, want.gb, tol);
}

std::string creator_name(const Variable& v) { return v.creator() ? v.creator()->name() : "(none)"; }

}  // namespace

TEST_CASE("linear with a ReLU: the values and gradients of relu(linear), gradcheck", "[fused]") {
  const Tensor x = uniform({4, 3, 2}, 1), W = uniform({5, 6}, 2), b = uniform({5}, 3);
  const Grads unfused = run([](const Variable& x, const Variable& W, const Variable& b) {
    const Variable y = F::linear(x, W, b);
    return F::relu(y);  // an lvalue: its own function
  }, x, W, b);
  const Grads asked = run([](const Variable& x, const Variable& W, const Variable& b) {
    return F::linear(x, W, b, kRelu);
  }, x, W, b);
  const Grads joined = run([](const Variable& x, const Variable& W, const Variable& b) {
    return F::relu(F::linear(x, W, b));  // a temporary: taken into linear
  }, x, W, b);
  // Some units are cut by the ReLU and some pass, or the test would prove little.
  const std::vector<double> ys = unfused.y.to_vector<double>();
  REQUIRE(std::count(ys.begin(), ys.end(), 0.0) > 2);
  REQUIRE(std::count_if(ys.begin(), ys.end(), [](double v) { return v > 0; }) > 2);
  require_same(asked, unfused, 0);
  require_same(joined, unfused, 0);
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::linear(v[0], v[1], v[2], kRelu)}; },
                    {gc_util::away_from_zero({3, 4}, 4), uniform({2, 4}, 5), uniform({2}, 6)});
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::relu(F::linear(v[0], v[1]))}; },
                    {gc_util::away_from_zero({3, 4}, 7), uniform({2, 4}, 8)});
}

TEST_CASE("convolution_2d with a ReLU: the values and gradients of relu(convolution_2d), gradcheck", "[fused]") {
  const auto options = F::Conv2DOptions::make(1, 1);
  for (DType dtype : {DType::f64, DType::f32}) {  // f32 runs on oneDNN (the post-op) or im2col
    INFO(dtype_name(dtype));
    const Tensor x = uniform({2, 3, 6, 5}, 11, -1, 1, dtype), W = uniform({4, 3, 3, 3}, 12, -1, 1, dtype);
    const Tensor b = uniform({4}, 13, -1, 1, dtype);
    const Grads unfused = run([&](const Variable& x, const Variable& W, const Variable& b) {
      const Variable y = F::convolution_2d(x, W, b, options);
      return F::relu(y);
    }, x, W, b);
    const Grads asked = run([&](const Variable& x, const Variable& W, const Variable& b) {
      return F::convolution_2d(x, W, b, options, kRelu);
    }, x, W, b);
    const Grads joined = run([&](const Variable& x, const Variable& W, const Variable& b) {
      return F::relu(F::convolution_2d(x, W, b, options));
    }, x, W, b);
    const double tol = dtype == DType::f64 ? 0 : 1e-5;
    require_same(asked, unfused, tol);
    require_same(joined, unfused, 0);
  }
  REQUIRE_GRADCHECK([&](const Variables& v) -> Variables { return {F::convolution_2d(v[0], v[1], v[2], options, kRelu)}; },
                    {uniform({1, 2, 4, 4}, 14), uniform({3, 2, 3, 3}, 15), uniform({3}, 16)});
}

TEST_CASE("F::relu of a temporary joins linear and convolution_2d; one function is recorded", "[fused]") {
  const Variable x(uniform({3, 4}, 21), true), W(uniform({5, 4}, 22), true), b(uniform({5}, 23), true);
  const Variable y = F::relu(F::linear(x, W, b));
  CHECK(creator_name(y) == "linear+relu");
  CHECK(y.creator()->inputs()[0] == x.node());
  const Variable img(uniform({1, 2, 5, 5}, 24), true), K(uniform({3, 2, 3, 3}, 25), true);
  CHECK(creator_name(F::relu(F::convolution_2d(img, K))) == "convolution_2d+relu");
  // Asked for and then given to F::relu again: the second ReLU is a function of its own.
  const Variable twice = F::relu(F::linear(x, W, b, kRelu));
  CHECK(creator_name(twice) == "relu");
  CHECK(twice.creator()->inputs()[0]->creator->name() == "linear+relu");
  // And the links' options ask for it.
  LinearOptions linear_options;
  linear_options.activation = kRelu;
  linear_options.dtype = DType::f64;
  Linear linear(4, 5, linear_options);
  CHECK(creator_name(linear(x)) == "linear+relu");
  auto conv_options = Convolution2DOptions::make(3, 1, 1);
  conv_options.activation = kRelu;
  conv_options.dtype = DType::f64;
  Convolution2D conv(2, 3, conv_options);
  CHECK(creator_name(conv(img)) == "convolution_2d+relu");
  const Variable unfused = F::relu(F::convolution_2d(img, conv.W(), conv.b(), F::Conv2DOptions::make(1, 1)));
  REQUIRE_NEAR_VALUES(conv(img).data(), unfused.data(), 0);
}

TEST_CASE("F::relu never overwrites what something else can still see", "[fused]") {
  const Tensor xt = uniform({3, 4}, 31), Wt = uniform({5, 4}, 32);
  const Variable x(xt, true), W(Wt, true);
  const Tensor pre = F::linear(Variable(xt), Variable(Wt)).data();  // the values before any ReLU
  REQUIRE(gc_util::values(pre) != gc_util::values(maximum(pre, 0.0)));

  SECTION("a named variable") {
    const Variable a = F::linear(x, W);
    const Variable y = F::relu(a);
    CHECK(creator_name(y) == "relu");
    REQUIRE_NEAR_VALUES(a.data(), pre, 0);
  }
  SECTION("a variable another function has taken: its gradient is not masked") {
    Variable a = F::linear(x, W);
    const Variable s = F::sum(a);
    const Variable y = F::relu(std::move(a));
    CHECK(creator_name(y) == "relu");
    F::add(s, F::sum(y)).backward();
    // d/dx of sum(xW^T) + sum(relu(xW^T)) = (1 + [pre > 0]) W summed over the units.
    const Tensor mask = add(greater(pre, 0.0).to(DType::f64), 1.0);
    REQUIRE_NEAR_VALUES(x.grad(), matmul(mask, Wt), 1e-12);
  }
  SECTION("a view of its data") {
    Variable a = F::linear(x, W);
    const Variable view = F::reshape(a, {15});
    const Variable y = F::relu(std::move(a));
    CHECK(creator_name(y) == "relu");
    REQUIRE_NEAR_VALUES(view.data(), pre.reshape({15}), 0);
  }
  SECTION("its data held as a tensor, or viewed without a graph") {
    Variable a = F::linear(x, W);
    const Tensor held = a.data();
    CHECK(creator_name(F::relu(std::move(a))) == "relu");
    REQUIRE_NEAR_VALUES(held, pre, 0);
    NoGradGuard no_grad;
    Variable b = F::linear(x, W);
    const Variable view = F::reshape(b, {15});
    const Variable y = F::relu(std::move(b));
    REQUIRE_NEAR_VALUES(view.data(), pre.reshape({15}), 0);
    REQUIRE_NEAR_VALUES(y.data(), maximum(pre, 0.0), 0);
  }
  SECTION("a leaf that requires a gradient, even one no one else holds: the graph keeps it") {
    const Variable y = F::relu(Variable(pre.clone(), true));
    CHECK(creator_name(y) == "relu");
    REQUIRE(y.creator()->inputs()[0]->requires_grad);
  }
  SECTION("without a graph the data is overwritten in place, as nothing else can see it") {
    NoGradGuard no_grad;
    const Variable y = F::relu(F::linear(x, W));
    CHECK(creator_name(y) == "(none)");
    REQUIRE_NEAR_VALUES(y.data(), maximum(pre, 0.0), 0);
  }
  SECTION("a function that cannot take it in (sum's output): a function of its own") {
    const Variable y = F::relu(F::sum(F::linear(x, W), {1}));
    CHECK(creator_name(y) == "relu");
  }
}
