// Values, gradients and errors of autograd/functions/convolution.h: convolution_2d against a
// direct seven-loop convolution in f64, gradcheck for x, W and b, f32 against f64.
#include <catch2/catch.hpp>

#include <sstream>
#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using gc_util::uniform;

namespace {

struct ConvCase {
  const char* what;
  Shape x, w;
  F::Conv2DOptions options;
  bool bias = true;
};

std::int64_t outsize(std::int64_t size, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d) {
  return (size + 2 * p - (d * (k - 1) + 1)) / s + 1;
}

// y[n, o, oy, ox] = b[o] + sum_{c, ky, kx} x[n, g * Cg + c, oy sy - py + ky dy, ox sx - px + kx dx] W[o, c, ky, kx]
// with g = o / (O / groups); taps in the padding contribute nothing.
Tensor naive_conv(const Tensor& x, const Tensor& W, const Tensor& b, const F::Conv2DOptions& p) {
  const std::vector<double> vx = x.to_vector<double>(), vw = W.to_vector<double>();
  const std::vector<double> vb = b.defined() ? b.to_vector<double>() : std::vector<double>();
  const std::int64_t N = x.size(0), C = x.size(1), H = x.size(2), Wd = x.size(3);
  const std::int64_t O = W.size(0), Cg = W.size(1), kh = W.size(2), kw = W.size(3), Og = O / p.groups;
  const std::int64_t oh = outsize(H, kh, p.stride_y, p.pad_y, p.dilate_y);
  const std::int64_t ow = outsize(Wd, kw, p.stride_x, p.pad_x, p.dilate_x);
  std::vector<double> y(N * O * oh * ow, 0.0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < O; ++o)
      for (std::int64_t oy = 0; oy < oh; ++oy)
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          double acc = vb.empty() ? 0.0 : vb[o];
          for (std::int64_t c = 0; c < Cg; ++c)
            for (std::int64_t ky = 0; ky < kh; ++ky)
              for (std::int64_t kx = 0; kx < kw; ++kx) {
                const std::int64_t iy = oy * p.stride_y - p.pad_y + ky * p.dilate_y;
                const std::int64_t ix = ox * p.stride_x - p.pad_x + kx * p.dilate_x;
                if (iy < 0 || iy >= H || ix < 0 || ix >= Wd) continue;
                const std::int64_t channel = (o / Og) * Cg + c;
                acc += vx[((n * C + channel) * H + iy) * Wd + ix] * vw[((o * Cg + c) * kh + ky) * kw + kx];
              }
          y[((n * O + o) * oh + oy) * ow + ox] = acc;
        }
  return from_vector<double>(y, {N, O, oh, ow});
}

std::vector<ConvCase> forward_cases() {
  F::Conv2DOptions uneven;
  uneven.stride_y = 2;
  uneven.stride_x = 1;
  uneven.pad_y = 0;
  uneven.pad_x = 2;
  uneven.dilate_y = 1;
  uneven.dilate_x = 2;
  return {
      {"3x3, no padding", {2, 3, 6, 6}, {4, 3, 3, 3}, {}},
      {"stride 2", {2, 3, 7, 7}, {4, 3, 3, 3}, F::Conv2DOptions::make(2)},
      {"pad 1", {2, 3, 5, 5}, {4, 3, 3, 3}, F::Conv2DOptions::make(1, 1)},
      {"stride 2, pad 1", {2, 2, 8, 8}, {3, 2, 3, 3}, F::Conv2DOptions::make(2, 1)},
      {"dilation 2", {2, 2, 9, 9}, {3, 2, 3, 3}, F::Conv2DOptions::make(1, 0, 2)},
      {"dilation 2, pad 2", {1, 2, 7, 8}, {3, 2, 3, 3}, F::Conv2DOptions::make(1, 2, 2)},
      {"groups 2", {2, 4, 6, 6}, {6, 2, 3, 3}, F::Conv2DOptions::make(1, 1, 1, 2)},
      {"depthwise (groups = channels)", {2, 3, 5, 5}, {3, 1, 3, 3}, F::Conv2DOptions().pad(1).with_groups(3)},
      {"batch 1", {1, 3, 6, 6}, {4, 3, 3, 3}, F::Conv2DOptions::make(1, 1)},
      {"1x1 kernel", {2, 5, 4, 6}, {3, 5, 1, 1}, {}},
      {"1x1 kernel, stride 2", {2, 3, 5, 5}, {4, 3, 1, 1}, F::Conv2DOptions::make(2)},
      {"1x1 kernel, pad 1", {2, 3, 3, 4}, {2, 3, 1, 1}, F::Conv2DOptions::make(1, 1)},
      {"non-square kernel and input", {2, 3, 6, 9}, {4, 3, 2, 4}, F::Conv2DOptions().pad(1, 2)},
      {"non-square everything", {2, 2, 9, 7}, {3, 2, 3, 2}, uneven},
      {"no bias", {2, 3, 6, 6}, {4, 3, 3, 3}, F::Conv2DOptions::make(1, 1), false},
      {"kernel the size of the input", {2, 3, 4, 5}, {2, 3, 4, 5}, {}},
      {"one input and one output channel", {3, 1, 5, 5}, {1, 1, 3, 3}, F::Conv2DOptions::make(1, 1)},
  };
}

std::string describe(const ConvCase& c) {
  std::ostringstream out;
  out << c.what << ": x " << shape_str(c.x) << " W " << shape_str(c.w) << " stride " << c.options.stride_y << "x"
      << c.options.stride_x << " pad " << c.options.pad_y << "x" << c.options.pad_x << " dilate "
      << c.options.dilate_y << "x" << c.options.dilate_x << " groups " << c.options.groups
      << (c.bias ? "" : " (no bias)");
  return out.str();
}

Variables conv(const Variables& v, const F::Conv2DOptions& options) {
  return {v.size() == 3 ? F::convolution_2d(v[0], v[1], v[2], options) : F::convolution_2d(v[0], v[1], Variable(), options)};
}

}  // namespace

TEST_CASE("convolution_2d matches a direct convolution in f64", "[convolution]") {
  std::uint64_t seed = 1;
  for (const ConvCase& c : forward_cases()) {
    INFO(describe(c));
    const Tensor x = uniform(c.x, seed++);
    const Tensor W = uniform(c.w, seed++);
    const Tensor b = c.bias ? uniform({c.w[0]}, seed++) : Tensor();
    const Variable y = c.bias ? F::convolution_2d(Variable(x), Variable(W), Variable(b), c.options)
                              : F::convolution_2d(Variable(x), Variable(W), Variable(), c.options);
    const Tensor want = naive_conv(x, W, b, c.options);
    REQUIRE(y.shape() == want.shape());
    REQUIRE(y.dtype() == DType::f64);
    REQUIRE_NEAR_VALUES(y.data(), want, 1e-12);
  }
}

TEST_CASE("convolution_2d forward values by hand", "[convolution]") {
  // A 3x3 image of 1..9 with a 2x2 kernel [[1, 0], [0, -1]]: y = x[i, j] - x[i + 1, j + 1] = -4.
  const Variable x(gc_util::f64({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}));
  const Variable W(gc_util::f64({1, 0, 0, -1}, {1, 1, 2, 2}));
  const Variable b(gc_util::f64({0.5}, {1}));
  REQUIRE_NEAR_VALUES(F::convolution_2d(x, W, b).data(), {-3.5, -3.5, -3.5, -3.5});
  // Pad 1, stride 2: windows start at -1 and 1; with padding zeros, y[0, 0] = -x[0, 0] = -1,
  // y[0, 1] = -x[0, 2] = -3, y[1, 0] = -x[2, 0] = -7, y[1, 1] = x[1, 1] - x[2, 2] = -4.
  REQUIRE_NEAR_VALUES(F::convolution_2d(x, W, Variable(), F::Conv2DOptions::make(2, 1)).data(), {-1, -3, -7, -4});
}

TEST_CASE("convolution_2d gradients for x, W and b", "[convolution][gradcheck]") {
  std::uint64_t seed = 100;
  // Small versions of the forward cases: every geometry, every input.
  const std::vector<ConvCase> cases = {
      {"3x3", {2, 2, 4, 4}, {3, 2, 3, 3}, {}},
      {"stride 2, pad 1", {2, 2, 5, 5}, {2, 2, 3, 3}, F::Conv2DOptions::make(2, 1)},
      {"dilation 2, pad 1", {1, 2, 5, 6}, {2, 2, 2, 3}, F::Conv2DOptions::make(1, 1, 2)},
      {"groups 2", {2, 4, 4, 4}, {4, 2, 2, 2}, F::Conv2DOptions::make(1, 1, 1, 2)},
      {"batch 1, 1x1", {1, 3, 3, 4}, {2, 3, 1, 1}, {}},
      {"1x1 stride 2", {2, 2, 5, 4}, {3, 2, 1, 1}, F::Conv2DOptions::make(2)},
      {"non-square", {2, 2, 4, 6}, {2, 2, 2, 3}, F::Conv2DOptions().stride(1, 2).pad(1, 0)},
      {"no bias", {2, 2, 4, 4}, {3, 2, 3, 3}, F::Conv2DOptions::make(1, 1), false},
  };
  for (const ConvCase& c : cases) {
    INFO(describe(c));
    const F::Conv2DOptions options = c.options;
    auto fn = [options](const Variables& v) { return conv(v, options); };
    std::vector<Tensor> inputs = {uniform(c.x, seed++), uniform(c.w, seed++)};
    if (c.bias) inputs.push_back(uniform({c.w[0]}, seed++));
    REQUIRE_GRADCHECK(fn, inputs);
  }
}

TEST_CASE("convolution_2d: only the inputs that need a gradient get one", "[convolution]") {
  const Tensor x = uniform({2, 2, 4, 4}, 200), W = uniform({3, 2, 3, 3}, 201), b = uniform({3}, 202);
  for (int constant = 0; constant < 3; ++constant) {
    INFO("input " << constant << " constant");
    GradcheckOptions options;
    options.no_grad = {constant == 0, constant == 1, constant == 2};
    REQUIRE_GRADCHECK([](const Variables& v) { return conv(v, F::Conv2DOptions::make(1, 1)); }, {x, W, b}, options);
  }
  Variable vx(x, true);
  const Variable vW(W), vb(b);
  F::sum(F::convolution_2d(vx, vW, vb, F::Conv2DOptions::make(1, 1))).backward();
  REQUIRE(vx.grad().shape() == x.shape());
  REQUIRE_FALSE(vW.grad().defined());
  REQUIRE_FALSE(vb.grad().defined());
  // d sum(y) / db = N * out_h * out_w for every output channel.
  const Variable cx(x);
  Variable cb(b, true);
  F::sum(F::convolution_2d(cx, vW, cb, F::Conv2DOptions::make(1, 1))).backward();
  REQUIRE_NEAR_VALUES(cb.grad(), {32, 32, 32});
}

TEST_CASE("convolution_2d in f32 matches f64 within 1e-4 relative", "[convolution][f32]") {
  const std::vector<ConvCase> cases = {
      {"3x3 pad 1", {4, 8, 10, 10}, {16, 8, 3, 3}, F::Conv2DOptions::make(1, 1)},
      {"stride 2, groups 2", {3, 8, 9, 9}, {6, 4, 3, 3}, F::Conv2DOptions::make(2, 1, 1, 2)},
      {"1x1", {2, 16, 6, 6}, {8, 16, 1, 1}, {}},
  };
  std::uint64_t seed = 300;
  for (const ConvCase& c : cases) {
    INFO(describe(c));
    const std::vector<Tensor> inputs = {uniform(c.x, seed++), uniform(c.w, seed++), uniform({c.w[0]}, seed++)};
    const Tensor gy = uniform(naive_conv(inputs[0], inputs[1], inputs[2], c.options).shape(), seed++);
    std::vector<Variables> leaves(2);
    std::vector<Variable> ys(2);
    const DType dtypes[2] = {DType::f32, DType::f64};
    for (int p = 0; p < 2; ++p) {
      for (const Tensor& t : inputs) leaves[p].emplace_back(t.to(dtypes[p]).clone(), true);
      ys[p] = conv(leaves[p], c.options)[0];
      REQUIRE(ys[p].dtype() == dtypes[p]);
      ys[p].backward(gy.to(dtypes[p]));
    }
    auto check = [](const Tensor& a, const Tensor& b) {
      const std::string mismatch = gc_util::relative_mismatch(a, b, 1e-4);
      INFO(mismatch);
      REQUIRE(mismatch.empty());
    };
    check(ys[0].data(), ys[1].data());
    for (int i = 0; i < 3; ++i) {
      INFO("gradient of input " << i);
      REQUIRE(leaves[0][i].grad().dtype() == DType::f32);
      check(leaves[0][i].grad(), leaves[1][i].grad());
    }
  }
}

TEST_CASE("convolution_2d with options built in different ways", "[convolution]") {
  const F::Conv2DOptions a = F::Conv2DOptions::make(2, 1, 2, 3);
  CHECK(a.stride_y == 2);
  CHECK(a.stride_x == 2);
  CHECK(a.pad_y == 1);
  CHECK(a.pad_x == 1);
  CHECK(a.dilate_y == 2);
  CHECK(a.dilate_x == 2);
  CHECK(a.groups == 3);
  const F::Conv2DOptions b = F::Conv2DOptions().stride(2, 1).pad(0, 3).dilate(1, 2).with_groups(2);
  CHECK(b.stride_y == 2);
  CHECK(b.stride_x == 1);
  CHECK(b.pad_y == 0);
  CHECK(b.pad_x == 3);
  CHECK(b.dilate_y == 1);
  CHECK(b.dilate_x == 2);
  CHECK(b.groups == 2);
  F::Conv2DOptions c;
  c.groups = 2;
  const Variable x(uniform({1, 4, 5, 5}, 400)), W(uniform({2, 2, 3, 3}, 401));
  REQUIRE(F::convolution_2d(x, W, Variable(), c).shape() == Shape{1, 2, 3, 3});
}

TEST_CASE("convolution_2d reports bad operands", "[convolution][errors]") {
  const Variable x(uniform({2, 3, 5, 5}, 500), true);
  SECTION("channel mismatch names both shapes") {
    const Variable W(uniform({4, 2, 3, 3}, 501), true);
    REQUIRE_THROWS_AS(F::convolution_2d(x, W), Error);
    REQUIRE_THROWS_WITH(F::convolution_2d(x, W),
                        Contains("channel") && Contains("[2, 3, 5, 5]") && Contains("[4, 2, 3, 3]"));
  }
  SECTION("kernel larger than the padded input") {
    const Variable W(uniform({4, 3, 6, 6}, 502), true);
    REQUIRE_THROWS_WITH(F::convolution_2d(x, W), Contains("larger than the padded input") && Contains("6x6"));
    REQUIRE_NOTHROW(F::convolution_2d(x, W, Variable(), F::Conv2DOptions::make(1, 1)));
    // Dilation makes a 3x3 kernel 7x7.
    const Variable W3(uniform({4, 3, 3, 3}, 503), true);
    REQUIRE_THROWS_WITH(F::convolution_2d(x, W3, Variable(), F::Conv2DOptions::make(1, 0, 3)),
                        Contains("dilated to 7x7"));
  }
  SECTION("groups that do not divide the channels") {
    const Variable W(uniform({4, 1, 3, 3}, 504), true);
    REQUIRE_THROWS_WITH(F::convolution_2d(x, W, Variable(), F::Conv2DOptions::make(1, 0, 1, 2)),
                        Contains("groups=2") && Contains("does not divide") && Contains("[2, 3, 5, 5]"));
    const Variable x4(uniform({2, 4, 5, 5}, 505), true);
    const Variable W3out(uniform({3, 2, 3, 3}, 506), true);
    REQUIRE_THROWS_WITH(F::convolution_2d(x4, W3out, Variable(), F::Conv2DOptions::make(1, 0, 1, 2)),
                        Contains("groups=2") && Contains("output channels"));
    REQUIRE_THROWS_WITH(F::convolution_2d(x4, W3out, Variable(), F::Conv2DOptions::make(1, 0, 1, 0)),
                        Contains("groups must be >= 1"));
  }
  SECTION("wrong dtypes") {
    const Variable W(uniform({4, 3, 3, 3}, 507), true);
    const Variable W32(uniform({4, 3, 3, 3}, 508, -1, 1, DType::f32), true);
    REQUIRE_THROWS_WITH(F::convolution_2d(x, W32), Contains("different dtypes") && Contains("f32") && Contains("f64"));
    const Variable b32(uniform({4}, 509, -1, 1, DType::f32), true);
    REQUIRE_THROWS_WITH(F::convolution_2d(x, W, b32), Contains("different dtypes"));
    const Variable xi(tandem::zeros({2, 3, 5, 5}, DType::i32));
    const Variable Wi(tandem::zeros({4, 3, 3, 3}, DType::i32));
    REQUIRE_THROWS_WITH(F::convolution_2d(xi, Wi), Contains("convolution") || Contains("conv2d"));
    REQUIRE_THROWS_WITH(F::convolution_2d(xi, Wi), Contains("floating"));
  }
  SECTION("wrong ranks and bias shape") {
    const Variable W(uniform({4, 3, 3, 3}, 510), true);
    REQUIRE_THROWS_WITH(F::convolution_2d(F::reshape(x, {6, 5, 5}), W), Contains("4-D") && Contains("[6, 5, 5]"));
    REQUIRE_THROWS_WITH(F::convolution_2d(x, F::reshape(W, {4, 27})), Contains("4-D") && Contains("[4, 27]"));
    const Variable b(uniform({3}, 511), true);
    REQUIRE_THROWS_WITH(F::convolution_2d(x, W, b), Contains("b f64[3]") && Contains("[4, 3, 3, 3]"));
    REQUIRE_THROWS_WITH(F::convolution_2d(x, W, Variable(), F::Conv2DOptions::make(0)), Contains("stride"));
    REQUIRE_THROWS_WITH(F::convolution_2d(x, W, Variable(), F::Conv2DOptions::make(1, -1)), Contains("pad"));
  }
}

TEST_CASE("convolution_2d with an empty batch", "[convolution]") {
  Variable x(tandem::zeros({0, 2, 4, 4}, DType::f64), true);
  Variable W(uniform({3, 2, 3, 3}, 600), true), b(uniform({3}, 601), true);
  const Variable y = F::convolution_2d(x, W, b, F::Conv2DOptions::make(1, 1));
  REQUIRE(y.shape() == Shape{0, 3, 4, 4});
  F::sum(y).backward();
  REQUIRE(x.grad().shape() == x.shape());
  REQUIRE_NEAR_VALUES(W.grad(), std::vector<double>(54, 0.0), 0);
  REQUIRE_NEAR_VALUES(b.grad(), {0, 0, 0}, 0);
}
