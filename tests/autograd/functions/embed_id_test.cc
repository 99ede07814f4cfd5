// Gradients and behaviour of autograd/functions/embed_id.h.
#include <catch2/catch.hpp>

#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using gc_util::uniform;

namespace {

Variables embed(const Variables& v) { return {F::embed_id(v[0], v[1])}; }

}  // namespace

TEST_CASE("embed_id looks up rows for ids of any shape", "[embed_id]") {
  const Tensor W = uniform({5, 4}, 1);
  const std::vector<double> w = W.to_vector<double>();
  const std::vector<std::int64_t> ids = {4, 0, 2, 2, 1, 4};
  for (DType id_dtype : {DType::i32, DType::i64}) {
    INFO("ids " << id_dtype);
    const Variable x(gc_util::i64(ids, {2, 3}).to(id_dtype));
    const Variable y = F::embed_id(x, Variable(W));
    REQUIRE(y.shape() == Shape{2, 3, 4});
    REQUIRE(y.dtype() == DType::f64);
    std::vector<double> want;
    for (std::int64_t id : ids)
      for (int d = 0; d < 4; ++d) want.push_back(w[id * 4 + d]);
    REQUIRE_NEAR_VALUES(y.data(), want);
    // [N] ids give [N, D]; a scalar id gives [D].
    REQUIRE(F::embed_id(Variable(gc_util::i64({1, 2}, {2}).to(id_dtype)), Variable(W)).shape() == Shape{2, 4});
    REQUIRE(F::embed_id(Variable(gc_util::i64({3}, {}).to(id_dtype)), Variable(W)).shape() == Shape{4});
  }
}

TEST_CASE("embed_id gradient accumulates over repeated ids", "[embed_id][gradcheck]") {
  const std::vector<std::int64_t> ids = {1, 3, 1, 1, 0, 3, 1, 2};
  Variable W(uniform({5, 3}, 2), true);
  const Variable x(gc_util::i32(std::vector<std::int32_t>(ids.begin(), ids.end()), {2, 4}));
  const Tensor seed = uniform({2, 4, 3}, 3);
  F::embed_id(x, W).backward(seed);
  const std::vector<double> s = seed.to_vector<double>();
  std::vector<double> want(15, 0.0);
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (int d = 0; d < 3; ++d) want[ids[i] * 3 + d] += s[i * 3 + d];
  REQUIRE_NEAR_VALUES(W.grad(), want);
  // Row 4 is never looked up: zero gradient, but a defined one of W's shape.
  REQUIRE(W.grad().shape() == Shape{5, 3});
  REQUIRE_FALSE(x.grad().defined());

  std::uint64_t seed_no = 10;
  for (DType id_dtype : {DType::i32, DType::i64}) {
    INFO("ids " << id_dtype);
    REQUIRE_GRADCHECK(embed, {gc_util::i64(ids, {8}).to(id_dtype), uniform({5, 3}, seed_no++)});
    REQUIRE_GRADCHECK(embed, {gc_util::i64(ids, {2, 2, 2}).to(id_dtype), uniform({4, 2}, seed_no++)});
    REQUIRE_GRADCHECK(embed, {gc_util::i64({0}, {1}).to(id_dtype), uniform({1, 1}, seed_no++)});
  }
  SECTION("used twice and combined with other functions") {
    REQUIRE_GRADCHECK(
        [](const Variables& v) -> Variables {
          const Variable e = F::embed_id(v[0], v[1]);
          return {F::tanh(F::sum(e, {0})), F::mul(F::embed_id(v[2], v[1]), 2.0)};
        },
        {gc_util::i64({2, 2, 0}, {3}), uniform({3, 4}, 20), gc_util::i32({1, 2}, {2})});
  }
}

TEST_CASE("embed_id with ignore_label: zero rows and no gradient", "[embed_id][gradcheck]") {
  const Tensor W = uniform({4, 3}, 30, 0.5, 1.5);
  SECTION("an ignore_label outside [0, V)") {
    const Variable x(gc_util::i64({2, -1, 2, -1, 0}, {5}));
    const Variable y = F::embed_id(x, Variable(W), -1);
    const std::vector<double> yv = y.data().to_vector<double>(), w = W.to_vector<double>();
    for (int d = 0; d < 3; ++d) {
      REQUIRE(yv[3 + d] == 0);
      REQUIRE(yv[9 + d] == 0);
      REQUIRE(yv[d] == w[6 + d]);
    }
    Variable Wv(W, true);
    F::sum(F::embed_id(x, Wv, -1)).backward();
    REQUIRE_NEAR_VALUES(Wv.grad(), {1, 1, 1, 0, 0, 0, 2, 2, 2, 0, 0, 0});
    auto fn = [](const Variables& v) -> Variables { return {F::embed_id(v[0], v[1], -1)}; };
    REQUIRE_GRADCHECK(fn, {x.data(), W});
  }
  SECTION("an ignore_label inside [0, V): the padding row gets no gradient") {
    const Variable x(gc_util::i32({0, 3, 0, 1}, {2, 2}));
    Variable Wv(W, true);
    const Variable y = F::embed_id(x, Wv, 0);
    const std::vector<double> yv = y.data().to_vector<double>();
    for (int d = 0; d < 3; ++d) REQUIRE(yv[d] == 0);
    F::sum(y).backward();
    REQUIRE_NEAR_VALUES(Wv.grad(), {0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1});
    auto fn = [](const Variables& v) -> Variables { return {F::embed_id(v[0], v[1], 0)}; };
    REQUIRE_GRADCHECK(fn, {x.data(), W});
  }
}

TEST_CASE("embed_id rejects bad ids and tables", "[embed_id][errors]") {
  const Variable W(uniform({5, 2}, 40), true);
  SECTION("an id outside [0, V) names embed_id, the id and V") {
    const Variable x(gc_util::i64({0, 5, 1}, {3}));
    REQUIRE_THROWS_AS(F::embed_id(x, W), Error);
    REQUIRE_THROWS_WITH(F::embed_id(x, W), Contains("embed_id") && Contains("id 5") && Contains("[0, 5)"));
    REQUIRE_THROWS_WITH(F::embed_id(Variable(gc_util::i32({-1}, {1})), W), Contains("id -1"));
    // -1 is only harmless while it is the ignore_label.
    REQUIRE_NOTHROW(F::embed_id(Variable(gc_util::i32({-1}, {1})), W, -1));
    REQUIRE_THROWS_WITH(F::embed_id(Variable(gc_util::i32({-1, 6}, {2})), W, -1), Contains("id 6"));
  }
  SECTION("wrong dtypes and shapes") {
    REQUIRE_THROWS_WITH(F::embed_id(Variable(gc_util::f64({0, 1}, {2})), W), Contains("i32 or i64") && Contains("f64"));
    REQUIRE_THROWS_WITH(F::embed_id(Variable(gc_util::i64({0}, {1})), Variable(gc_util::i64({1, 2}, {1, 2}))),
                        Contains("floating"));
    REQUIRE_THROWS_WITH(F::embed_id(Variable(gc_util::i64({0}, {1})), Variable(uniform({5}, 41))),
                        Contains("[V, D]") && Contains("[5]"));
  }
}

TEST_CASE("embed_id in f32 agrees with f64", "[embed_id][f32]") {
  gc_util::check_f32_against_f64(embed, {gc_util::i64({3, 1, 3, 0, 2}, {5}), uniform({4, 6}, 50)});
}
