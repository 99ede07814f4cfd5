// Behaviour of autograd/functions/evaluation.h: accuracy (a metric without gradient).
#include <catch2/catch.hpp>

#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using gc_util::uniform;

TEST_CASE("accuracy counts rows whose argmax equals the label", "[evaluation]") {
  // argmax per row: 2, 0, 1, 1
  const Variable y(gc_util::f64({0.1, 0.2, 0.7, 3, -1, 2, 0, 5, 1, -2, -1, -3}, {4, 3}));
  for (DType label_dtype : {DType::i32, DType::i64}) {
    INFO("labels " << label_dtype);
    const Variable all_right(gc_util::i64({2, 0, 1, 1}, {4}).to(label_dtype));
    const Variable half(gc_util::i64({2, 1, 1, 0}, {4}).to(label_dtype));
    const Variable none(gc_util::i64({0, 2, 0, 2}, {4}).to(label_dtype));
    REQUIRE_NEAR_VALUES(F::accuracy(y, all_right).data(), {1});
    REQUIRE_NEAR_VALUES(F::accuracy(y, half).data(), {0.5});
    REQUIRE_NEAR_VALUES(F::accuracy(y, none).data(), {0});
    const Variable a = F::accuracy(y, half);
    REQUIRE(a.shape() == Shape{});
    REQUIRE(a.dtype() == DType::f64);
  }
  // Batch 1.
  REQUIRE_NEAR_VALUES(F::accuracy(Variable(gc_util::f64({1, 3}, {1, 2})), Variable(gc_util::i32({1}, {1}))).data(),
                      {1});
}

TEST_CASE("accuracy breaks ties at the first maximum", "[evaluation]") {
  // Rows with ties: [1, 1, 0] -> 0, [2, 5, 5] -> 1, [4, 4, 4] -> 0.
  const Variable y(gc_util::f64({1, 1, 0, 2, 5, 5, 4, 4, 4}, {3, 3}));
  REQUIRE_NEAR_VALUES(F::accuracy(y, Variable(gc_util::i32({0, 1, 0}, {3}))).data(), {1});
  REQUIRE_NEAR_VALUES(F::accuracy(y, Variable(gc_util::i32({1, 2, 2}, {3}))).data(), {0});
  REQUIRE_NEAR_VALUES(F::accuracy(y, Variable(gc_util::i32({1, 1, 1}, {3}))).data(), {1.0 / 3});
}

TEST_CASE("accuracy with ignore_label", "[evaluation]") {
  // argmax per row: 2, 0, 1, 1, 0
  const Variable y(gc_util::f64({0.1, 0.2, 0.7, 3, -1, 2, 0, 5, 1, -2, -1, -3, 9, 8, 7}, {5, 3}));
  const Variable t(gc_util::i32({2, -1, 0, 1, -1}, {5}));
  // Rows 1 and 4 are left out of both counts: 2 hits of 3.
  REQUIRE_NEAR_VALUES(F::accuracy(y, t, -1).data(), {2.0 / 3});
  // Without ignore_label, -1 is just a wrong label: 2 hits of 5.
  REQUIRE_NEAR_VALUES(F::accuracy(y, t).data(), {2.0 / 5});
  // An ignore_label that happens to be a real class: rows labelled 0 are left out.
  const Variable u(gc_util::i64({2, 0, 0, 1, 0}, {5}));
  REQUIRE_NEAR_VALUES(F::accuracy(y, u, 0).data(), {1});
  // Every label ignored: 0, not NaN.
  const Variable ignored(gc_util::i32({-1, -1, -1, -1, -1}, {5}));
  REQUIRE_NEAR_VALUES(F::accuracy(y, ignored, -1).data(), {0});
  const Variable x0(gc_util::f64({}, {0, 3}));
  REQUIRE_NEAR_VALUES(F::accuracy(x0, Variable(gc_util::i32({}, {0}))).data(), {0});
}

TEST_CASE("accuracy has no gradient", "[evaluation][gradcheck]") {
  Variable y(uniform({6, 4}, 10), true);
  const Variable t(gc_util::i64({0, 1, 2, 3, 0, 1}, {6}));
  const Variable a = F::accuracy(y, t);
  REQUIRE_FALSE(a.requires_grad());
  REQUIRE(a.is_leaf());
  // Locally constant (no near-ties within eps in these scores): the checker finds a zero
  // numerical gradient and no analytic one.
  REQUIRE_GRADCHECK([](const Variables& v) -> Variables { return {F::accuracy(v[0], v[1], 1)}; },
                    {uniform({6, 4}, 11), t.data()});
}

TEST_CASE("accuracy rejects bad shapes and dtypes", "[evaluation][errors]") {
  const Variable y(uniform({4, 3}, 20));
  const Variable y3(uniform({4, 3, 2}, 21));
  const Variable t(gc_util::i32({0, 1, 2, 0}, {4}));
  REQUIRE_THROWS_AS(F::accuracy(y3, t), Error);
  REQUIRE_THROWS_WITH(F::accuracy(y3, t), Contains("[4, 3, 2]"));
  const Variable tf(gc_util::f64({0, 1, 2, 0}, {4}));
  REQUIRE_THROWS_AS(F::accuracy(y, tf), Error);
  REQUIRE_THROWS_WITH(F::accuracy(y, tf), Contains("i32 or i64"));
  const Variable t3(gc_util::i32({0, 1, 2}, {3}));
  REQUIRE_THROWS_AS(F::accuracy(y, t3), Error);
  REQUIRE_THROWS_WITH(F::accuracy(y, t3), Contains("[3]") && Contains("[4, 3]"));
  const Variable t2(gc_util::i32({0, 1, 2, 0}, {4, 1}));
  REQUIRE_THROWS_AS(F::accuracy(y, t2), Error);
}

TEST_CASE("accuracy in f32 agrees with f64", "[evaluation][f32]") {
  const Tensor y = uniform({8, 5}, 30);
  const Tensor t = gc_util::i32({0, 1, 2, 3, 4, 0, 1, -1}, {8});
  const Variable a64 = F::accuracy(Variable(y), Variable(t), -1);
  const Variable a32 = F::accuracy(Variable(y.to(DType::f32)), Variable(t), -1);
  REQUIRE(a32.dtype() == DType::f32);
  REQUIRE_F32_MATCHES_F64(a32.data(), a64.data());
}
