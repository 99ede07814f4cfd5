// Values, gradients and errors of autograd/functions/rows.h (select_rows, scatter_add_rows).
#include <catch2/catch.hpp>

#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using gc_util::uniform;

namespace {

const std::vector<std::int64_t> kIds = {3, 0, 3, 1, 3};  // repeats 3, leaves 2 out

}  // namespace

TEST_CASE("select_rows picks rows; scatter_add_rows sums them back", "[rows]") {
  const Tensor x = uniform({4, 3}, 1);
  const std::vector<double> xs = x.to_vector<double>();
  for (DType id_dtype : {DType::i32, DType::i64}) {
    INFO("ids " << id_dtype);
    const Tensor ids = gc_util::i64(kIds, {5}).to(id_dtype);
    const Variable y = F::select_rows(Variable(x), ids);
    REQUIRE(y.shape() == Shape{5, 3});
    std::vector<double> want;
    for (std::int64_t id : kIds)
      for (int d = 0; d < 3; ++d) want.push_back(xs[id * 3 + d]);
    REQUIRE_NEAR_VALUES(y.data(), want);

    const Tensor v = uniform({5, 3}, 2);
    const std::vector<double> vs = v.to_vector<double>();
    const Variable z = F::scatter_add_rows(Variable(v), ids, 4);
    REQUIRE(z.shape() == Shape{4, 3});
    std::vector<double> sums(12, 0.0);
    for (std::size_t s = 0; s < kIds.size(); ++s)
      for (int d = 0; d < 3; ++d) sums[kIds[s] * 3 + d] += vs[s * 3 + d];
    REQUIRE_NEAR_VALUES(z.data(), sums);
  }
  // No rows at all: [0, D] in, [rows, D] of zeros out.
  const Variable empty = F::scatter_add_rows(Variable(Tensor({0, 3}, DType::f64)), gc_util::i64({}, {0}), 2);
  REQUIRE_NEAR_VALUES(empty.data(), std::vector<double>(6, 0.0));
  REQUIRE(F::select_rows(Variable(x), gc_util::i64({}, {0})).shape() == Shape{0, 3});
}

TEST_CASE("select_rows and scatter_add_rows gradients", "[rows][gradcheck]") {
  const Tensor ids = gc_util::i64(kIds, {5});
  auto select = [&](const Variables& v) { return Variables{F::select_rows(v[0], ids)}; };
  auto scatter = [&](const Variables& v) { return Variables{F::scatter_add_rows(v[0], ids, 4)}; };
  REQUIRE_GRADCHECK(select, {uniform({4, 3}, 3)});
  REQUIRE_GRADCHECK(scatter, {uniform({5, 3}, 4)});
  // Through each other, as a mixture of experts uses them (out and back, weighted).
  auto round_trip = [&](const Variables& v) {
    return Variables{F::scatter_add_rows(F::select_rows(v[0], ids) * v[1], ids, 4)};
  };
  REQUIRE_GRADCHECK(round_trip, {uniform({4, 3}, 5), uniform({5, 3}, 6)});
}

TEST_CASE("select_rows and scatter_add_rows errors name the operation", "[rows]") {
  const Variable x(uniform({4, 3}, 7));
  REQUIRE_THROWS_WITH(F::select_rows(x, gc_util::i64({0, 4}, {2})), Contains("select_rows") && Contains("4"));
  REQUIRE_THROWS_WITH(F::select_rows(x, gc_util::i64({0, 1}, {1, 2})), Contains("select_rows: ids must be a 1-D"));
  REQUIRE_THROWS_WITH(F::select_rows(Variable(uniform({4}, 8)), gc_util::i64({0}, {1})),
                      Contains("select_rows: x must be 2-D"));
  REQUIRE_THROWS_WITH(F::scatter_add_rows(x, gc_util::i64({0, 1}, {2}), 4),
                      Contains("scatter_add_rows: 2 ids for the 4 rows"));
  REQUIRE_THROWS_WITH(F::scatter_add_rows(x, gc_util::i64({0, 1, 2, 5}, {4}), 5 - 1),
                      Contains("scatter_add_rows") && Contains("5"));
}
