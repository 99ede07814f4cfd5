// EmbedID, BatchNormalization and NStepLSTM links (their functions have gradient tests in
// tests/autograd/functions; here: parameters, modes, running statistics, shapes).
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/functions.h"
#include "core/ops.h"
#include "layers/links/batch_normalization.h"
#include "layers/links/convolution_2d.h"
#include "layers/links/embed_id.h"
#include "layers/links/layer_normalization.h"
#include "layers/links/n_step_lstm.h"

using namespace tandem;

TEST_CASE("EmbedID looks up rows and zeroes ignored ids", "[links][embed]") {
  EmbedID embed(5, 3, /*ignore_label=*/-1);
  const std::vector<float> W = embed.W().data().to_vector<float>();
  Variable ids(from_vector<std::int32_t>({4, -1, 0, 4}, {2, 2}));
  Variable y = embed(ids);
  REQUIRE(y.shape() == Shape{2, 2, 3});
  const std::vector<float> got = y.data().to_vector<float>();
  for (int k = 0; k < 3; ++k) {
    REQUIRE(got[k] == W[4 * 3 + k]);
    REQUIRE(got[3 + k] == 0.0f);
    REQUIRE(got[6 + k] == W[k]);
  }
  F::sum(y).backward();
  const std::vector<float> g = embed.W().grad().to_vector<float>();
  REQUIRE(g[4 * 3] == 2.0f);  // id 4 used twice
  REQUIRE(g[1 * 3] == 0.0f);
  REQUIRE_THROWS_WITH(embed(Variable(from_vector<std::int32_t>({5}))), Catch::Contains("5"));
}

TEST_CASE("BatchNormalization normalises in training and uses running statistics in test mode", "[links][bn]") {
  BatchNormalization bn(2);
  // Channel 0 holds {1, 3}, channel 1 holds {10, 30}, over a batch of 2 and a 1x1 image.
  Variable x(from_vector<float>({1, 10, 3, 30}, {2, 2, 1, 1}));
  Variable y = bn(x);
  const std::vector<float> v = y.data().to_vector<float>();
  REQUIRE(v[0] == Approx(-1).margin(1e-3));
  REQUIRE(v[2] == Approx(1).margin(1e-3));
  REQUIRE(v[1] == Approx(-1).margin(1e-3));
  // Running averages: decay 0.9; the variance is unbiased (m / (m - 1) = 2).
  const std::vector<float> mean = bn.persistent("avg_mean").to_vector<float>();
  const std::vector<float> var = bn.persistent("avg_var").to_vector<float>();
  REQUIRE(mean[0] == Approx(0.1 * 2));
  REQUIRE(mean[1] == Approx(0.1 * 20));
  REQUIRE(var[0] == Approx(0.9 + 0.1 * 2));
  REQUIRE(var[1] == Approx(0.9 + 0.1 * 200));
  REQUIRE(bn.persistent("N").item() == 1);

  TrainModeGuard test_mode(false);
  Variable z = bn(x);
  const std::vector<float> w = z.data().to_vector<float>();
  REQUIRE(w[0] == Approx((1 - mean[0]) / std::sqrt(var[0] + 2e-5)));
  REQUIRE(w[3] == Approx((30 - mean[1]) / std::sqrt(var[1] + 2e-5)));
  REQUIRE(bn.persistent("N").item() == 1);  // not updated in test mode
  std::vector<std::string> names;
  for (auto& entry : bn.namedpersistents()) names.push_back(entry.first);
  REQUIRE(names == std::vector<std::string>{"avg_mean", "avg_var", "N"});
}

TEST_CASE("BatchNormalization::forward_to runs the replacement instead, until reset", "[links][bn]") {
  auto bn = std::make_shared<BatchNormalization>(2, 0.8, 1e-3);
  REQUIRE(bn->decay() == 0.8);
  REQUIRE(bn->eps() == 1e-3);
  auto replacement = std::make_shared<BatchNormalization>(2);
  bn->forward_to(replacement);
  REQUIRE(bn->replacement() == replacement);
  const Variable x(from_vector<float>({1, 10, 3, 30}, {2, 2}));
  (*bn)(x);
  REQUIRE(replacement->persistent("N").item() == 1);  // the replacement ran, not bn
  REQUIRE(bn->persistent("N").item() == 0);
  bn->forward_to(nullptr);
  (*bn)(x);
  REQUIRE(bn->persistent("N").item() == 1);
}

TEST_CASE("NStepLSTM names its parameters like Chainer and returns each sequence's final state", "[links][lstm]") {
  manual_seed(1);
  NStepLSTM lstm(2, 3, 4);
  const auto params = lstm.namedparams();
  REQUIRE(params.size() == 32);
  REQUIRE(params[0].first == "0/w0");
  REQUIRE(params[0].second.shape() == Shape{4, 3});
  REQUIRE(params[4].second.shape() == Shape{4, 4});
  REQUIRE(params[31].first == "1/b7");
  REQUIRE(lstm[1]->param("w0").shape() == Shape{4, 4});

  Generator gen(2);
  Variables xs = {Variable(randn({5, 3}, gen)), Variable(randn({1, 3}, gen)), Variable(randn({3, 3}, gen))};
  auto result = lstm.forward(Variable(), Variable(), xs);
  REQUIRE(result.hy.shape() == Shape{2, 3, 4});
  REQUIRE(result.cy.shape() == Shape{2, 3, 4});
  REQUIRE(result.ys.size() == 3);
  REQUIRE(result.ys[1].shape() == Shape{1, 4});
  // The top layer's hy for sequence i is the last row of ys[i].
  const std::vector<float> hy = result.hy.data().to_vector<float>();
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> y = result.ys[i].data().to_vector<float>();
    for (int k = 0; k < 4; ++k) REQUIRE(hy[(1 * 3 + i) * 4 + k] == Approx(y[y.size() - 4 + k]));
  }
  Variable loss = F::sum(result.hy) + F::sum(result.ys[0]);
  loss.backward();
  for (auto& [name, p] : lstm.namedparams()) {
    INFO(name);
    REQUIRE(p.grad().defined());
  }
  REQUIRE_THROWS_AS(NStepLSTM(2, 3, 4, 1.0), Error);
}

TEST_CASE("NStepLSTM dropout is off in test mode", "[links][lstm]") {
  NStepLSTM lstm(2, 3, 4, 0.5);
  Generator gen(3);
  Variables xs = {Variable(randn({4, 3}, gen))};
  TrainModeGuard test_mode(false);
  const auto a = lstm.forward(Variable(), Variable(), xs).hy.data().to_vector<float>();
  const auto b = lstm.forward(Variable(), Variable(), xs).hy.data().to_vector<float>();
  REQUIRE(a == b);
}

TEST_CASE("Convolution2D infers its input channels and matches the function", "[links][conv]") {
  Convolution2D conv(-1, 4, Convolution2DOptions::make(3, 1, 1));
  Generator gen(4);
  Variable x(randn({2, 3, 5, 5}, gen));
  Variable y = conv(x);
  REQUIRE(y.shape() == Shape{2, 4, 5, 5});
  REQUIRE(conv.W().shape() == Shape{4, 3, 3, 3});
  const Variable expected = F::convolution_2d(x, Variable(conv.W().data()), Variable(conv.b().data()),
                                              F::Conv2DOptions::make(1, 1));
  REQUIRE(y.data().to_vector<float>() == expected.data().to_vector<float>());
  F::sum(y).backward();
  REQUIRE(conv.W().grad().shape() == Shape{4, 3, 3, 3});
  REQUIRE(conv.b().grad().to_vector<float>() == std::vector<float>(4, 50.0f));  // N * H * W
  REQUIRE_THROWS_WITH(Convolution2D(3, 4, Convolution2DOptions::make(3)).forward(Variable(randn({1, 2, 5, 5}, gen))),
                      Catch::Contains("[1, 2, 5, 5]"));
}

TEST_CASE("LayerNormalization: gamma (ones) and beta (zeros) named like Chainer's, the function applied",
          "[links][layernorm]") {
  LayerNormalization ln(4, 1e-6, DType::f64);
  REQUIRE(ln.namedparams().size() == 2);
  CHECK(ln.namedparams()[0].first == "gamma");
  CHECK(ln.namedparams()[1].first == "beta");
  CHECK(ln.gamma().data().to_vector<double>() == std::vector<double>(4, 1.0));
  CHECK(ln.beta().data().to_vector<double>() == std::vector<double>(4, 0.0));
  ln.gamma().set_data(from_vector(std::vector<double>{1, 2, 3, 4}, {4}));
  ln.beta().set_data(from_vector(std::vector<double>{0, 1, 0, 1}, {4}));
  const Tensor x = from_vector(std::vector<double>{1, 2, 3, 4, -1, 0, 1, 2}, {2, 4});
  const Variable y = ln(Variable(x));
  const Variable want = functions::layer_normalization(Variable(x), ln.gamma(), ln.beta(), 1e-6);
  CHECK(y.data().to_vector<double>() == want.data().to_vector<double>());
  // Row 0: (x - 2.5) / sqrt(1.25 + 1e-6) * gamma + beta.
  CHECK(y.data().to_vector<double>()[3] == Approx(1.5 / std::sqrt(1.25 + 1e-6) * 4 + 1).epsilon(1e-12));
  CHECK_THROWS_WITH(LayerNormalization(0), Catch::Matchers::Contains("LayerNormalization: size and eps must be positive"));
}
