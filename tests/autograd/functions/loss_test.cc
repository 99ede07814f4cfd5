// Gradients and behaviour of autograd/functions/loss.h: softmax_cross_entropy and
// mean_squared_error.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using F::Reduce;
using gc_util::uniform;

namespace {

// -log softmax(row)[label], with std::exp.
double row_loss(const std::vector<double>& row, int label) {
  double total = 0;
  for (double v : row) total += std::exp(v);
  return std::log(total) - row[label];
}

Variables sce_mean(const Variables& v) { return {F::softmax_cross_entropy(v[0], v[1])}; }
Variables sce_none(const Variables& v) {
  return {F::softmax_cross_entropy(v[0], v[1], -1, Reduce::none)};
}

}  // namespace

TEST_CASE("softmax_cross_entropy forward value on a 2x3 example by hand", "[loss]") {
  const std::vector<double> r0 = {1, 2, 3}, r1 = {0.5, -1, 0};
  const Variable x(gc_util::f64({1, 2, 3, 0.5, -1, 0}, {2, 3}));
  const double l0 = row_loss(r0, 2), l1 = row_loss(r1, 0);
  // l0 = log(e + e^2 + e^3) - 3 = 0.40760596..., spelled out once as a check of the helper.
  REQUIRE(l0 == Approx(0.4076059644443804).epsilon(1e-12));
  for (DType label_dtype : {DType::i32, DType::i64}) {
    INFO("labels " << label_dtype);
    const Variable t(gc_util::i64({2, 0}, {2}).to(label_dtype));
    const Variable loss = F::softmax_cross_entropy(x, t);
    REQUIRE(loss.shape() == Shape{});
    REQUIRE(loss.dtype() == DType::f64);
    REQUIRE_NEAR_VALUES(loss.data(), {(l0 + l1) / 2});
    const Variable losses = F::softmax_cross_entropy(x, t, -1, Reduce::none);
    REQUIRE(losses.shape() == Shape{2});
    REQUIRE_NEAR_VALUES(losses.data(), {l0, l1});
  }
  SECTION("gradient by hand: (softmax - onehot) / N") {
    Variable xv(gc_util::f64({1, 2, 3, 0.5, -1, 0}, {2, 3}), true);
    const Variable t(gc_util::i32({2, 0}, {2}));
    F::softmax_cross_entropy(xv, t).backward();
    std::vector<double> want;
    for (int r = 0; r < 2; ++r) {
      const std::vector<double>& row = r == 0 ? r0 : r1;
      const int label = r == 0 ? 2 : 0;
      double total = 0;
      for (double v : row) total += std::exp(v);
      for (int c = 0; c < 3; ++c) want.push_back((std::exp(row[c]) / total - (c == label ? 1 : 0)) / 2);
    }
    REQUIRE_NEAR_VALUES(xv.grad(), want);
    REQUIRE_FALSE(t.grad().defined());
  }
}

TEST_CASE("softmax_cross_entropy gradients with i32 and i64 labels", "[loss][gradcheck]") {
  std::uint64_t seed = 1;
  for (DType label_dtype : {DType::i32, DType::i64}) {
    INFO("labels " << label_dtype);
    const Tensor x = uniform({4, 5}, seed++, -2, 2);
    const Tensor t = gc_util::i64({3, 0, 4, 1}, {4}).to(label_dtype);
    REQUIRE_GRADCHECK(sce_mean, {x, t});
    REQUIRE_GRADCHECK(sce_none, {x, t});
    // Batch 1 and two classes.
    REQUIRE_GRADCHECK(sce_mean, {uniform({1, 4}, seed++, -2, 2), gc_util::i64({2}, {1}).to(label_dtype)});
    REQUIRE_GRADCHECK(sce_mean, {uniform({3, 2}, seed++, -2, 2), gc_util::i64({1, 0, 1}, {3}).to(label_dtype)});
    // Large scores: the log-sum-exp is computed stably.
    REQUIRE_GRADCHECK(sce_mean, {gc_util::f64({500, 502, 499, -300, -301, -299}, {2, 3}),
                                 gc_util::i64({1, 2}, {2}).to(label_dtype)});
  }
  SECTION("the loss scaled and combined with other terms") {
    const Tensor x = uniform({3, 4}, seed++, -2, 2);
    const Tensor t = gc_util::i32({1, 1, 3}, {3});
    REQUIRE_GRADCHECK(
        [](const Variables& v) -> Variables {
          const Variable loss = F::softmax_cross_entropy(v[0], v[1]);
          return {F::mul(loss, 3.0), F::mul(loss, F::sum(v[0]))};
        },
        {x, t});
  }
}

TEST_CASE("softmax_cross_entropy with ignored labels", "[loss][gradcheck]") {
  SECTION("some rows ignored: the mean runs over the others") {
    const std::vector<double> raw = {1, 2, 3, 9, 9, 9, 0.5, -1, 0};
    const Variable x(gc_util::f64(raw, {3, 3}));
    const Variable t(gc_util::i32({2, -1, 0}, {3}));
    const double l0 = row_loss({1, 2, 3}, 2), l2 = row_loss({0.5, -1, 0}, 0);
    REQUIRE_NEAR_VALUES(F::softmax_cross_entropy(x, t).data(), {(l0 + l2) / 2});
    REQUIRE_NEAR_VALUES(F::softmax_cross_entropy(x, t, -1, Reduce::none).data(), {l0, 0, l2});
    REQUIRE_GRADCHECK(sce_mean, {uniform({3, 3}, 10, -2, 2), t.data()});
    REQUIRE_GRADCHECK(sce_none, {uniform({3, 3}, 11, -2, 2), t.data()});
    // The ignored row gets exactly zero gradient.
    Variable xv(gc_util::f64(raw, {3, 3}), true);
    F::softmax_cross_entropy(xv, t).backward();
    const std::vector<double> g = xv.grad().to_vector<double>();
    for (int c = 3; c < 6; ++c) REQUIRE(g[c] == 0);
  }
  SECTION("a custom ignore_label, also one outside [0, C)") {
    const Tensor x = uniform({4, 3}, 12, -2, 2);
    const Tensor t = gc_util::i64({1, 2, 1, 0}, {4});
    for (std::int64_t ignore : {std::int64_t{1}, std::int64_t{-100}, std::int64_t{7}}) {
      INFO("ignore_label " << ignore);
      const Tensor labels = ignore == 1 ? t : gc_util::i64({1, ignore, 2, ignore}, {4});
      auto mean_fn = [ignore](const Variables& v) -> Variables {
        return {F::softmax_cross_entropy(v[0], v[1], ignore)};
      };
      auto none_fn = [ignore](const Variables& v) -> Variables {
        return {F::softmax_cross_entropy(v[0], v[1], ignore, Reduce::none)};
      };
      REQUIRE_GRADCHECK(mean_fn, {x, labels});
      REQUIRE_GRADCHECK(none_fn, {x, labels});
    }
    // ignore_label 1: rows 0 and 2 drop out.
    const std::vector<double> xs = x.to_vector<double>();
    const double l1 = row_loss({xs[3], xs[4], xs[5]}, 2), l3 = row_loss({xs[9], xs[10], xs[11]}, 0);
    REQUIRE_NEAR_VALUES(F::softmax_cross_entropy(Variable(x), Variable(t), 1).data(), {(l1 + l3) / 2});
  }
  SECTION("all rows ignored: loss 0 and zero gradients") {
    const Tensor t = gc_util::i32({-1, -1, -1}, {3});
    for (Reduce reduce : {Reduce::mean, Reduce::none}) {
      Variable x(uniform({3, 4}, 13, -2, 2), true);
      const Variable loss = F::softmax_cross_entropy(x, Variable(t), -1, reduce);
      const std::vector<double> values = loss.data().to_vector<double>();
      for (double v : values) REQUIRE(v == 0);
      REQUIRE_FALSE(std::isnan(values[0]));
      F::sum(loss).backward();
      REQUIRE(x.grad().defined());
      REQUIRE(x.grad().shape() == Shape{3, 4});
      for (double g : x.grad().to_vector<double>()) REQUIRE(g == 0);
    }
    REQUIRE_GRADCHECK(sce_mean, {uniform({3, 4}, 14, -2, 2), t});
    REQUIRE_GRADCHECK(sce_none, {uniform({3, 4}, 15, -2, 2), t});
  }
}

TEST_CASE("softmax_cross_entropy on [N, C, d] scores with [N, d] labels", "[loss][gradcheck]") {
  const Tensor x = uniform({2, 3, 4}, 20, -2, 2);
  const Tensor t = gc_util::i32({0, 2, 1, -1, 2, 2, 0, 1}, {2, 4});
  REQUIRE_GRADCHECK(sce_mean, {x, t});
  REQUIRE_GRADCHECK(sce_none, {x, t});
  REQUIRE(F::softmax_cross_entropy(Variable(x), Variable(t), -1, Reduce::none).shape() == Shape{2, 4});
  // Four-dimensional: [N, C, h, w] with i64 labels [N, h, w].
  const Tensor x4 = uniform({2, 3, 2, 2}, 21, -2, 2);
  const Tensor t4 = gc_util::i64({0, 1, 2, 0, 2, -1, 1, 1}, {2, 2, 2});
  REQUIRE_GRADCHECK(sce_mean, {x4, t4});
  REQUIRE_GRADCHECK(sce_none, {x4, t4});

  // Values: the loss at (n, j) is row_loss of x[n, :, j]; the mean runs over the 7 valid labels.
  const std::vector<double> xs = x.to_vector<double>();
  const std::vector<std::int64_t> ts = t.to_vector<std::int64_t>();
  std::vector<double> want;
  double total = 0;
  for (int n = 0; n < 2; ++n) {
    for (int j = 0; j < 4; ++j) {
      const std::int64_t label = ts[n * 4 + j];
      if (label < 0) {
        want.push_back(0);
        continue;
      }
      std::vector<double> column;
      for (int c = 0; c < 3; ++c) column.push_back(xs[(n * 3 + c) * 4 + j]);
      want.push_back(row_loss(column, static_cast<int>(label)));
      total += want.back();
    }
  }
  REQUIRE_NEAR_VALUES(F::softmax_cross_entropy(Variable(x), Variable(t), -1, Reduce::none).data(), want);
  REQUIRE_NEAR_VALUES(F::softmax_cross_entropy(Variable(x), Variable(t)).data(), {total / 7});
}

TEST_CASE("softmax_cross_entropy of an empty batch is 0", "[loss]") {
  Variable x(uniform({0, 3}, 25), true);
  const Variable loss = F::softmax_cross_entropy(x, Variable(gc_util::i32({}, {0})));
  REQUIRE(loss.shape() == Shape{});
  REQUIRE(loss.data().item() == 0);
  loss.backward();
  REQUIRE(x.grad().shape() == Shape{0, 3});
}

TEST_CASE("softmax_cross_entropy rejects bad labels", "[loss][errors]") {
  const Variable x(uniform({2, 3}, 30), true);
  SECTION("a label outside [0, C) names its value") {
    const Variable t(gc_util::i32({0, 3}, {2}));
    REQUIRE_THROWS_AS(F::softmax_cross_entropy(x, t), Error);
    REQUIRE_THROWS_WITH(F::softmax_cross_entropy(x, t), Contains("label 3") && Contains("position 1"));
    const Variable neg(gc_util::i64({-2, 1}, {2}));
    REQUIRE_THROWS_WITH(F::softmax_cross_entropy(x, neg), Contains("label -2") && Contains("position 0"));
    // -1 is only harmless while it is the ignore_label.
    const Variable minus_one(gc_util::i64({1, -1}, {2}));
    REQUIRE_NOTHROW(F::softmax_cross_entropy(x, minus_one));
    REQUIRE_THROWS_WITH(F::softmax_cross_entropy(x, minus_one, -100), Contains("label -1"));
    REQUIRE_THROWS_AS(F::softmax_cross_entropy(x, t, -1, Reduce::none), Error);
  }
  SECTION("floating labels") {
    const Variable t(gc_util::f64({0, 1}, {2}));
    REQUIRE_THROWS_AS(F::softmax_cross_entropy(x, t), Error);
    REQUIRE_THROWS_WITH(F::softmax_cross_entropy(x, t), Contains("i32 or i64") && Contains("f64"));
    const Variable t32(gc_util::f64({0, 1}, {2}).to(DType::f32));
    REQUIRE_THROWS_WITH(F::softmax_cross_entropy(x, t32), Contains("f32"));
  }
  SECTION("labels whose shape does not match the scores") {
    const Variable t3(gc_util::i32({0, 1, 2}, {3}));
    REQUIRE_THROWS_AS(F::softmax_cross_entropy(x, t3), Error);
    REQUIRE_THROWS_WITH(F::softmax_cross_entropy(x, t3), Contains("[3]") && Contains("[2, 3]"));
    const Variable t21(gc_util::i32({0, 1}, {2, 1}));
    REQUIRE_THROWS_WITH(F::softmax_cross_entropy(x, t21), Contains("[2, 1]"));
    const Variable x3(uniform({2, 3, 4}, 31), true);
    const Variable t2(gc_util::i32({0, 1}, {2}));
    REQUIRE_THROWS_WITH(F::softmax_cross_entropy(x3, t2), Contains("[2, 4]"));  // the expected shape
  }
  SECTION("scores that are not [N, C, ...] or not floating") {
    const Variable x1(uniform({3}, 32), true);
    REQUIRE_THROWS_AS(F::softmax_cross_entropy(x1, Variable(gc_util::i32({0, 1, 2}, {3}))), Error);
    const Variable xi(gc_util::i32({0, 1, 2, 3, 4, 5}, {2, 3}));
    REQUIRE_THROWS_WITH(F::softmax_cross_entropy(xi, Variable(gc_util::i32({0, 1}, {2}))), Contains("floating"));
  }
}

TEST_CASE("mean_squared_error gradients and values", "[loss][gradcheck]") {
  std::uint64_t seed = 40;
  for (const Shape& shape : {Shape{3, 4}, Shape{}, Shape{1}, Shape{1, 5}, Shape{2, 3, 2}}) {
    INFO("shape " << shape_str(shape));
    const Tensor a = uniform(shape, seed++), b = uniform(shape, seed++);
    REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::mean_squared_error(v[0], v[1])}; }, {a, b});
  }
  const Variable x0(gc_util::f64({1, 2, 3, 4}, {2, 2}));
  const Variable x1(gc_util::f64({0, 2, 5, 1}, {2, 2}));
  const Variable loss = F::mean_squared_error(x0, x1);
  REQUIRE(loss.shape() == Shape{});
  REQUIRE_NEAR_VALUES(loss.data(), {(1 + 0 + 4 + 9) / 4.0});

  // Constant target: only the prediction gets a gradient, 2 (x0 - x1) / n.
  Variable y(gc_util::f64({1, 2, 3, 4}, {2, 2}), true);
  F::mean_squared_error(y, x1).backward();
  REQUIRE_NEAR_VALUES(y.grad(), {0.5, 0, -1, 1.5});
  REQUIRE_FALSE(x1.grad().defined());
  // Constant prediction, target requiring grad: the negated gradient.
  Variable target(gc_util::f64({0, 2, 5, 1}, {2, 2}), true);
  F::mean_squared_error(x0, target).backward();
  REQUIRE_NEAR_VALUES(target.grad(), {-0.5, 0, 1, -1.5});
  REQUIRE_FALSE(x0.grad().defined());
}

TEST_CASE("mean_squared_error rejects mismatched shapes and integer inputs", "[loss][errors]") {
  const Variable a(uniform({2, 3}, 50), true);
  const Variable b(uniform({3, 2}, 51), true);
  REQUIRE_THROWS_AS(F::mean_squared_error(a, b), Error);
  REQUIRE_THROWS_WITH(F::mean_squared_error(a, b), Contains("[2, 3]") && Contains("[3, 2]"));
  // No broadcasting either.
  REQUIRE_THROWS_AS(F::mean_squared_error(a, Variable(uniform({3}, 52))), Error);
  const Variable i(gc_util::i32({1, 2}, {2}));
  REQUIRE_THROWS_AS(F::mean_squared_error(i, i), Error);
}

TEST_CASE("losses in f32 agree with f64", "[loss][f32]") {
  gc_util::check_f32_against_f64(sce_mean, {uniform({4, 5}, 60, -2, 2), gc_util::i32({3, -1, 4, 0}, {4})});
  gc_util::check_f32_against_f64(sce_none, {uniform({2, 3, 4}, 61, -2, 2),
                                            gc_util::i64({0, 2, 1, -1, 2, 2, 0, 1}, {2, 4})});
  gc_util::check_f32_against_f64(
      [](const Variables& v) -> Variables { return {F::mean_squared_error(v[0], v[1])}; },
      {uniform({3, 4}, 62), uniform({3, 4}, 63)});
}
