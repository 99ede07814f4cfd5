// scaled_dot_product_attention: gradients against numerical ones, values against a direct loop,
// the causal mask (a query never sees a later key), shapes and errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using gc_util::uniform;

namespace {

// softmax(q k^T / sqrt(d) + mask) v by loops over [G, Tq, d], [G, Tk, d], [G, Tk, dv] (f64).
std::vector<double> reference(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const std::int64_t G = q.size(0), tq = q.size(1), d = q.size(2), tk = k.size(1), dv = v.size(2);
  const std::vector<double> Q = q.to_vector<double>(), K = k.to_vector<double>(), V = v.to_vector<double>();
  std::vector<double> out(static_cast<std::size_t>(G * tq * dv), 0.0);
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t i = 0; i < tq; ++i) {
      const std::int64_t last = causal ? i + tk - tq : tk - 1;
      std::vector<double> w(static_cast<std::size_t>(last + 1));
      double top = -1e300, total = 0;
      for (std::int64_t j = 0; j <= last; ++j) {
        double s = 0;
        for (std::int64_t c = 0; c < d; ++c) s += Q[(g * tq + i) * d + c] * K[(g * tk + j) * d + c];
        w[j] = s / std::sqrt(static_cast<double>(d));
        top = std::max(top, w[j]);
      }
      for (double& x : w) total += (x = std::exp(x - top));
      for (std::int64_t j = 0; j <= last; ++j)
        for (std::int64_t c = 0; c < dv; ++c) out[(g * tq + i) * dv + c] += w[j] / total * V[(g * tk + j) * dv + c];
    }
  return out;
}

}  // namespace

TEST_CASE("scaled_dot_product_attention: values against a direct loop", "[attention]") {
  struct Case {
    std::int64_t G, tq, tk, d, dv;
    bool causal;
  };
  std::uint64_t seed = 1;
  for (const Case& c : {Case{1, 1, 1, 1, 1, false}, Case{2, 3, 5, 4, 2, false}, Case{3, 4, 4, 8, 8, true},
                        Case{2, 2, 5, 3, 4, true}, Case{1, 7, 7, 2, 3, true}}) {
    INFO("G " << c.G << " Tq " << c.tq << " Tk " << c.tk << " d " << c.d << " dv " << c.dv << " causal " << c.causal);
    const Tensor q = uniform({c.G, c.tq, c.d}, seed++, -2, 2), k = uniform({c.G, c.tk, c.d}, seed++, -2, 2);
    const Tensor v = uniform({c.G, c.tk, c.dv}, seed++, -1, 1);
    const std::vector<double> got =
        F::scaled_dot_product_attention(Variable(q), Variable(k), Variable(v), c.causal).data().to_vector<double>();
    const std::vector<double> want = reference(q, k, v, c.causal);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-12).margin(1e-14));
  }
}

TEST_CASE("scaled_dot_product_attention: gradients", "[attention][gradcheck]") {
  std::uint64_t seed = 20;
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    // [B, heads, T, d], as a transformer's heads.
    const Tensor q = uniform({2, 2, 4, 3}, seed++), k = uniform({2, 2, 4, 3}, seed++), v = uniform({2, 2, 4, 2}, seed++);
    REQUIRE_GRADCHECK([causal](const Variables& x) -> Variables {
      return {F::scaled_dot_product_attention(x[0], x[1], x[2], causal)};
    }, {q, k, v});
  }
  // Fewer queries than keys (the last Tq positions), causal.
  const Tensor q = uniform({1, 2, 3}, seed++), k = uniform({1, 5, 3}, seed++), v = uniform({1, 5, 3}, seed++);
  REQUIRE_GRADCHECK([](const Variables& x) -> Variables {
    return {F::scaled_dot_product_attention(x[0], x[1], x[2], true)};
  }, {q, k, v});
}

TEST_CASE("scaled_dot_product_attention: a causal query never sees a later key", "[attention]") {
  const Tensor q = uniform({1, 5, 4}, 40), k = uniform({1, 5, 4}, 41), v = uniform({1, 5, 3}, 42);
  Variable vq(q, true), vk(k, true), vv(v, true);
  const Variable y = F::scaled_dot_product_attention(vq, vk, vv, true);
  // Query 0 sees only key 0: its output is v[0] exactly.
  const std::vector<double> out = y.data().to_vector<double>(), vs = v.to_vector<double>();
  for (int c = 0; c < 3; ++c) CHECK(out[c] == Approx(vs[c]).epsilon(1e-15));
  // The gradient of output row 1 reaches keys and values 0 and 1 only, and exactly zero beyond.
  const Variable row1 = F::sum(F::get_item(y, {Index::all(), Index::at(1)}));
  row1.backward();
  const std::vector<double> gk = vk.grad().to_vector<double>(), gv = vv.grad().to_vector<double>();
  for (int j = 2; j < 5; ++j) {
    for (int c = 0; c < 4; ++c) CHECK(gk[j * 4 + c] == 0.0);
    for (int c = 0; c < 3; ++c) CHECK(gv[j * 3 + c] == 0.0);
  }
  bool any = false;
  for (int c = 0; c < 3; ++c) any = any || gv[3 + c] != 0.0;
  CHECK(any);
}

TEST_CASE("scaled_dot_product_attention: errors name the shapes", "[attention]") {
  const Variable q(uniform({2, 3, 4}, 1)), k(uniform({2, 5, 4}, 2)), v(uniform({2, 5, 6}, 3));
  REQUIRE_THROWS_WITH(F::scaled_dot_product_attention(q, Variable(uniform({2, 5, 3}, 4)), v),
                      Catch::Contains("same last axis"));
  REQUIRE_THROWS_WITH(F::scaled_dot_product_attention(q, k, Variable(uniform({2, 4, 6}, 5))),
                      Catch::Contains("one row per key"));
  REQUIRE_THROWS_WITH(F::scaled_dot_product_attention(Variable(uniform({2, 6, 4}, 6)), k, v, true),
                      Catch::Contains("at least as many keys (5) as queries (6)"));
  REQUIRE_THROWS_WITH(F::scaled_dot_product_attention(q, Variable(uniform({3, 5, 4}, 7)), v),
                      Catch::Contains("leading axes differ"));
}

TEST_CASE("multi_head_self_attention: each head attends with its own packed q, k, v", "[attention]") {
  // qkv [B, T, H * 3 * d]: head h's q, k, v at [h * 3d, h * 3d + 3d).
  const std::int64_t B = 2, T = 4, H = 3, d = 2;
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    const Tensor qkv = uniform({B, T, H * 3 * d}, 60 + causal, -2, 2);
    const std::vector<double> packed = qkv.to_vector<double>();
    const std::vector<double> got =
        F::multi_head_self_attention(Variable(qkv), H, causal).data().to_vector<double>();
    REQUIRE(got.size() == static_cast<std::size_t>(B * T * H * d));
    for (std::int64_t h = 0; h < H; ++h) {
      // This head's q, k, v as [B, T, d] each, then the reference attention.
      std::vector<double> part[3];
      for (int which = 0; which < 3; ++which)
        for (std::int64_t b = 0; b < B; ++b)
          for (std::int64_t t = 0; t < T; ++t)
            for (std::int64_t c = 0; c < d; ++c)
              part[which].push_back(packed[((b * T + t) * H + h) * 3 * d + which * d + c]);
      const auto as_tensor = [&](const std::vector<double>& v) { return from_vector<double>(v, {B, T, d}); };
      const std::vector<double> want = reference(as_tensor(part[0]), as_tensor(part[1]), as_tensor(part[2]), causal);
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t c = 0; c < d; ++c)
            CHECK(got[((b * T + t) * H + h) * d + c] == Approx(want[(b * T + t) * d + c]).epsilon(1e-12).margin(1e-14));
    }
  }
}

TEST_CASE("multi_head_self_attention: gradients and errors", "[attention][gradcheck]") {
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    REQUIRE_GRADCHECK([causal](const Variables& x) -> Variables {
      return {F::multi_head_self_attention(x[0], 2, causal)};
    }, {uniform({2, 3, 2 * 3 * 2}, 70 + causal)});
  }
  const Variable qkv(uniform({2, 3, 12}, 80));
  REQUIRE_THROWS_WITH(F::multi_head_self_attention(qkv, 5), Catch::Contains("does not hold 5 head(s)"));
  REQUIRE_THROWS_WITH(F::multi_head_self_attention(Variable(uniform({6, 12}, 81)), 2),
                      Catch::Contains("must be [B, T, heads * 3 * d]"));
}
