// The Deconvolution2D link: W's layout and shape, deferred in_channels, nobias, groups, outsize,
// Chainer's default initialisation, and saving and loading W (shapes checked on load). The
// function's values and gradients are tested in tests/autograd/functions/deconvolution_test.cc.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <string>

#include "autograd/functions.h"
#include "core/ops.h"
#include "layers/links/deconvolution_2d.h"
#include "layers/serializers/npz.h"
#include "layers/serializers/serializers.h"

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

}  // namespace

TEST_CASE("Deconvolution2D: W [in, out, kh, kw], b zeros, output shape and the function's values", "[links][deconv]") {
  Deconvolution2D deconv(3, 4, Deconvolution2DOptions::make(4, 2, 1));
  CHECK(deconv.type_name() == "Deconvolution2D");
  REQUIRE(deconv.namedparams().size() == 2);
  CHECK(deconv.namedparams()[0].first == "W");
  CHECK(deconv.namedparams()[1].first == "b");
  REQUIRE(deconv.W().shape() == Shape{3, 4, 4, 4});
  REQUIRE(deconv.W().dtype() == DType::f32);
  REQUIRE(deconv.b().data().to_vector<float>() == std::vector<float>(4, 0.0f));
  Generator gen(1);
  deconv.b().set_data(randn({4}, gen));
  const Variable x(randn({2, 3, 5, 5}, gen));
  const Variable y = deconv(x);
  REQUIRE(y.shape() == Shape{2, 4, 10, 10});  // 2 * (5 - 1) + 4 - 2 * 1
  const Variable want =
      F::deconvolution_2d(x, Variable(deconv.W().data()), Variable(deconv.b().data()), F::Conv2DOptions::make(2, 1));
  REQUIRE(y.data().to_vector<float>() == want.data().to_vector<float>());
  F::sum(y).backward();
  REQUIRE(deconv.W().grad().shape() == Shape{3, 4, 4, 4});
  REQUIRE(deconv.b().grad().to_vector<float>() == std::vector<float>(4, 200.0f));  // N * out_h * out_w
}

TEST_CASE("Deconvolution2D infers in_channels at the first forward", "[links][deconv]") {
  Deconvolution2D deconv(-1, 6, Deconvolution2DOptions::make(3));
  REQUIRE(deconv.params().size() == 1);  // b; W waits for its shape
  REQUIRE(deconv.namedparams(true).size() == 2);
  Generator gen(2);
  const Variable x(randn({1, 5, 3, 4}, gen));
  REQUIRE(deconv(x).shape() == Shape{1, 6, 5, 6});
  REQUIRE(deconv.W().shape() == Shape{5, 6, 3, 3});
  REQUIRE(deconv.params().size() == 2);
  // Another channel count after that is an error naming the shapes.
  REQUIRE_THROWS_WITH(deconv(Variable(randn({1, 4, 3, 4}, gen))),
                      Contains("deconvolution_2d") && Contains("[1, 4, 3, 4]") && Contains("[5, 6, 3, 3]"));
  REQUIRE_THROWS_WITH(Deconvolution2D(-1, 6).forward(Variable(randn({5, 3, 4}, gen))),
                      Contains("Deconvolution2D") && Contains("[5, 3, 4]"));
}

TEST_CASE("Deconvolution2D with nobias, groups, outsize and explicit initialisers", "[links][deconv]") {
  Generator gen(3);
  const Variable x(randn({2, 4, 3, 3}, gen));
  SECTION("nobias") {
    Deconvolution2DOptions options = Deconvolution2DOptions::make(2, 2);
    options.nobias = true;
    Deconvolution2D deconv(4, 3, options);
    REQUIRE(deconv.namedparams().size() == 1);
    REQUIRE_THROWS_WITH(deconv.b(), Contains("no parameter 'b'"));
    const Variable y = deconv(x);
    REQUIRE(y.shape() == Shape{2, 3, 6, 6});
    const Variable want = F::deconvolution_2d(x, Variable(deconv.W().data()), Variable(), options.conv);
    REQUIRE(y.data().to_vector<float>() == want.data().to_vector<float>());
  }
  SECTION("groups") {
    Deconvolution2DOptions options = Deconvolution2DOptions::make(3, 1, 1);
    options.conv.groups = 2;
    Deconvolution2D deconv(-1, 6, options);
    REQUIRE(deconv(x).shape() == Shape{2, 6, 3, 3});
    REQUIRE(deconv.W().shape() == Shape{4, 3, 3, 3});
    REQUIRE_THROWS_WITH(Deconvolution2D(4, 5, options), Contains("groups 2 must divide out_channels 5"));
    REQUIRE_THROWS_WITH(Deconvolution2D(3, 6, options), Contains("groups 2 must divide in_channels 3"));
  }
  SECTION("outsize picks the larger output that convolves back") {
    Deconvolution2DOptions options = Deconvolution2DOptions::make(3, 2, 1);
    REQUIRE(Deconvolution2D(4, 2, options)(x).shape() == Shape{2, 2, 5, 5});
    options.outsize = std::make_pair<std::int64_t, std::int64_t>(6, 5);
    REQUIRE(Deconvolution2D(4, 2, options)(x).shape() == Shape{2, 2, 6, 5});
    options.outsize = std::make_pair<std::int64_t, std::int64_t>(7, 5);
    REQUIRE_THROWS_WITH(Deconvolution2D(4, 2, options)(x), Contains("out_h = 7") && Contains("must be in [5, 6]"));
    options.outsize = std::make_pair<std::int64_t, std::int64_t>(0, 5);
    REQUIRE_THROWS_WITH(Deconvolution2D(4, 2, options), Contains("outsize must be positive"));
  }
  SECTION("initialisers and dtype") {
    Deconvolution2DOptions options = Deconvolution2DOptions::make(2);
    options.initialW = initializers::constant(0.5);
    options.initial_bias = initializers::constant(-1);
    options.dtype = DType::f64;
    Deconvolution2D deconv(4, 2, options);
    REQUIRE(deconv.W().dtype() == DType::f64);
    REQUIRE(deconv.W().data().to_vector<double>() == std::vector<double>(4 * 2 * 2 * 2, 0.5));
    REQUIRE(deconv.b().data().to_vector<double>() == std::vector<double>{-1, -1});
  }
  SECTION("bad arguments") {
    REQUIRE_THROWS_WITH(Deconvolution2D(0, 3), Contains("Deconvolution2D") && Contains("positive"));
    REQUIRE_THROWS_WITH(Deconvolution2D(3, 0), Contains("Deconvolution2D"));
    REQUIRE_THROWS_WITH(Deconvolution2D(3, 2, Deconvolution2DOptions::make(0)), Contains("kernel 0x0"));
  }
}

TEST_CASE("Deconvolution2D's default W is LeCun normal over Chainer's fan-in, out_channels * kh * kw",
          "[links][deconv]") {
  // W [64, 32, 3, 3]: Chainer's fan-in is 32 * 9 = 288 (std 0.0589); with in_channels it would
  // be 64 * 9 = 576 (std 0.0417).
  manual_seed(5);
  Deconvolution2D deconv(64, 32, Deconvolution2DOptions::make(3));
  const std::vector<float> w = deconv.W().data().to_vector<float>();
  double sum = 0, squares = 0;
  for (float v : w) {
    sum += v;
    squares += static_cast<double>(v) * v;
  }
  const double mean = sum / w.size(), stddev = std::sqrt(squares / w.size() - mean * mean);
  CHECK(std::abs(mean) < 0.003);
  CHECK(stddev == Approx(1 / std::sqrt(288.0)).epsilon(0.03));
}

TEST_CASE("Deconvolution2D saves and loads W, a lazy one taking its shape from the file", "[links][deconv][npz]") {
  manual_seed(6);
  Deconvolution2D trained(-1, 4, Deconvolution2DOptions::make(3, 2, 1));
  Generator gen(7);
  const Variable x(randn({2, 3, 4, 4}, gen));
  const Variable want = trained(x);
  const std::string path = temp_path("deconv.npz");
  save_npz(path, trained);

  manual_seed(8);
  Deconvolution2D fresh(-1, 4, Deconvolution2DOptions::make(3, 2, 1));
  load_npz(path, fresh);  // no forward pass: the file gives W its shape
  REQUIRE(fresh.W().shape() == Shape{3, 4, 3, 3});
  REQUIRE(fresh.W().data().to_vector<float>() == trained.W().data().to_vector<float>());
  REQUIRE(fresh(x).data().to_vector<float>() == want.data().to_vector<float>());

  // A W of another layout, out_channels or kernel size is rejected, naming the parameter and shape.
  Deconvolution2D lazy(-1, 4, Deconvolution2DOptions::make(3));
  write_npz(path, {{"W", zeros({4, 3, 3, 3})}, {"b", zeros({4})}});  // Convolution2D's layout
  REQUIRE_THROWS_WITH(load_npz(path, lazy), Contains("'W'") && Contains("[4, 3, 3, 3]") &&
                                                Contains("[in_channels, out_channels / groups, ksize_y, ksize_x]"));
  write_npz(path, {{"W", zeros({3, 4, 5, 5})}, {"b", zeros({4})}});
  REQUIRE_THROWS_WITH(load_npz(path, lazy), Contains("'W'") && Contains("[3, 4, 5, 5]"));
  // With groups, in_channels must be a multiple of them.
  Deconvolution2DOptions grouped = Deconvolution2DOptions::make(3);
  grouped.conv.groups = 2;
  Deconvolution2D lazy_grouped(-1, 4, grouped);
  write_npz(path, {{"W", zeros({3, 2, 3, 3})}, {"b", zeros({4})}});
  REQUIRE_THROWS_WITH(load_npz(path, lazy_grouped), Contains("'W'") && Contains("[3, 2, 3, 3]"));
  write_npz(path, {{"W", zeros({4, 2, 3, 3})}, {"b", zeros({4})}});
  load_npz(path, lazy_grouped);
  REQUIRE(lazy_grouped.W().shape() == Shape{4, 2, 3, 3});
}
