// Values, gradients and errors of autograd/functions/deconvolution.h: deconvolution_2d against a
// direct scatter loop in f64 (every input pixel times the kernel added into the output), its
// adjointness to convolution_2d, gradcheck for x, W and b over strides, pads, dilations and
// kernel sizes, explicit output sizes, f32 against f64, and the errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <optional>
#include <sstream>
#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using gc_util::uniform;

namespace {

struct DeconvCase {
  const char* what;
  Shape x, w;  // x [N, in_c, h, w], W [in_c, out_c / groups, kh, kw]
  F::Conv2DOptions options;
  bool bias = true;
  std::optional<std::int64_t> out_h = std::nullopt, out_w = std::nullopt;
};

// Chainer's get_deconv_outsize without cover_all.
std::int64_t deconv_outsize(std::int64_t size, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d) {
  return s * (size - 1) + d * (k - 1) + 1 - 2 * p;
}

// y[n, g * Og + o, iy sy - py + ky dy, ix sx - px + kx dx] += x[n, c, iy, ix] W[c, o, ky, kx] for
// every input pixel, with g = c / (in_c / groups); what lands in the cropped padding is dropped.
Tensor naive_deconv(const Tensor& x, const Tensor& W, const Tensor& b, const F::Conv2DOptions& p, std::int64_t oh,
                    std::int64_t ow) {
  const std::vector<double> vx = x.to_vector<double>(), vw = W.to_vector<double>();
  const std::vector<double> vb = b.defined() ? b.to_vector<double>() : std::vector<double>();
  const std::int64_t N = x.size(0), C = x.size(1), H = x.size(2), Wd = x.size(3);
  const std::int64_t Og = W.size(1), kh = W.size(2), kw = W.size(3), O = Og * p.groups, Cg = C / p.groups;
  std::vector<double> y(N * O * oh * ow, 0.0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t iy = 0; iy < H; ++iy)
        for (std::int64_t ix = 0; ix < Wd; ++ix) {
          const double v = vx[((n * C + c) * H + iy) * Wd + ix];
          for (std::int64_t o = 0; o < Og; ++o)
            for (std::int64_t ky = 0; ky < kh; ++ky)
              for (std::int64_t kx = 0; kx < kw; ++kx) {
                const std::int64_t oy = iy * p.stride_y - p.pad_y + ky * p.dilate_y;
                const std::int64_t ox = ix * p.stride_x - p.pad_x + kx * p.dilate_x;
                if (oy < 0 || oy >= oh || ox < 0 || ox >= ow) continue;
                const std::int64_t channel = (c / Cg) * Og + o;
                y[((n * O + channel) * oh + oy) * ow + ox] += v * vw[((c * Og + o) * kh + ky) * kw + kx];
              }
        }
  if (!vb.empty())
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t o = 0; o < O; ++o)
        for (std::int64_t i = 0; i < oh * ow; ++i) y[(n * O + o) * oh * ow + i] += vb[o];
  return from_vector<double>(y, {N, O, oh, ow});
}

std::int64_t out_h_of(const DeconvCase& c) {
  return c.out_h ? *c.out_h : deconv_outsize(c.x[2], c.w[2], c.options.stride_y, c.options.pad_y, c.options.dilate_y);
}
std::int64_t out_w_of(const DeconvCase& c) {
  return c.out_w ? *c.out_w : deconv_outsize(c.x[3], c.w[3], c.options.stride_x, c.options.pad_x, c.options.dilate_x);
}

std::string describe(const DeconvCase& c) {
  std::ostringstream out;
  out << c.what << ": x " << shape_str(c.x) << " W " << shape_str(c.w) << " stride " << c.options.stride_y << "x"
      << c.options.stride_x << " pad " << c.options.pad_y << "x" << c.options.pad_x << " dilate " << c.options.dilate_y
      << "x" << c.options.dilate_x << " groups " << c.options.groups << (c.bias ? "" : " (no bias)");
  if (c.out_h || c.out_w) out << " out " << out_h_of(c) << "x" << out_w_of(c);
  return out.str();
}

Variables deconv(const Variables& v, const DeconvCase& c) {
  return {F::deconvolution_2d(v[0], v[1], v.size() == 3 ? v[2] : Variable(), c.options, c.out_h, c.out_w)};
}

std::vector<DeconvCase> forward_cases() {
  F::Conv2DOptions uneven = F::Conv2DOptions().stride(2, 3).pad(1, 0).dilate(1, 2);
  return {
      {"3x3", {2, 3, 4, 4}, {3, 4, 3, 3}, {}},
      {"stride 2", {2, 3, 4, 5}, {3, 2, 3, 3}, F::Conv2DOptions::make(2)},
      {"stride 2, pad 1, 4x4 (the DCGAN up-sampler)", {2, 3, 4, 4}, {3, 2, 4, 4}, F::Conv2DOptions::make(2, 1)},
      {"stride 3, pad 2", {1, 2, 3, 4}, {2, 3, 4, 3}, F::Conv2DOptions::make(3, 2)},
      {"pad 1", {2, 2, 5, 5}, {2, 3, 3, 3}, F::Conv2DOptions::make(1, 1)},
      {"dilation 2", {2, 2, 4, 4}, {2, 3, 3, 3}, F::Conv2DOptions::make(1, 0, 2)},
      {"dilation 2, stride 2, pad 2", {1, 2, 4, 3}, {2, 2, 3, 2}, F::Conv2DOptions::make(2, 2, 2)},
      {"groups 2", {2, 4, 3, 3}, {4, 3, 3, 3}, F::Conv2DOptions::make(2, 1, 1, 2)},
      {"depthwise (groups = channels)", {2, 3, 4, 4}, {3, 1, 3, 3}, F::Conv2DOptions().stride(2).with_groups(3)},
      {"1x1 kernel", {2, 5, 3, 4}, {5, 3, 1, 1}, {}},
      {"1x1 kernel, stride 2", {2, 3, 3, 3}, {3, 2, 1, 1}, F::Conv2DOptions::make(2)},
      {"non-square everything", {2, 2, 3, 5}, {2, 3, 2, 4}, uneven},
      {"no bias", {2, 3, 4, 4}, {3, 4, 3, 3}, F::Conv2DOptions::make(2, 1), false},
      {"1x1 image", {3, 2, 1, 1}, {2, 3, 3, 2}, {}},
      {"explicit output size, the largest for stride 3",
       {2, 2, 3, 4},
       {2, 2, 3, 3},
       F::Conv2DOptions::make(3, 1),
       true,
       deconv_outsize(3, 3, 3, 1, 1) + 2,
       deconv_outsize(4, 3, 3, 1, 1) + 1},
      {"explicit output size equal to the default",
       {1, 2, 3, 3},
       {2, 2, 3, 3},
       F::Conv2DOptions::make(2, 1),
       true,
       5,
       5},
  };
}

}  // namespace

TEST_CASE("deconvolution_2d matches a direct scatter loop in f64", "[deconvolution]") {
  std::uint64_t seed = 1;
  for (const DeconvCase& c : forward_cases()) {
    INFO(describe(c));
    const Tensor x = uniform(c.x, seed++);
    const Tensor W = uniform(c.w, seed++);
    const Tensor b = c.bias ? uniform({c.w[1] * c.options.groups}, seed++) : Tensor();
    const Variable y =
        deconv(c.bias ? Variables{Variable(x), Variable(W), Variable(b)} : Variables{Variable(x), Variable(W)}, c)[0];
    const Tensor want = naive_deconv(x, W, b, c.options, out_h_of(c), out_w_of(c));
    REQUIRE(y.shape() == want.shape());
    REQUIRE(y.dtype() == DType::f64);
    REQUIRE_NEAR_VALUES(y.data(), want, 1e-12);
  }
}

TEST_CASE("deconvolution_2d over every stride, pad, dilation and kernel size", "[deconvolution]") {
  // Non-square throughout: the x axis takes other values than the y axis.
  std::uint64_t seed = 1000;
  int checked = 0;
  for (std::int64_t s : {1, 2, 3})
    for (std::int64_t p : {0, 1, 2})
      for (std::int64_t d : {1, 2})
        for (std::int64_t k : {1, 2, 3, 4}) {
          DeconvCase c{"grid",
                       {2, 2, 3, 2},
                       {2, 3, k, 5 - k},
                       F::Conv2DOptions().stride(s, 4 - s).pad(p, 2 - p).dilate(d, 3 - d)};
          if (out_h_of(c) < 1 || out_w_of(c) < 1) continue;
          INFO(describe(c));
          const Tensor x = uniform(c.x, seed++), W = uniform(c.w, seed++), b = uniform({3}, seed++);
          const Variable y = F::deconvolution_2d(Variable(x), Variable(W), Variable(b), c.options);
          REQUIRE_NEAR_VALUES(y.data(), naive_deconv(x, W, b, c.options, out_h_of(c), out_w_of(c)), 1e-12);
          // The output convolves back to x's size.
          REQUIRE(conv_outsize(out_h_of(c), k, s, p, false, d) == 3);
          REQUIRE(conv_outsize(out_w_of(c), 5 - k, 4 - s, 2 - p, false, 3 - d) == 2);
          ++checked;
        }
  REQUIRE(checked > 50);
}

TEST_CASE("deconvolution_2d forward values by hand", "[deconvolution]") {
  const Variable x(gc_util::f64({1, 2, 3, 4}, {1, 1, 2, 2}));
  // Stride 1, a 2x2 kernel of ones: each pixel lands on the 2x2 block below and right of it.
  const Variable ones(gc_util::f64({1, 1, 1, 1}, {1, 1, 2, 2}));
  REQUIRE_NEAR_VALUES(F::deconvolution_2d(x, ones).data(), {1, 3, 2, 4, 10, 6, 3, 7, 4});
  // Stride 2 with a 2x2 kernel tiles the output: y[2i + a, 2j + b] = x[i, j] W[a, b], plus b.
  const Variable W(gc_util::f64({1, 10, 100, 1000}, {1, 1, 2, 2}));
  const Variable bias(gc_util::f64({0.5}, {1}));
  REQUIRE_NEAR_VALUES(F::deconvolution_2d(x, W, bias, F::Conv2DOptions::make(2)).data(),
                      {1.5, 10.5, 2.5, 20.5, 100.5, 1000.5, 200.5, 2000.5,  //
                       3.5, 30.5, 4.5, 40.5, 300.5, 3000.5, 400.5, 4000.5});
  // Pad 1 crops one row and column off each border of that 4x4 output: 2x2 by default, and 3x3
  // (the larger size that convolves back to 2x2) keeps the last row and column.
  REQUIRE_NEAR_VALUES(F::deconvolution_2d(x, W, Variable(), F::Conv2DOptions::make(2, 1)).data(), {1000, 200, 30, 4});
  REQUIRE_NEAR_VALUES(F::deconvolution_2d(x, W, Variable(), F::Conv2DOptions::make(2, 1), 3, 3).data(),
                      {1000, 200, 2000, 30, 4, 40, 3000, 400, 4000});
}

TEST_CASE("deconvolution_2d is the adjoint of convolution_2d with respect to its input", "[deconvolution]") {
  // <deconv(x, W), z> == <x, conv(z, W)> for every geometry: the same W, the same options.
  std::uint64_t seed = 2000;
  for (const DeconvCase& c : forward_cases()) {
    if (c.out_h) continue;
    INFO(describe(c));
    const Tensor x = uniform(c.x, seed++), W = uniform(c.w, seed++);
    const Variable y = F::deconvolution_2d(Variable(x), Variable(W), Variable(), c.options);
    const Tensor z = uniform(y.shape(), seed++);
    const Variable back = F::convolution_2d(Variable(z), Variable(W), Variable(), c.options);
    REQUIRE(back.shape() == x.shape());
    const double lhs = tandem::sum(tandem::mul(y.data(), z)).item();
    const double rhs = tandem::sum(tandem::mul(x, back.data())).item();
    REQUIRE(lhs == Approx(rhs).epsilon(1e-12));
  }
}

TEST_CASE("deconvolution_2d gradients for x, W and b", "[deconvolution][gradcheck]") {
  std::uint64_t seed = 100;
  const std::vector<DeconvCase> cases = {
      {"3x3", {2, 2, 3, 3}, {2, 3, 3, 3}, {}},
      {"1x1", {2, 3, 3, 2}, {3, 2, 1, 1}, {}},
      {"1x1 stride 3", {1, 2, 2, 3}, {2, 2, 1, 1}, F::Conv2DOptions::make(3)},
      {"2x2 stride 2", {2, 2, 3, 3}, {2, 2, 2, 2}, F::Conv2DOptions::make(2)},
      {"4x4 stride 2, pad 1", {1, 2, 3, 3}, {2, 2, 4, 4}, F::Conv2DOptions::make(2, 1)},
      {"3x3 stride 3, pad 2", {1, 2, 3, 2}, {2, 2, 3, 3}, F::Conv2DOptions::make(3, 2)},
      {"dilation 2, pad 1", {1, 2, 3, 3}, {2, 2, 3, 2}, F::Conv2DOptions::make(1, 1, 2)},
      {"dilation 2, stride 2, pad 2", {2, 1, 3, 3}, {1, 2, 3, 3}, F::Conv2DOptions::make(2, 2, 2)},
      {"non-square", {2, 2, 2, 4}, {2, 2, 4, 2}, F::Conv2DOptions().stride(3, 1).pad(2, 0).dilate(1, 2)},
      {"non-square, stride 1x2, pad 0x1", {1, 2, 3, 3}, {2, 3, 2, 3}, F::Conv2DOptions().stride(1, 2).pad(0, 1)},
      {"groups 2", {2, 4, 2, 3}, {4, 2, 3, 2}, F::Conv2DOptions::make(2, 1, 1, 2)},
      {"depthwise", {1, 3, 3, 3}, {3, 1, 2, 2}, F::Conv2DOptions().stride(2).with_groups(3)},
      {"no bias", {2, 2, 3, 3}, {2, 3, 3, 3}, F::Conv2DOptions::make(2, 1), false},
      {"explicit output size (the larger one), stride 2",
       {1, 2, 3, 3},
       {2, 2, 3, 3},
       F::Conv2DOptions::make(2, 1),
       true,
       6,
       6},
      {"explicit output size, stride 3x2",
       {1, 2, 2, 3},
       {2, 2, 2, 3},
       F::Conv2DOptions().stride(3, 2).pad(1),
       true,
       5,
       6},
  };
  for (const DeconvCase& c : cases) {
    INFO(describe(c));
    auto fn = [c](const Variables& v) { return deconv(v, c); };
    std::vector<Tensor> inputs = {uniform(c.x, seed++), uniform(c.w, seed++)};
    if (c.bias) inputs.push_back(uniform({c.w[1] * c.options.groups}, seed++));
    REQUIRE_GRADCHECK(fn, inputs);
  }
}

TEST_CASE("deconvolution_2d gradients over every stride, pad, dilation and kernel size", "[deconvolution][gradcheck]") {
  std::uint64_t seed = 3000;
  int checked = 0;
  for (std::int64_t s : {1, 2, 3})
    for (std::int64_t p : {0, 1, 2})
      for (std::int64_t d : {1, 2})
        for (std::int64_t k : {1, 2, 3, 4}) {
          DeconvCase c{"grid",
                       {1, 2, 2, 3},
                       {2, 2, k, 5 - k},
                       F::Conv2DOptions().stride(s, 4 - s).pad(p, 2 - p).dilate(d, 3 - d)};
          if (out_h_of(c) < 1 || out_w_of(c) < 1) continue;
          // Every other stride > 1 case takes the largest output size that convolves back.
          if (s > 1 && k % 2 == 0) c.out_h = out_h_of(c) + s - 1;
          INFO(describe(c));
          auto fn = [c](const Variables& v) { return deconv(v, c); };
          REQUIRE_GRADCHECK(fn, {uniform(c.x, seed), uniform(c.w, seed + 1), uniform({2}, seed + 2)});
          seed += 3;
          ++checked;
        }
  REQUIRE(checked > 50);
}

TEST_CASE("deconvolution_2d: only the inputs that need a gradient get one", "[deconvolution]") {
  const Tensor x = uniform({2, 2, 3, 3}, 200), W = uniform({2, 3, 3, 3}, 201), b = uniform({3}, 202);
  const DeconvCase c{"stride 2, pad 1", x.shape(), W.shape(), F::Conv2DOptions::make(2, 1)};
  for (int constant = 0; constant < 3; ++constant) {
    INFO("input " << constant << " constant");
    GradcheckOptions options;
    options.no_grad = {constant == 0, constant == 1, constant == 2};
    REQUIRE_GRADCHECK([c](const Variables& v) { return deconv(v, c); }, {x, W, b}, options);
  }
  Variable vx(x, true);
  const Variable vW(W), vb(b);
  F::sum(F::deconvolution_2d(vx, vW, vb, c.options)).backward();
  REQUIRE(vx.grad().shape() == x.shape());
  REQUIRE_FALSE(vW.grad().defined());
  REQUIRE_FALSE(vb.grad().defined());
  // d sum(y) / db = N * out_h * out_w for every output channel (out 5x5).
  Variable cb(b, true);
  F::sum(F::deconvolution_2d(Variable(x), vW, cb, c.options)).backward();
  REQUIRE_NEAR_VALUES(cb.grad(), {50, 50, 50});
}

TEST_CASE("deconvolution_2d in f32 matches f64", "[deconvolution][f32]") {
  const std::vector<DeconvCase> cases = {
      {"4x4 stride 2 pad 1", {3, 8, 5, 5}, {8, 6, 4, 4}, F::Conv2DOptions::make(2, 1)},
      {"groups 2, dilation 2", {2, 8, 4, 4}, {8, 3, 3, 3}, F::Conv2DOptions::make(1, 1, 2, 2)},
      {"1x1", {2, 16, 3, 3}, {16, 8, 1, 1}, {}},
      {"3x3 pad 1 (the CPU may take Winograd's path)", {2, 16, 8, 8}, {16, 16, 3, 3}, F::Conv2DOptions::make(1, 1)},
  };
  std::uint64_t seed = 300;
  for (const DeconvCase& c : cases) {
    INFO(describe(c));
    gc_util::check_f32_against_f64(
        [c](const Variables& v) { return deconv(v, c); },
        {uniform(c.x, seed), uniform(c.w, seed + 1), uniform({c.w[1] * c.options.groups}, seed + 2)});
    seed += 3;
  }
}

TEST_CASE("deconvolution_2d with explicit output sizes", "[deconvolution]") {
  const Variable x(uniform({1, 2, 3, 4}, 700)), W(uniform({2, 3, 3, 3}, 701));
  const F::Conv2DOptions options = F::Conv2DOptions::make(2, 1);
  // Default: 2 * (3 - 1) + 3 - 2 = 5 rows, 2 * (4 - 1) + 3 - 2 = 7 columns; 6 and 8 convolve back too.
  REQUIRE(F::deconvolution_2d(x, W, Variable(), options).shape() == Shape{1, 3, 5, 7});
  REQUIRE(F::deconvolution_2d(x, W, Variable(), options, 6, 8).shape() == Shape{1, 3, 6, 8});
  REQUIRE(F::deconvolution_2d(x, W, Variable(), options, 6).shape() == Shape{1, 3, 6, 7});
  REQUIRE(F::deconvolution_2d(x, W, Variable(), options, std::nullopt, 8).shape() == Shape{1, 3, 5, 8});
  // The larger output only adds a last row / column; the rest is the default output.
  const Tensor small = F::deconvolution_2d(x, W, Variable(), options).data();
  const Tensor large = F::deconvolution_2d(x, W, Variable(), options, 6, 8).data();
  const std::vector<double> vs = small.to_vector<double>(), vl = large.to_vector<double>();
  for (std::int64_t c = 0; c < 3; ++c)
    for (std::int64_t i = 0; i < 5; ++i)
      for (std::int64_t j = 0; j < 7; ++j)
        REQUIRE(vl[(c * 6 + i) * 8 + j] == Approx(vs[(c * 5 + i) * 7 + j]).epsilon(1e-14));
  // Sizes that do not convolve back to x's are rejected with the valid range.
  REQUIRE_THROWS_WITH(F::deconvolution_2d(x, W, Variable(), options, 7),
                      Contains("deconvolution_2d") && Contains("out_h = 7") && Contains("must be in [5, 6]") &&
                          Contains("[1, 2, 3, 4]") && Contains("[2, 3, 3, 3]") && Contains("stride 2x2"));
  REQUIRE_THROWS_WITH(F::deconvolution_2d(x, W, Variable(), options, 5, 6),
                      Contains("out_w = 6") && Contains("must be in [7, 8]"));
  REQUIRE_THROWS_WITH(F::deconvolution_2d(x, W, Variable(), options, 0), Contains("out_h = 0"));
  // Stride 1: only the default size.
  REQUIRE_THROWS_WITH(F::deconvolution_2d(x, W, Variable(), F::Conv2DOptions::make(1, 1), 4),
                      Contains("out_h = 4") && Contains("must be in [3, 3]"));
}

TEST_CASE("deconvolution_2d reports bad operands", "[deconvolution][errors]") {
  const Variable x(uniform({2, 3, 4, 4}, 500), true);
  const Variable W(uniform({3, 2, 3, 3}, 501), true);
  SECTION("channel mismatch names both shapes") {
    const Variable W4(uniform({4, 2, 3, 3}, 502), true);
    REQUIRE_THROWS_AS(F::deconvolution_2d(x, W4), Error);
    REQUIRE_THROWS_WITH(F::deconvolution_2d(x, W4), Contains("deconvolution_2d") && Contains("channel") &&
                                                        Contains("[2, 3, 4, 4]") && Contains("[4, 2, 3, 3]"));
  }
  SECTION("groups that do not divide the input channels") {
    REQUIRE_THROWS_WITH(F::deconvolution_2d(x, W, Variable(), F::Conv2DOptions::make(1, 0, 1, 2)),
                        Contains("deconvolution_2d") && Contains("groups=2") && Contains("does not divide") &&
                            Contains("[2, 3, 4, 4]"));
    REQUIRE_THROWS_WITH(F::deconvolution_2d(x, W, Variable(), F::Conv2DOptions::make(1, 0, 1, 0)),
                        Contains("groups must be >= 1"));
  }
  SECTION("too much padding for any output") {
    // 1 * (4 - 1) + 3 - 2 * 4 = -2 rows.
    REQUIRE_THROWS_WITH(
        F::deconvolution_2d(x, W, Variable(), F::Conv2DOptions::make(1, 4)),
        Contains("deconvolution_2d") && Contains("not positive") && Contains("pad 4x4") && Contains("[2, 3, 4, 4]"));
  }
  SECTION("wrong dtypes and devices") {
    const Variable W32(uniform({3, 2, 3, 3}, 503, -1, 1, DType::f32), true);
    REQUIRE_THROWS_WITH(F::deconvolution_2d(x, W32), Contains("deconvolution_2d") && Contains("different dtypes") &&
                                                         Contains("f32") && Contains("f64"));
    const Variable b32(uniform({2}, 504, -1, 1, DType::f32), true);
    REQUIRE_THROWS_WITH(F::deconvolution_2d(x, W, b32), Contains("different dtypes") && Contains("b f32[2]"));
    const Variable xi(tandem::zeros({2, 3, 4, 4}, DType::i32));
    const Variable Wi(tandem::zeros({3, 2, 3, 3}, DType::i32));
    REQUIRE_THROWS_WITH(F::deconvolution_2d(xi, Wi), Contains("deconvolution_2d") && Contains("floating"));
  }
  SECTION("wrong ranks, bias shape and parameters") {
    REQUIRE_THROWS_WITH(F::deconvolution_2d(F::reshape(x, {6, 4, 4}), W),
                        Contains("deconvolution_2d") && Contains("4-D") && Contains("[6, 4, 4]"));
    REQUIRE_THROWS_WITH(F::deconvolution_2d(x, F::reshape(W, {3, 18})), Contains("4-D") && Contains("[3, 18]"));
    const Variable b(uniform({3}, 505), true);
    REQUIRE_THROWS_WITH(F::deconvolution_2d(x, W, b), Contains("b f64[3]") && Contains("[3, 2, 3, 3]"));
    REQUIRE_THROWS_WITH(F::deconvolution_2d(x, W, Variable(), F::Conv2DOptions::make(0)), Contains("stride"));
    REQUIRE_THROWS_WITH(F::deconvolution_2d(x, W, Variable(), F::Conv2DOptions::make(1, -1)), Contains("pad"));
    REQUIRE_THROWS_WITH(F::deconvolution_2d(x, W, Variable(), F::Conv2DOptions::make(1, 0, 0)), Contains("dilate"));
    REQUIRE_THROWS_WITH(F::deconvolution_2d(Variable(), W), Contains("deconvolution_2d") && Contains("defined"));
  }
}

TEST_CASE("deconvolution_2d with an empty batch", "[deconvolution]") {
  Variable x(tandem::zeros({0, 2, 3, 3}, DType::f64), true);
  Variable W(uniform({2, 3, 3, 3}, 600), true), b(uniform({3}, 601), true);
  const Variable y = F::deconvolution_2d(x, W, b, F::Conv2DOptions::make(2, 1));
  REQUIRE(y.shape() == Shape{0, 3, 5, 5});
  F::sum(y).backward();
  REQUIRE(x.grad().shape() == x.shape());
  REQUIRE_NEAR_VALUES(W.grad(), std::vector<double>(54, 0.0), 0);
  REQUIRE_NEAR_VALUES(b.grad(), {0, 0, 0}, 0);
}
