// Autocast: each function's inputs are cast by its policy (products lowered to 16 bits, softmax,
// losses, normalisation and sums in f32, mixed inputs promoted), and the result and every
// gradient equal the same computation written with explicit casts, bit for bit.
#include <catch2/catch.hpp>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "core/ops.h"

using namespace tandem;

namespace {

Tensor uniform(const Shape& shape, std::uint64_t seed, DType dtype = DType::f32) {
  Generator generator(seed);
  return rand_uniform(shape, generator, -1, 1, dtype);
}

bool same(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.dtype() == b.dtype() && a.shape() == b.shape() &&
         a.to(DType::f64).to_vector<double>() == b.to(DType::f64).to_vector<double>();
}

}  // namespace

TEST_CASE("cast: values round once, the gradient goes back in the input's dtype", "[autocast]") {
  const Tensor x = uniform({3, 4}, 1, DType::f64);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    Variable v(x, true);
    const Variable y = F::cast(v, dtype);
    REQUIRE(y.dtype() == dtype);
    REQUIRE(same(y.data(), x.to(dtype)));
    F::sum(F::mul(y, 3.0)).backward();
    REQUIRE(v.grad().dtype() == DType::f64);
    REQUIRE(v.grad().to_vector<double>() == std::vector<double>(12, 3.0));
  }
  // A round trip f64 -> f32 -> f64 around a product, checked against central differences.
  const GradcheckResult result = gradcheck(
      [](const Variables& v) -> Variables {
        return {F::cast(F::mul(F::cast(v[0], DType::f32), F::cast(v[1], DType::f32)), DType::f64)};
      },
      {uniform({2, 3}, 2, DType::f64), uniform({2, 3}, 3, DType::f64)},
      GradcheckOptions{/*eps=*/1e-2, /*atol=*/1e-4, /*rtol=*/1e-3});
  INFO(result.report);
  REQUIRE(result.ok);
  Variable same_dtype(x, true);
  REQUIRE(F::cast(same_dtype, DType::f64).node() == same_dtype.node());  // no node for a no-op
  REQUIRE_THROWS_WITH(F::cast(Variable(x, true), DType::i32), Catch::Contains("cannot carry back"));
}

TEST_CASE("autocast lowers linear to 16 bits with f32 parameters, bit for bit as explicit casts", "[autocast]") {
  for (DType half : {DType::bf16, DType::f16}) {
    INFO(dtype_name(half));
    const Tensor x = uniform({5, 8}, 10), w = uniform({6, 8}, 11), b = uniform({6}, 12), t = uniform({5, 6}, 13);
    Variable xa(x, true), wa(w, true), ba(b, true);
    Variable ya;
    {
      const AutocastScope scope(half);
      REQUIRE(autocast_dtype() == half);
      ya = F::linear(xa, wa, ba);
      REQUIRE(ya.dtype() == half);
      // mean_squared_error is f32: its 16-bit input is widened, the f32 target is left alone.
      const Variable loss = F::mean_squared_error(ya, Variable(t));
      REQUIRE(loss.dtype() == DType::f32);
      loss.backward();
    }
    REQUIRE(!autocast_dtype());
    Variable xe(x, true), we(w, true), be(b, true);
    const Variable ye = F::linear(F::cast(xe, half), F::cast(we, half), F::cast(be, half));
    F::mean_squared_error(F::cast(ye, DType::f32), Variable(t)).backward();
    REQUIRE(same(ya.data(), ye.data()));
    for (auto [a, e] : {std::pair{xa, xe}, {wa, we}, {ba, be}}) {
      REQUIRE(a.grad().dtype() == DType::f32);
      REQUIRE(same(a.grad(), e.grad()));
    }
  }
}

TEST_CASE("autocast: the f32 list widens 16-bit inputs, promote takes the widest, f64 is never lowered", "[autocast]") {
  const AutocastScope scope(DType::bf16);
  const Variable logits(uniform({4, 5}, 20, DType::bf16));
  const Variable labels(from_vector<std::int32_t>({0, 4, 2, 1}));
  const Variable loss = F::softmax_cross_entropy(logits, labels);
  REQUIRE(loss.dtype() == DType::f32);
  {
    const AutocastScope off(std::nullopt);
    REQUIRE(same(loss.data(), F::softmax_cross_entropy(F::cast(logits, DType::f32), labels).data()));
  }
  REQUIRE(F::softmax(logits).dtype() == DType::f32);
  REQUIRE(F::sum(logits).dtype() == DType::f32);
  // promote: bf16 + f32 is f32 (outside a scope, mixed dtypes are an error naming both).
  const Variable wide(uniform({4, 5}, 21));
  REQUIRE(F::add(logits, wide).dtype() == DType::f32);
  REQUIRE(same(F::add(logits, wide).data(), add(logits.data().to(DType::f32), wide.data())));
  REQUIRE(F::add(logits, Variable(uniform({4, 5}, 22, DType::f16))).dtype() == DType::f32);
  REQUIRE(F::relu(logits).dtype() == DType::bf16);  // single inputs run as given
  // f64 stays f64 under the lower policy.
  const Variable x64(uniform({2, 3}, 23, DType::f64)), w64(uniform({4, 3}, 24, DType::f64));
  REQUIRE(F::linear(x64, w64).dtype() == DType::f64);
  {
    const AutocastScope off(std::nullopt);
    REQUIRE_THROWS_WITH(F::add(logits, wide), Catch::Contains("different dtypes"));
  }
}

TEST_CASE("autocast policies: the table names each list, and an entry can be changed", "[autocast]") {
  REQUIRE(autocast_policy("linear+relu") == AutocastPolicy::lower);
  REQUIRE(autocast_policy("convolution_2d") == AutocastPolicy::lower);
  REQUIRE(autocast_policy("softmax_cross_entropy") == AutocastPolicy::f32);
  REQUIRE(autocast_policy("layer_normalization") == AutocastPolicy::f32);
  REQUIRE(autocast_policy("add") == AutocastPolicy::promote);
  REQUIRE(autocast_policy("cast") == AutocastPolicy::as_given);
  const Variable a(uniform({3, 4}, 30)), b(uniform({4, 2}, 31));
  const AutocastScope scope(DType::f16);
  REQUIRE(F::matmul(a, b).dtype() == DType::f16);
  set_autocast_policy("matmul", AutocastPolicy::f32);
  REQUIRE(F::matmul(a, b).dtype() == DType::f32);
  set_autocast_policy("matmul", AutocastPolicy::lower);
  REQUIRE(F::matmul(a, b).dtype() == DType::f16);
  REQUIRE_THROWS_WITH(set_autocast_policy("linear+relu", AutocastPolicy::f32), Catch::Contains("without its suffix"));
  REQUIRE_THROWS_WITH(AutocastScope(DType::f64), Catch::Contains("bf16 or f16"));
}

TEST_CASE("n_step_lstm in 16 bits: computed in f32 on the rounded inputs, each output rounded once",
          "[autocast][half]") {
  const std::int64_t H = 3, I = 4;
  std::vector<Variables> ws(1), bs(1);
  for (int j = 0; j < 8; ++j) {
    ws[0].push_back(Variable(uniform({H, j < 4 ? I : H}, 40 + j), true));
    bs[0].push_back(Variable(uniform({H}, 50 + j), true));
  }
  const Variables xs{Variable(uniform({5, I}, 60), true), Variable(uniform({3, I}, 61), true)};
  for (DType half : {DType::bf16, DType::f16}) {
    INFO(dtype_name(half));
    // Under autocast the f32 parameters are lowered; the reference runs f32 on the rounded values.
    F::NStepLSTMResult low;
    {
      const AutocastScope scope(half);
      low = F::n_step_lstm(1, 0.0, Variable(), Variable(), ws, bs, xs);
    }
    std::vector<Variables> rws(1), rbs(1);
    for (int j = 0; j < 8; ++j) {
      rws[0].push_back(Variable(ws[0][j].data().to(half).to(DType::f32)));
      rbs[0].push_back(Variable(bs[0][j].data().to(half).to(DType::f32)));
    }
    const Variables rxs{Variable(xs[0].data().to(half).to(DType::f32)), Variable(xs[1].data().to(half).to(DType::f32))};
    const F::NStepLSTMResult ref = F::n_step_lstm(1, 0.0, Variable(), Variable(), rws, rbs, rxs);
    REQUIRE(low.ys[0].dtype() == half);
    REQUIRE(same(low.ys[0].data(), ref.ys[0].data().to(half)));
    REQUIRE(same(low.hy.data(), ref.hy.data().to(half)));
    REQUIRE(same(low.cy.data(), ref.cy.data().to(half)));
    // Backward: the gradients reach the f32 parameters in f32.
    for (auto& w : ws[0]) w.cleargrad();
    F::sum(F::add(F::sum(low.ys[0]), F::sum(low.ys[1]))).backward();
    REQUIRE(ws[0][0].grad().dtype() == DType::f32);
    REQUIRE(xs[0].grad().dtype() == DType::f32);
  }
}

TEST_CASE("random fills and dropout in 16 bits: the wide draw rounded once, f32's mask", "[autocast][half]") {
  for (DType half : {DType::bf16, DType::f16}) {
    INFO(dtype_name(half));
    Generator a(7), b(7);
    REQUIRE(same(rand_uniform({100}, a, -3, 3, half), rand_uniform({100}, b, -3, 3, DType::f64).to(half)));
    REQUIRE(same(randn({100}, a, 0, 2, half), randn({100}, b, 0, 2, DType::f64).to(half)));
    REQUIRE(same(philox_uniform({100}, a, 0, 1, half), philox_uniform({100}, b, 0, 1, DType::f32).to(half)));
    const Tensor x = uniform({8, 16}, 70);
    Generator ga(9), gb(9);
    Variable xh(x.to(half), true);
    const Variable yh = F::dropout(xh, 0.3, &ga);
    Variable xf(x.to(half).to(DType::f32), true);
    const Variable yf = F::dropout(xf, 0.3, &gb);
    REQUIRE(same(yh.data(), yf.data().to(half)));
    F::sum(yh).backward();
    F::sum(yf).backward();
    REQUIRE(same(xh.grad(), xf.grad().to(half)));
  }
}
