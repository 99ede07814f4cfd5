// Fused attention (F::attention and core/ops/attention.h's fused_attention_forward/backward):
// values and gradients against the composed reference (F::composed_attention) and a direct loop,
// in f64 and f32, for every mask (none, causal, sliding window, packed documents and their
// combinations), unequal query and key lengths with global positions (query_start, key_start),
// grouped-query attention, dv != d and an explicit scale; dropout (same draws as the reference,
// its rate, train mode only, keep decisions a function of global positions and heads);
// numerical gradients; queries that see no key, no keys, no queries; the log-sum-exp that forward
// returns; the decomposition over blocks of keys that context parallelism relies on; independence
// of the thread count; errors; scaled_dot_product_attention routed through the fused op; the
// online softmax across tiles of keys, scores that would overflow exp, 16-bit inputs, and a sweep
// of global positions and windows around the edges of the visible band.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/attention_dropout.h"
#include "core/ops/attention.h"
#include "core/threads.h"
#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using gc_util::uniform;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Empty when every element of got is within abs + rel * |want| of want (equal infinities
// agree); otherwise the first mismatch.
std::string differ(const Tensor& got, const Tensor& want, double rel, double abs) {
  if (!got.defined() || !want.defined()) return got.defined() ? "want is undefined" : "got is undefined";
  if (got.shape() != want.shape()) return "shape " + got.description() + " vs " + want.description();
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (g[i] == w[i]) continue;
    if (!(std::abs(g[i] - w[i]) <= abs + rel * std::abs(w[i]))) {
      std::ostringstream out;
      out << "element " << i << " of " << got.description() << ": got " << g[i] << ", want " << w[i];
      return out.str();
    }
  }
  return "";
}

#define CHECK_CLOSE(got, want, rel, abs)                                     \
  do {                                                                       \
    const std::string close_mismatch_ = differ((got), (want), (rel), (abs)); \
    INFO(#got " vs " #want ": " << close_mismatch_);                         \
    CHECK(close_mismatch_.empty());                                          \
  } while (0)

// Bit-identical tensors.
bool identical(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.shape() == b.shape() && a.dtype() == b.dtype() &&
         a.to_vector<double>() == b.to_vector<double>();
}

bool all_finite(const Tensor& t) {
  for (double x : t.to_vector<double>())
    if (!std::isfinite(x)) return false;
  return true;
}

// The output and the gradients of q, k and v of a weighted sum of the output (fixed random
// weights from weight_seed).
struct Result {
  Tensor out, q, k, v;
};

template <typename Fn>
Result run(Fn&& fn, const Tensor& q, const Tensor& k, const Tensor& v, std::uint64_t weight_seed = 99) {
  Variable vq(q.clone(), true), vk(k.clone(), true), vv(v.clone(), true);
  const Variable y = fn(vq, vk, vv);
  y.backward(uniform(y.shape(), weight_seed, -1, 1).to(y.dtype()));  // the same weights in f32 and f64
  return {y.data(), vq.grad(), vk.grad(), vv.grad()};
}

// F::attention / F::composed_attention with the options, dropout drawing its seed from a fresh
// Generator(generator_seed) on every call.
auto fused(const F::AttentionOptions& options, std::uint64_t generator_seed = 5) {
  return [options, generator_seed](const Variable& q, const Variable& k, const Variable& v) {
    Generator generator(generator_seed);
    F::AttentionOptions o = options;
    o.generator = &generator;
    return F::attention(q, k, v, o);
  };
}

auto composed(const F::AttentionOptions& options, std::uint64_t generator_seed = 5) {
  return [options, generator_seed](const Variable& q, const Variable& k, const Variable& v) {
    Generator generator(generator_seed);
    F::AttentionOptions o = options;
    o.generator = &generator;
    return F::composed_attention(q, k, v, o);
  };
}

void check_results(const Result& got, const Result& want, double rel, double abs, double grad_rel, double grad_abs) {
  CHECK_CLOSE(got.out, want.out, rel, abs);
  CHECK_CLOSE(got.q, want.q, grad_rel, grad_abs);
  CHECK_CLOSE(got.k, want.k, grad_rel, grad_abs);
  CHECK_CLOSE(got.v, want.v, grad_rel, grad_abs);
}

struct Dims {
  std::int64_t B, hq, hkv, tq, tk, d, dv;
};

struct Inputs {
  Tensor q, k, v;
};

Inputs make_inputs(const Dims& s, std::uint64_t seed, DType dtype = DType::f64, double range = 2) {
  return {uniform({s.B, s.hq, s.tq, s.d}, seed, -range, range, dtype),
          uniform({s.B, s.hkv, s.tk, s.d}, seed + 1, -range, range, dtype),
          uniform({s.B, s.hkv, s.tk, s.dv}, seed + 2, -1, 1, dtype)};
}

// Three documents of uneven lengths per row of T positions (the cuts differ between rows, the
// ids are not in increasing order and differ between rows): i64 [B, T].
Tensor documents(std::int64_t B, std::int64_t T) {
  const std::int64_t labels[3] = {7, 2, 11};
  std::vector<std::int64_t> ids;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t c1 = T * (2 + b) / 7, c2 = std::max(c1, T * (5 + b) / 8);
    for (std::int64_t t = 0; t < T; ++t) ids.push_back(labels[t < c1 ? 0 : t < c2 ? 1 : 2] + b);
  }
  return from_vector<std::int64_t>(ids, {B, T});
}

// Ids drawn at random from {0, 1, 2} per position: documents that interleave.
Tensor scattered_ids(std::int64_t B, std::int64_t T, std::uint64_t seed, DType dtype = DType::i64) {
  Generator g(seed);
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < B * T; ++i) ids.push_back(static_cast<std::int64_t>(g.uniform(0, 3)));
  return from_vector<std::int64_t>(ids, {B, T}).to(dtype);
}

AttentionMask make_mask(bool causal, std::int64_t window = 0, Tensor qseg = Tensor(), Tensor kseg = Tensor(),
                        std::int64_t query_start = -1, std::int64_t key_start = 0) {
  AttentionMask m;
  m.causal = causal;
  m.window = window;
  m.query_segments = qseg;
  m.key_segments = kseg;
  m.query_start = query_start;
  m.key_start = key_start;
  return m;
}

// The visibility rule of core/ops/attention.h, written out.
struct Visibility {
  const AttentionMask& mask;
  std::int64_t tq, tk;
  std::vector<std::int64_t> qseg, kseg;

  Visibility(const AttentionMask& m, std::int64_t tq_, std::int64_t tk_) : mask(m), tq(tq_), tk(tk_) {
    if (m.query_segments.defined()) qseg = m.query_segments.to_vector<std::int64_t>();
    if (m.key_segments.defined()) kseg = m.key_segments.to_vector<std::int64_t>();
  }
  bool operator()(std::int64_t b, std::int64_t i, std::int64_t j) const {
    const std::int64_t p = (mask.query_start < 0 ? tk - tq : mask.query_start) + i, s = mask.key_start + j;
    if (mask.causal && s > p) return false;
    if (mask.window > 0 && p - s >= mask.window) return false;
    if (mask.window > 0 && !mask.causal && s - p >= mask.window) return false;
    if (!qseg.empty() && qseg[b * tq + i] != kseg[b * tk + j]) return false;
    return true;
  }
};

// Attention by loops (f64): the output [B, Hq, Tq, dv] and the log-sum-exp [B, Hq, Tq].
struct Direct {
  Tensor out, lse;
};

Direct direct(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, double scale) {
  const std::int64_t B = q.size(0), hq = q.size(1), tq = q.size(2), d = q.size(3);
  const std::int64_t hkv = k.size(1), tk = k.size(2), dv = v.size(3), group = hq / hkv;
  const std::vector<double> Q = q.to_vector<double>(), K = k.to_vector<double>(), V = v.to_vector<double>();
  const Visibility visible(mask, tq, tk);
  std::vector<double> out(static_cast<std::size_t>(B * hq * tq * dv), 0.0), lse(static_cast<std::size_t>(B * hq * tq));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < hq; ++h) {
      const std::int64_t kh = h / group;
      for (std::int64_t i = 0; i < tq; ++i) {
        const std::int64_t row = (b * hq + h) * tq + i;
        std::vector<double> score(static_cast<std::size_t>(tk), -kInf);
        double top = -kInf;
        for (std::int64_t j = 0; j < tk; ++j) {
          if (!visible(b, i, j)) continue;
          double s = 0;
          for (std::int64_t c = 0; c < d; ++c) s += Q[row * d + c] * K[((b * hkv + kh) * tk + j) * d + c];
          score[j] = scale * s;
          top = std::max(top, score[j]);
        }
        if (top == -kInf) {
          lse[row] = -kInf;
          continue;
        }
        double total = 0;
        for (std::int64_t j = 0; j < tk; ++j) total += score[j] == -kInf ? 0.0 : std::exp(score[j] - top);
        lse[row] = top + std::log(total);
        for (std::int64_t j = 0; j < tk; ++j) {
          if (score[j] == -kInf) continue;
          const double w = std::exp(score[j] - top) / total;
          for (std::int64_t c = 0; c < dv; ++c) out[row * dv + c] += w * V[((b * hkv + kh) * tk + j) * dv + c];
        }
      }
    }
  return {from_vector<double>(out, {B, hq, tq, dv}), from_vector<double>(lse, {B, hq, tq})};
}

double default_scale(std::int64_t d) { return 1.0 / std::sqrt(static_cast<double>(d)); }

struct Case {
  std::string name;
  Dims dims;
  AttentionMask mask;
  double scale = 0;  // 0: the default 1 / sqrt(d)
};

// Fused against composed (values and gradients) and the direct loop (values), in f64.
void check_f64_case(const Case& c, std::uint64_t seed) {
  INFO("case " << c.name << ": B " << c.dims.B << " Hq " << c.dims.hq << " Hkv " << c.dims.hkv << " Tq " << c.dims.tq
               << " Tk " << c.dims.tk << " d " << c.dims.d << " dv " << c.dims.dv);
  const Inputs in = make_inputs(c.dims, seed);
  F::AttentionOptions options;
  options.mask = c.mask;
  options.scale = c.scale;
  const Result got = run(fused(options), in.q, in.k, in.v);
  const Result want = run(composed(options), in.q, in.k, in.v);
  check_results(got, want, 1e-10, 1e-10, 1e-10, 1e-10);
  const Direct loop = direct(in.q, in.k, in.v, c.mask, c.scale != 0 ? c.scale : default_scale(c.dims.d));
  CHECK_CLOSE(got.out, loop.out, 1e-10, 1e-10);
  CHECK_CLOSE(want.out, loop.out, 1e-10, 1e-10);
}

}  // namespace

TEST_CASE("fused attention: F::attention is fused_attention_forward", "[attention][fused]") {
  // F::attention is the fused op itself: its output is fused_attention_forward's.
  const Inputs in = make_inputs({2, 4, 2, 9, 9, 5, 3}, 3);
  const AttentionMask mask = make_mask(true, 0, documents(2, 9), documents(2, 9));
  F::AttentionOptions options;
  options.mask = mask;
  const Variable y = F::attention(Variable(in.q), Variable(in.k), Variable(in.v), options);
  const AttentionOutput core = fused_attention_forward(in.q, in.k, in.v, mask, default_scale(5));
  CHECK_CLOSE(y.data(), core.out, 1e-14, 1e-15);
  CHECK(core.lse.shape() == Shape{2, 4, 9});
  CHECK(core.lse.dtype() == DType::f64);
}

TEST_CASE("fused attention: masks against the composed reference (f64)", "[attention][fused]") {
  std::uint64_t seed = 100;
  for (std::int64_t T : {1, 7, 129}) {
    const Dims dims{2, 2, 2, T, T, 8, 6};
    const Tensor docs = documents(2, T);
    const std::vector<Case> cases = {
        {"no mask", dims, make_mask(false)},
        {"causal", dims, make_mask(true)},
        {"causal window 3", dims, make_mask(true, 3)},
        {"bidirectional window 2", dims, make_mask(false, 2)},
        {"packed", dims, make_mask(false, 0, docs, docs)},
        {"packed causal", dims, make_mask(true, 0, docs, docs)},
        {"packed causal window 3", dims, make_mask(true, 3, docs, docs)},
        {"packed bidirectional window 4", dims, make_mask(false, 4, docs, docs)},
        {"interleaved documents, causal", dims,
         make_mask(true, 0, scattered_ids(2, T, seed), scattered_ids(2, T, seed))},
        {"i32 documents, causal", dims, make_mask(true, 0, docs.to(DType::i32), docs.to(DType::i32))},
    };
    for (const Case& c : cases) check_f64_case(c, seed += 3);
  }
}

TEST_CASE("fused attention: unequal lengths and global positions (f64)", "[attention][fused]") {
  std::uint64_t seed = 200;
  // Tq 3 of Tk 7: the default query_start is Tk - Tq (the last three positions).
  check_f64_case({"Tq 3 Tk 7 causal", {2, 2, 1, 3, 7, 4, 4}, make_mask(true)}, seed += 3);
  check_f64_case({"Tq 3 Tk 7 no mask", {2, 2, 1, 3, 7, 4, 4}, make_mask(false)}, seed += 3);
  check_f64_case({"Tq 3 Tk 7 causal window 2", {1, 2, 2, 3, 7, 4, 4}, make_mask(true, 2)}, seed += 3);
  check_f64_case({"Tq 7 Tk 3 no mask", {1, 2, 2, 7, 3, 4, 4}, make_mask(false)}, seed += 3);
  // A query block at positions 64..95 against the keys at 0..63 and at 32..95 (context
  // parallelism's blocks), causal, and with packed documents and a window.
  const Tensor docs = documents(2, 96);
  const Tensor qdocs = slice(docs, 1, 64, 96);
  for (std::int64_t key_start : {0, 32}) {
    const Dims dims{2, 2, 2, 32, 64, 8, 8};
    const Tensor kdocs = slice(docs, 1, key_start, key_start + 64);
    check_f64_case({"queries 64..95, keys from " + std::to_string(key_start) + ", causal", dims,
                    make_mask(true, 0, Tensor(), Tensor(), 64, key_start)},
                   seed += 3);
    check_f64_case({"queries 64..95, keys from " + std::to_string(key_start) + ", packed causal", dims,
                    make_mask(true, 0, qdocs, kdocs, 64, key_start)},
                   seed += 3);
    check_f64_case({"queries 64..95, keys from " + std::to_string(key_start) + ", causal window 40", dims,
                    make_mask(true, 40, Tensor(), Tensor(), 64, key_start)},
                   seed += 3);
    check_f64_case({"queries 64..95, keys from " + std::to_string(key_start) + ", bidirectional window 20", dims,
                    make_mask(false, 20, Tensor(), Tensor(), 64, key_start)},
                   seed += 3);
  }
  // Queries before the keys (query_start 0, key_start 5): non-causal sees them all.
  check_f64_case({"keys after queries", {1, 2, 2, 4, 6, 3, 3}, make_mask(false, 0, Tensor(), Tensor(), 0, 5)},
                 seed += 3);
}

TEST_CASE("fused attention: grouped-query heads, dv != d, explicit scale (f64)", "[attention][fused]") {
  std::uint64_t seed = 300;
  for (std::int64_t hkv : {4, 2, 1})
    for (std::int64_t T : {7, 33}) {
      const Tensor docs = documents(2, T);
      check_f64_case({"GQA Hkv " + std::to_string(hkv), {2, 4, hkv, T, T, 16, 16}, make_mask(false)}, seed += 3);
      check_f64_case(
          {"GQA causal packed Hkv " + std::to_string(hkv), {2, 4, hkv, T, T, 16, 16}, make_mask(true, 0, docs, docs)},
          seed += 3);
    }
  check_f64_case({"dv 3 d 5", {2, 2, 2, 9, 9, 5, 3}, make_mask(true)}, seed += 3);
  check_f64_case({"dv 11 d 2", {1, 2, 1, 9, 12, 2, 11}, make_mask(false, 3)}, seed += 3);
  check_f64_case({"scale 0.37", {2, 2, 2, 9, 9, 5, 4}, make_mask(true), 0.37}, seed += 3);
  check_f64_case({"scale 2.5 GQA window", {1, 4, 2, 17, 17, 4, 4}, make_mask(true, 5), 2.5}, seed += 3);
}

TEST_CASE("fused attention: f32 within rounding", "[attention][fused]") {
  struct F32Case {
    std::string name;
    Dims dims;
    AttentionMask mask;
  };
  const Tensor docs = documents(2, 129);
  const std::vector<F32Case> cases = {
      {"T 129 causal packed GQA", {2, 4, 2, 129, 129, 16, 16}, make_mask(true, 0, docs, docs)},
      {"T 129 no mask", {1, 2, 2, 129, 129, 16, 8}, make_mask(false)},
      {"T 7 window 3", {2, 2, 1, 7, 7, 4, 4}, make_mask(true, 3)},
  };
  std::uint64_t seed = 400;
  for (const F32Case& c : cases) {
    INFO("case " << c.name);
    const Inputs in = make_inputs(c.dims, seed += 3, DType::f32, 1);
    F::AttentionOptions options;
    options.mask = c.mask;
    const Result got = run(fused(options), in.q, in.k, in.v);
    const Result want = run(composed(options), in.q.to(DType::f64), in.k.to(DType::f64), in.v.to(DType::f64));
    REQUIRE(got.out.dtype() == DType::f32);
    REQUIRE(got.q.dtype() == DType::f32);
    check_results(got, want, 1e-5, 1e-6, 1e-4, 1e-5);
    // The composed f32 reference meets the same bounds (the bounds are fair).
    const Result composed32 = run(composed(options), in.q, in.k, in.v);
    check_results(composed32, want, 1e-5, 1e-6, 1e-4, 1e-5);
    // lse stays f32 for f32 inputs.
    const AttentionOutput core = fused_attention_forward(in.q, in.k, in.v, c.mask, default_scale(c.dims.d));
    CHECK(core.lse.dtype() == DType::f32);
  }
}

TEST_CASE("fused attention: dropout draws what the composed reference draws", "[attention][fused][dropout]") {
  const TrainModeGuard train(true);
  std::uint64_t seed = 500;
  struct DropCase {
    std::string name;
    Dims dims;
    AttentionMask mask;
  };
  const Tensor docs = documents(2, 33);
  for (const DropCase& c : {DropCase{"T 7 causal", {2, 2, 2, 7, 7, 4, 3}, make_mask(true)},
                            DropCase{"T 33 GQA packed causal", {2, 4, 2, 33, 33, 8, 8}, make_mask(true, 0, docs, docs)},
                            DropCase{"Tq 5 Tk 9 window 4", {1, 2, 1, 5, 9, 4, 4}, make_mask(false, 4)}})
    for (std::int64_t head_offset : {0, 3}) {
      INFO("case " << c.name << " head_offset " << head_offset);
      const Inputs in = make_inputs(c.dims, seed += 3);
      F::AttentionOptions options;
      options.mask = c.mask;
      options.dropout = 0.3;
      options.head_offset = head_offset;
      const Result got = run(fused(options, 77), in.q, in.k, in.v);
      const Result want = run(composed(options, 77), in.q, in.k, in.v);
      check_results(got, want, 1e-10, 1e-10, 1e-10, 1e-10);
      // Dropout did something: not the result without it, and another seed draws differently.
      F::AttentionOptions none = options;
      none.dropout = 0;
      CHECK_FALSE(identical(run(fused(none), in.q, in.k, in.v).out, got.out));
      CHECK_FALSE(identical(run(fused(options, 78), in.q, in.k, in.v).out, got.out));
    }
}

TEST_CASE("fused attention: dropout only in train mode, a new seed per call", "[attention][fused][dropout]") {
  const Inputs in = make_inputs({2, 2, 2, 9, 9, 4, 4}, 550);
  F::AttentionOptions options;
  options.mask = make_mask(true);
  options.dropout = 0.3;
  F::AttentionOptions none = options;
  none.dropout = 0;
  {
    const TrainModeGuard test(false);
    const Result without = run(fused(none), in.q, in.k, in.v);
    check_results(run(fused(options), in.q, in.k, in.v), without, 0, 0, 0, 0);
    check_results(run(composed(options), in.q, in.k, in.v), without, 1e-10, 1e-10, 1e-10, 1e-10);
  }
  const TrainModeGuard train(true);
  // The seed comes from the generator: two calls on one generator draw different masks.
  Generator generator(9);
  options.generator = &generator;
  const Variable a = F::attention(Variable(in.q), Variable(in.k), Variable(in.v), options);
  const Variable b = F::attention(Variable(in.q), Variable(in.k), Variable(in.v), options);
  CHECK_FALSE(identical(a.data(), b.data()));
}

TEST_CASE("fused attention: dropout's keep decisions", "[attention][fused][dropout]") {
  AttentionDropout dropout;
  dropout.ratio = 0.3;
  dropout.seed = 0x123456789abcdefULL;
  // About 30% dropped.
  const Tensor grid = attention_dropout_keep(dropout, 2, 2, 0, 64, 0, 64);
  REQUIRE(grid.shape() == Shape{2, 2, 64, 64});
  const std::vector<bool> keep = grid.to_vector<bool>();
  const double kept = static_cast<double>(std::count(keep.begin(), keep.end(), true)) / keep.size();
  CHECK(kept == Approx(0.7).margin(0.05));
  // Exactly the documented draw: attention_dropout_uniform(seed, b, head_offset + h, p, s) >= ratio.
  dropout.head_offset = 2;
  const std::vector<bool> shifted = attention_dropout_keep(dropout, 2, 3, 4, 5, 1, 7).to_vector<bool>();
  std::size_t n = 0;
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 3; ++h)
      for (std::int64_t p = 4; p < 9; ++p)
        for (std::int64_t s = 1; s < 8; ++s, ++n) {
          INFO("b " << b << " h " << h << " p " << p << " s " << s);
          CHECK(shifted[n] == (attention_dropout_uniform(dropout.seed, b, 2 + h, p, s) >= 0.3));
        }
  dropout.head_offset = 0;
  // The decisions depend on global positions only: a block from (query 5, key 3) is the
  // corresponding slice of the grid from 0.
  const Tensor block = attention_dropout_keep(dropout, 2, 2, 5, 4, 3, 6);
  CHECK(block.to_vector<bool>() ==
        index(grid, {Index::all(), Index::all(), Index::range(5, 9), Index::range(3, 9)}).to_vector<bool>());
  // head_offset shifts the heads: one head from offset 1 is head 1 of two.
  dropout.head_offset = 1;
  const Tensor one = attention_dropout_keep(dropout, 2, 1, 0, 64, 0, 64);
  CHECK(one.to_vector<bool>() == slice(grid, 1, 1, 2).to_vector<bool>());
  // Another seed, other decisions.
  dropout.head_offset = 0;
  dropout.seed += 1;
  CHECK(attention_dropout_keep(dropout, 2, 2, 0, 64, 0, 64).to_vector<bool>() != keep);
}

TEST_CASE("fused attention: attention_visibility follows the rule", "[attention][fused]") {
  const Tensor docs = documents(2, 12);
  for (const AttentionMask& mask : {make_mask(true), make_mask(false, 3), make_mask(true, 2, Tensor(), Tensor(), 4, 1),
                                    make_mask(true, 0, slice(docs, 1, 6, 12), slice(docs, 1, 2, 10), 6, 2)}) {
    const std::int64_t B = mask.query_segments.defined() ? 2 : 1;
    const std::int64_t tq = 6, tk = 8;
    const Tensor got = attention_visibility(mask, 2, tq, tk);
    REQUIRE(got.shape() == Shape{B, 1, tq, tk});
    const std::vector<bool> seen = got.to_vector<bool>();
    const Visibility visible(mask, tq, tk);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < tq; ++i)
        for (std::int64_t j = 0; j < tk; ++j) {
          INFO("causal " << mask.causal << " window " << mask.window << " b " << b << " i " << i << " j " << j);
          CHECK(seen[(b * tq + i) * tk + j] == visible(b, i, j));
        }
  }
}

TEST_CASE("fused attention: gradients against numerical ones", "[attention][fused][gradcheck]") {
  const Tensor q = uniform({1, 2, 5, 3}, 600), k = uniform({1, 2, 5, 3}, 601), v = uniform({1, 2, 5, 2}, 602);
  const auto check = [&](const F::AttentionOptions& options, const Tensor& q_, const Tensor& k_, const Tensor& v_) {
    REQUIRE_GRADCHECK(
        [options](const Variables& x) -> Variables {
          Generator generator(31);  // a fresh one per evaluation: the same dropout mask every time
          F::AttentionOptions o = options;
          o.generator = &generator;
          return {F::attention(x[0], x[1], x[2], o)};
        },
        {q_, k_, v_});
  };
  F::AttentionOptions options;
  SECTION("causal") {
    options.mask = make_mask(true);
    check(options, q, k, v);
  }
  SECTION("bidirectional window") {
    options.mask = make_mask(false, 2);
    check(options, q, k, v);
  }
  SECTION("causal window, queries after the keys") {
    options.mask = make_mask(true, 3, Tensor(), Tensor(), 2, 0);
    check(options, q, k, v);
  }
  SECTION("packed, one query without keys") {
    // Query 4's document (9) has no key: it gets no gradient, the others their own.
    options.mask = make_mask(false, 0, gc_util::i64({0, 0, 1, 1, 9}, {1, 5}), gc_util::i64({0, 1, 1, 0, 1}, {1, 5}));
    check(options, q, k, v);
  }
  SECTION("one variable as q, k and v") {
    options.mask = make_mask(true, 3);
    REQUIRE_GRADCHECK([options](const Variables& x) -> Variables { return {F::attention(x[0], x[0], x[0], options)}; },
                      {uniform({1, 2, 5, 3}, 605)});
  }
  SECTION("GQA") {
    options.mask = make_mask(true);
    check(options, uniform({2, 2, 4, 3}, 610), uniform({2, 1, 4, 3}, 611), uniform({2, 1, 4, 2}, 612));
  }
  SECTION("dropout") {
    const TrainModeGuard train(true);
    options.mask = make_mask(true);
    options.dropout = 0.3;
    check(options, q, k, v);
    options.mask = make_mask(false, 0, gc_util::i64({0, 0, 1, 1, 1}, {1, 5}), gc_util::i64({0, 0, 0, 1, 1}, {1, 5}));
    options.scale = 0.8;
    check(options, q, k, v);
  }
}

TEST_CASE("fused attention: a query that sees no key", "[attention][fused]") {
  const Dims dims{2, 2, 1, 5, 6, 3, 4};
  const Inputs in = make_inputs(dims, 700);
  struct Blind {
    std::string name;
    AttentionMask mask;
    std::vector<std::int64_t> blind;  // queries that see nothing
  };
  const Tensor qseg = gc_util::i64({0, 0, 1, 1, 2, 3, 3, 3, 4, 4}, {2, 5});
  const Tensor kseg = gc_util::i64({0, 0, 1, 1, 1, 0, 4, 4, 3, 3, 3, 4}, {2, 6});
  for (const Blind& c :
       {Blind{"document without keys", make_mask(false, 0, qseg, kseg), {4}},
        Blind{"causal window far past the keys", make_mask(true, 2, Tensor(), Tensor(), 20, 0), {0, 1, 2, 3, 4}},
        Blind{"window before the keys", make_mask(false, 3, Tensor(), Tensor(), 0, 30), {0, 1, 2, 3, 4}},
        Blind{"causal, keys after the queries", make_mask(true, 0, Tensor(), Tensor(), 0, 2), {0, 1}}}) {
    INFO("case " << c.name);
    F::AttentionOptions options;
    options.mask = c.mask;
    const Result got = run(fused(options), in.q, in.k, in.v);
    const Result want = run(composed(options), in.q, in.k, in.v);
    CHECK(all_finite(got.out));
    CHECK(all_finite(got.q));
    CHECK(all_finite(got.k));
    CHECK(all_finite(got.v));
    check_results(got, want, 1e-10, 1e-10, 1e-10, 1e-10);
    // In batch row 0 (the segments' blind query is in row 0), exactly zero output and gradient.
    const std::vector<double> out = got.out.to_vector<double>(), gq = got.q.to_vector<double>();
    for (std::int64_t h = 0; h < dims.hq; ++h)
      for (std::int64_t i : c.blind) {
        for (std::int64_t x = 0; x < dims.dv; ++x) CHECK(out[(h * dims.tq + i) * dims.dv + x] == 0.0);
        for (std::int64_t x = 0; x < dims.d; ++x) CHECK(gq[(h * dims.tq + i) * dims.d + x] == 0.0);
      }
    const AttentionOutput core = fused_attention_forward(in.q, in.k, in.v, c.mask, default_scale(dims.d));
    const std::vector<double> lse = core.lse.to_vector<double>();
    for (std::int64_t h = 0; h < dims.hq; ++h)
      for (std::int64_t i : c.blind) CHECK(lse[h * dims.tq + i] == -kInf);
  }
  // With dropout too.
  const TrainModeGuard train(true);
  F::AttentionOptions options;
  options.mask = make_mask(false, 0, qseg, kseg);
  options.dropout = 0.3;
  const Result got = run(fused(options), in.q, in.k, in.v);
  CHECK(all_finite(got.q));
  check_results(got, run(composed(options), in.q, in.k, in.v), 1e-10, 1e-10, 1e-10, 1e-10);
}

TEST_CASE("fused attention: forward's log-sum-exp", "[attention][fused]") {
  const Tensor qseg = gc_util::i64({0, 0, 1, 1, 5, 1, 2, 2, 2, 2, 2, 0, 0, 1}, {2, 7});
  const Tensor kseg = gc_util::i64({0, 0, 1, 1, 1, 1, 1, 2, 2, 0, 0, 1, 1, 1}, {2, 7});
  std::uint64_t seed = 800;
  for (const AttentionMask& mask : {make_mask(false), make_mask(true), make_mask(true, 0, qseg, kseg),
                                    make_mask(false, 2, qseg, kseg), make_mask(true, 3, Tensor(), Tensor(), 3, 0)}) {
    INFO("causal " << mask.causal << " window " << mask.window << " segments " << mask.query_segments.defined());
    const Inputs in = make_inputs({2, 4, 2, 7, 7, 5, 3}, seed += 3);
    const AttentionOutput got = fused_attention_forward(in.q, in.k, in.v, mask, 0.6);
    const Direct want = direct(in.q, in.k, in.v, mask, 0.6);
    CHECK_CLOSE(got.lse, want.lse, 1e-12, 1e-12);
    CHECK_CLOSE(got.out, want.out, 1e-12, 1e-12);
  }
  // Query 4 of row 0 (document 5) sees nothing: -inf.
  const Inputs in = make_inputs({2, 4, 2, 7, 7, 5, 3}, 850);
  const std::vector<double> lse =
      fused_attention_forward(in.q, in.k, in.v, make_mask(false, 0, qseg, kseg), 0.6).lse.to_vector<double>();
  for (std::int64_t h = 0; h < 4; ++h) CHECK(lse[h * 7 + 4] == -kInf);
}

TEST_CASE("fused attention: blocks of keys merge into the whole (context parallelism)", "[attention][fused]") {
  const std::int64_t B = 2, hq = 4, hkv = 2, T = 13, d = 4, dv = 3;
  const double scale = 0.45;
  const Tensor docs = documents(B, T);
  const std::vector<std::int64_t> cuts = {0, 5, 9, 13};
  std::uint64_t seed = 900;
  for (int variant = 0; variant < 3; ++variant)
    for (std::int64_t q0 : {0, 5}) {  // all queries, or the block of positions 5..12
      INFO("variant " << variant << " (0 causal, 1 packed causal, 2 causal window 4), queries from " << q0);
      const std::int64_t tq = T - q0;
      const Tensor q = uniform({B, hq, tq, d}, seed++, -2, 2), k = uniform({B, hkv, T, d}, seed++, -2, 2);
      const Tensor v = uniform({B, hkv, T, dv}, seed++), gout = uniform({B, hq, tq, dv}, seed++);
      const auto mask_for = [&](std::int64_t k0, std::int64_t k1) {
        const Tensor qs = variant == 1 ? slice(docs, 1, q0, T) : Tensor();
        const Tensor ks = variant == 1 ? slice(docs, 1, k0, k1) : Tensor();
        return make_mask(true, variant == 2 ? 4 : 0, qs, ks, q0, k0);
      };
      const AttentionMask whole_mask = mask_for(0, T);
      const AttentionOutput whole = fused_attention_forward(q, k, v, whole_mask, scale);
      const AttentionGradients whole_grad =
          fused_attention_backward(q, k, v, whole.out, whole.lse, gout, whole_mask, scale);
      // The whole against the composed reference too.
      {
        F::AttentionOptions options;
        options.mask = whole_mask;
        options.scale = scale;
        Variable vq(q, true), vk(k, true), vv(v, true);
        const Variable y = F::composed_attention(vq, vk, vv, options);
        y.backward(gout);
        CHECK_CLOSE(whole.out, y.data(), 1e-10, 1e-10);
        CHECK_CLOSE(whole_grad.q, vq.grad(), 1e-10, 1e-10);
        CHECK_CLOSE(whole_grad.k, vk.grad(), 1e-10, 1e-10);
        CHECK_CLOSE(whole_grad.v, vv.grad(), 1e-10, 1e-10);
        CHECK_CLOSE(whole.lse, direct(q, k, v, whole_mask, scale).lse, 1e-12, 1e-12);
      }
      // Forward per block, merged by the log-sum-exp rule.
      const std::size_t rows = static_cast<std::size_t>(B * hq * tq);
      std::vector<double> top(rows, -kInf), total(rows, 0.0), lse(rows), out(rows * dv, 0.0);
      std::vector<std::vector<double>> block_lse, block_out;
      bool some_block_blind = false;
      for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
        const AttentionOutput part =
            fused_attention_forward(q, slice(k, 2, cuts[c], cuts[c + 1]), slice(v, 2, cuts[c], cuts[c + 1]),
                                    mask_for(cuts[c], cuts[c + 1]), scale);
        REQUIRE(part.lse.shape() == Shape{B, hq, tq});
        block_lse.push_back(part.lse.to_vector<double>());
        block_out.push_back(part.out.to_vector<double>());
        for (std::size_t r = 0; r < rows; ++r) {
          top[r] = std::max(top[r], block_lse.back()[r]);
          some_block_blind = some_block_blind || block_lse.back()[r] == -kInf;
        }
      }
      CHECK(some_block_blind);  // the causal mask leaves some query blind in some block
      for (std::size_t r = 0; r < rows; ++r) {
        if (top[r] == -kInf) {
          lse[r] = -kInf;
          continue;
        }
        for (const auto& l : block_lse) total[r] += l[r] == -kInf ? 0.0 : std::exp(l[r] - top[r]);
        lse[r] = top[r] + std::log(total[r]);
        for (std::size_t c = 0; c < block_lse.size(); ++c) {
          if (block_lse[c][r] == -kInf) continue;
          const double w = std::exp(block_lse[c][r] - lse[r]);
          for (std::int64_t x = 0; x < dv; ++x) out[r * dv + x] += w * block_out[c][r * dv + x];
        }
      }
      CHECK_CLOSE(from_vector<double>(lse, {B, hq, tq}), whole.lse, 1e-10, 1e-10);
      CHECK_CLOSE(from_vector<double>(out, {B, hq, tq, dv}), whole.out, 1e-10, 1e-10);
      // Backward per block with the whole out and lse: dq sums, dk and dv concatenate.
      Tensor dq = zeros({B, hq, tq, d}, DType::f64);
      std::vector<Tensor> dks, dvs;
      for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
        const AttentionGradients part =
            fused_attention_backward(q, slice(k, 2, cuts[c], cuts[c + 1]), slice(v, 2, cuts[c], cuts[c + 1]), whole.out,
                                     whole.lse, gout, mask_for(cuts[c], cuts[c + 1]), scale);
        REQUIRE(all_finite(part.q));
        dq = add(dq, part.q);
        dks.push_back(part.k);
        dvs.push_back(part.v);
      }
      CHECK_CLOSE(dq, whole_grad.q, 1e-10, 1e-10);
      CHECK_CLOSE(concat(dks, 2), whole_grad.k, 1e-10, 1e-10);
      CHECK_CLOSE(concat(dvs, 2), whole_grad.v, 1e-10, 1e-10);
    }
}

TEST_CASE("fused attention: results do not depend on the thread count", "[attention][fused]") {
  // Restores the thread count however the test ends.
  struct ThreadsGuard {
    int previous = max_threads();
    ~ThreadsGuard() { set_max_threads(previous); }
  } guard;
  const TrainModeGuard train(true);
  for (DType dtype : {DType::f64, DType::f32})
    for (double ratio : {0.0, 0.3})
      for (const Dims& dims : {Dims{2, 4, 2, 129, 129, 16, 16}, Dims{1, 1, 1, 129, 129, 16, 16}}) {
        INFO("dtype " << dtype_name(dtype) << " dropout " << ratio << " B " << dims.B << " Hq " << dims.hq);
        const Tensor docs = documents(dims.B, 129);
        const Inputs in = make_inputs(dims, 1000, dtype, 1);
        F::AttentionOptions options;
        options.mask = make_mask(true, 0, docs, docs);
        options.dropout = ratio;
        set_max_threads(1);
        const Result one = run(fused(options), in.q, in.k, in.v);
        for (int threads : {2, 3}) {  // 3: more threads than this machine's cores, other chunks
          INFO("threads " << threads);
          set_max_threads(threads);
          const Result many = run(fused(options), in.q, in.k, in.v);
          CHECK(identical(one.out, many.out));
          CHECK(identical(one.q, many.q));
          CHECK(identical(one.k, many.k));
          CHECK(identical(one.v, many.v));
        }
      }
}

TEST_CASE("fused attention: errors name the op and the shapes", "[attention][fused]") {
  const Tensor q = uniform({2, 4, 3, 5}, 1), k = uniform({2, 2, 6, 5}, 2), v = uniform({2, 2, 6, 7}, 3);
  const auto attend = [](const Tensor& q_, const Tensor& k_, const Tensor& v_, const AttentionMask& mask = {}) {
    F::AttentionOptions options;
    options.mask = mask;
    return F::attention(Variable(q_), Variable(k_), Variable(v_), options);
  };
  using Catch::Contains;
  REQUIRE_NOTHROW(attend(q, k, v));
  // Hq 3 is not a multiple of Hkv 2.
  REQUIRE_THROWS_WITH(attend(uniform({2, 3, 4, 5}, 4), k, v),
                      Contains("attention") && Contains("[2, 3, 4, 5]") && Contains("[2, 2, 6, 5]"));
  // d differs.
  REQUIRE_THROWS_WITH(attend(q, uniform({2, 2, 6, 4}, 5), v),
                      Contains("attention") && Contains("[2, 4, 3, 5]") && Contains("[2, 2, 6, 4]"));
  // v has 5 rows, k 6.
  REQUIRE_THROWS_WITH(attend(q, k, uniform({2, 2, 5, 7}, 6)),
                      Contains("attention") && Contains("[2, 2, 6, 5]") && Contains("[2, 2, 5, 7]"));
  // v's heads differ from k's.
  REQUIRE_THROWS_WITH(attend(q, k, uniform({2, 1, 6, 7}, 6)), Contains("attention") && Contains("[2, 1, 6, 7]"));
  // Batch 3 against 2.
  REQUIRE_THROWS_WITH(attend(q, uniform({3, 2, 6, 5}, 7), uniform({3, 2, 6, 7}, 8)),
                      Contains("attention") && Contains("[2, 4, 3, 5]") && Contains("[3, 2, 6, 5]"));
  // Segments: wrong shapes, a floating dtype, only one of the two.
  const Tensor qseg = gc_util::i64({0, 0, 1, 0, 1, 1}, {2, 3});
  const Tensor kseg = gc_util::i64({0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1}, {2, 6});
  REQUIRE_NOTHROW(attend(q, k, v, make_mask(false, 0, qseg, kseg)));
  REQUIRE_NOTHROW(attend(q, k, v, make_mask(false, 0, qseg.to(DType::i32), kseg.to(DType::i32))));
  REQUIRE_THROWS_WITH(attend(q, k, v, make_mask(false, 0, gc_util::i64({0, 0, 1, 0}, {2, 2}), kseg)),
                      Contains("attention") && Contains("segment") && Contains("[2, 2]"));
  REQUIRE_THROWS_WITH(attend(q, k, v, make_mask(false, 0, qseg, gc_util::i64({0, 0, 1, 1, 1, 1}, {1, 6}))),
                      Contains("attention") && Contains("segment") && Contains("[1, 6]"));
  REQUIRE_THROWS_WITH(attend(q, k, v, make_mask(false, 0, qseg.reshape({6}), kseg)),
                      Contains("attention") && Contains("segment") && Contains("[6]"));
  REQUIRE_THROWS_WITH(attend(q, k, v, make_mask(false, 0, qseg.to(DType::f64), kseg)),
                      Contains("attention") && Contains("segment") && Contains("f64[2, 3]"));
  REQUIRE_THROWS_WITH(attend(q, k, v, make_mask(false, 0, qseg, Tensor())),
                      Contains("attention") && Contains("segment"));
  // A negative window.
  REQUIRE_THROWS_WITH(attend(q, k, v, make_mask(true, -1)),
                      Contains("attention") && Contains("window") && Contains("-1"));
  // q not 4-D.
  REQUIRE_THROWS_WITH(attend(uniform({4, 3, 5}, 9), k, v), Contains("attention") && Contains("[4, 3, 5]"));
  // dtypes differ.
  REQUIRE_THROWS_WITH(attend(q, k.to(DType::f32), v),
                      Contains("attention") && Contains("f64[2, 4, 3, 5]") && Contains("f32[2, 2, 6, 5]"));
  // An integer q.
  REQUIRE_THROWS_WITH(attend(q.to(DType::i64), k.to(DType::i64), v.to(DType::i64)), Contains("attention"));
  // Options out of range.
  F::AttentionOptions bad;
  bad.scale = -1;
  REQUIRE_THROWS_WITH(F::attention(Variable(q), Variable(k), Variable(v), bad),
                      Contains("attention") && Contains("scale") && Contains("-1"));
  bad = {};
  bad.dropout = 1;
  REQUIRE_THROWS_WITH(F::attention(Variable(q), Variable(k), Variable(v), bad),
                      Contains("attention") && Contains("dropout"));
  bad = {};
  bad.dropout = -0.5;
  REQUIRE_THROWS_WITH(F::attention(Variable(q), Variable(k), Variable(v), bad),
                      Contains("attention") && Contains("dropout"));
  bad = {};
  bad.head_offset = -1;
  REQUIRE_THROWS_WITH(F::attention(Variable(q), Variable(k), Variable(v), bad),
                      Contains("attention") && Contains("head_offset"));
  REQUIRE_THROWS_WITH(attend(q, k, v, make_mask(true, 0, Tensor(), Tensor(), -2, 0)),
                      Contains("attention") && Contains("query_start") && Contains("-2"));
  REQUIRE_THROWS_WITH(attend(q, k, v, make_mask(true, 0, Tensor(), Tensor(), 0, -3)),
                      Contains("attention") && Contains("key_start") && Contains("-3"));
  // The core op checks the same.
  REQUIRE_THROWS_WITH(fused_attention_forward(uniform({2, 3, 4, 5}, 4), k, v, {}, 1.0),
                      Contains("attention") && Contains("[2, 3, 4, 5]"));
  REQUIRE_THROWS_WITH(fused_attention_forward(q, k, v, make_mask(false, -2), 1.0),
                      Contains("attention") && Contains("window"));
  const AttentionOutput fwd = fused_attention_forward(q, k, v, {}, 1.0);
  REQUIRE_THROWS_WITH(fused_attention_backward(q, k, v, fwd.out, uniform({2, 4, 4}, 10), fwd.out, {}, 1.0),
                      Contains("attention") && Contains("[2, 4, 4]"));
  REQUIRE_THROWS_WITH(fused_attention_backward(q, k, v, fwd.out, fwd.lse, uniform({2, 4, 3, 6}, 11), {}, 1.0),
                      Contains("attention") && Contains("[2, 4, 3, 6]"));
  REQUIRE_THROWS_WITH(fused_attention_forward(q, k, v, {}, 0.0), Contains("attention") && Contains("scale"));
}

TEST_CASE("scaled_dot_product_attention runs the fused op, as composed_attention", "[attention][fused]") {
  struct SdpaCase {
    Shape q, k, v;
    bool causal;
  };
  std::uint64_t seed = 1100;
  for (const SdpaCase& c :
       {SdpaCase{{3, 7, 4}, {3, 7, 4}, {3, 7, 5}, true}, SdpaCase{{3, 7, 4}, {3, 7, 4}, {3, 7, 5}, false},
        SdpaCase{{2, 3, 4}, {2, 7, 4}, {2, 7, 2}, true}, SdpaCase{{2, 2, 9, 3}, {2, 2, 9, 3}, {2, 2, 9, 3}, true}}) {
    INFO("q " << shape_str(c.q) << " k " << shape_str(c.k) << " causal " << c.causal);
    const Tensor q = uniform(c.q, seed++, -2, 2), k = uniform(c.k, seed++, -2, 2), v = uniform(c.v, seed++);
    const Result got = run([&](const Variable& a, const Variable& b,
                               const Variable& x) { return F::scaled_dot_product_attention(a, b, x, c.causal); },
                           q, k, v);
    // The reference on [G, 1, T, d] (the leading axes as the batch, one head).
    const auto as4 = [](const Tensor& t) { return t.reshape({-1, 1, t.size(-2), t.size(-1)}); };
    F::AttentionOptions options;
    options.mask.causal = c.causal;
    const Result want = run(composed(options), as4(q), as4(k), as4(v));
    CHECK_CLOSE(got.out, want.out.reshape(got.out.shape()), 1e-10, 1e-10);
    CHECK_CLOSE(got.q, want.q.reshape(c.q), 1e-10, 1e-10);
    CHECK_CLOSE(got.k, want.k.reshape(c.k), 1e-10, 1e-10);
    CHECK_CLOSE(got.v, want.v.reshape(c.v), 1e-10, 1e-10);
  }
}

TEST_CASE("fused attention: the online softmax across tiles of keys", "[attention][fused]") {
  // Scores that grow along the keys (each later tile of keys raises every row's maximum, so the
  // running sums and outputs are rescaled) and that shrink (the first tile holds the maximum).
  const std::int64_t B = 1, H = 2, T = 129, d = 8;
  std::uint64_t seed = 1200;
  for (bool growing : {true, false})
    for (bool causal : {false, true}) {
      INFO("growing " << growing << " causal " << causal);
      const Tensor q = uniform({B, H, T, d}, seed++, 0.5, 1.5);
      std::vector<double> kv = uniform({B, H, T, d}, seed++, 0.5, 1.5).to_vector<double>();
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t j = 0; j < T; ++j)
          for (std::int64_t c = 0; c < d; ++c) kv[(h * T + j) * d + c] *= (growing ? j : T - 1 - j) / 16.0;
      const Tensor k = from_vector<double>(kv, {B, H, T, d}), v = uniform({B, H, T, 4}, seed++);
      F::AttentionOptions options;
      options.mask = make_mask(causal);
      const Result got = run(fused(options), q, k, v);
      check_results(got, run(composed(options), q, k, v), 1e-10, 1e-10, 1e-10, 1e-10);
      CHECK_CLOSE(got.out, direct(q, k, v, options.mask, default_scale(d)).out, 1e-10, 1e-10);
    }
}

TEST_CASE("fused attention: large scores do not overflow (f32)", "[attention][fused]") {
  // Scores up to about 300: exp would overflow f32 (and f64 past 709) without the running maximum.
  const Dims dims{1, 2, 2, 129, 129, 8, 4};
  const Inputs in = make_inputs(dims, 1300, DType::f32, 2);
  F::AttentionOptions options;
  options.mask = make_mask(true);
  options.scale = 10;
  const Result got = run(fused(options), in.q, in.k, in.v);
  CHECK(all_finite(got.out));
  CHECK(all_finite(got.q));
  CHECK(all_finite(got.k));
  CHECK(all_finite(got.v));
  const Result want = run(composed(options), in.q.to(DType::f64), in.k.to(DType::f64), in.v.to(DType::f64));
  check_results(got, want, 1e-4, 1e-4, 1e-3, 1e-3);
  options.scale = 100;  // scores up to about 3000: past f64's exp too
  const Result huge = run(fused(options), in.q.to(DType::f64), in.k.to(DType::f64), in.v.to(DType::f64));
  CHECK(all_finite(huge.out));
  CHECK(all_finite(huge.q));
  CHECK_CLOSE(huge.out, direct(in.q, in.k, in.v, options.mask, 100).out, 1e-10, 1e-10);
}

TEST_CASE("fused attention: 16-bit inputs", "[attention][fused]") {
  const Dims dims{2, 2, 1, 17, 17, 8, 8};
  for (DType dtype : {DType::bf16, DType::f16}) {
    INFO("dtype " << dtype_name(dtype));
    const Inputs in = make_inputs(dims, 1400, DType::f32, 1);
    // The same (rounded) inputs in f32.
    const Tensor q = in.q.to(dtype), k = in.k.to(dtype), v = in.v.to(dtype);
    F::AttentionOptions options;
    options.mask = make_mask(true);
    const Result got = run(fused(options), q, k, v);
    REQUIRE(got.out.dtype() == dtype);
    REQUIRE(got.q.dtype() == dtype);
    REQUIRE(got.k.dtype() == dtype);
    REQUIRE(got.v.dtype() == dtype);
    const Result want = run(fused(options), q.to(DType::f32), k.to(DType::f32), v.to(DType::f32));
    check_results(got, want, 2e-2, 2e-2, 5e-2, 5e-2);
    const AttentionOutput core = fused_attention_forward(q, k, v, options.mask, default_scale(dims.d));
    CHECK(core.lse.dtype() == DType::f32);
  }
}

TEST_CASE("fused attention: no keys or no queries", "[attention][fused]") {
  const Tensor q = uniform({2, 2, 3, 4}, 1500), k = uniform({2, 1, 0, 4}, 1501), v = uniform({2, 1, 0, 5}, 1502);
  // No keys: every query sees nothing.
  const AttentionOutput none = fused_attention_forward(q, k, v, {}, 0.5);
  CHECK(none.out.shape() == Shape{2, 2, 3, 5});
  CHECK(none.out.to_vector<double>() == std::vector<double>(60, 0.0));
  CHECK(none.lse.to_vector<double>() == std::vector<double>(12, -kInf));
  const AttentionGradients g =
      fused_attention_backward(q, k, v, none.out, none.lse, uniform({2, 2, 3, 5}, 1503), {}, 0.5);
  CHECK(g.q.to_vector<double>() == std::vector<double>(48, 0.0));
  CHECK(g.k.shape() == k.shape());
  CHECK(g.v.shape() == v.shape());
  // No queries.
  const Tensor k3 = uniform({2, 1, 3, 4}, 1504), v3 = uniform({2, 1, 3, 5}, 1505);
  const Result empty = run(fused({}), uniform({2, 2, 0, 4}, 1506), k3, v3);
  CHECK(empty.out.shape() == Shape{2, 2, 0, 5});
  CHECK(empty.k.to_vector<double>() == std::vector<double>(24, 0.0));
  CHECK(empty.v.to_vector<double>() == std::vector<double>(30, 0.0));
}

TEST_CASE("fused attention: a sweep of positions and windows", "[attention][fused]") {
  // Small query blocks at many global positions against keys at others, every mask of positions:
  // the edges of the visible band (including tiles that the band covers all but one corner of).
  std::uint64_t seed = 1600;
  for (std::int64_t tq : {1, 2, 3})
    for (std::int64_t tk : {4, 6})
      for (std::int64_t query_start : {0, 1, 3, 6})
        for (std::int64_t key_start : {0, 2, 5})
          for (std::int64_t window : {0, 1, 2, 3, 5})
            for (bool causal : {false, true}) {
              const Dims dims{1, 2, 1, tq, tk, 3, 2};
              check_f64_case(
                  {"sweep causal " + std::to_string(causal) + " window " + std::to_string(window) + " query_start " +
                       std::to_string(query_start) + " key_start " + std::to_string(key_start),
                   dims, make_mask(causal, window, Tensor(), Tensor(), query_start, key_start)},
                  seed += 3);
            }
  // Tiles of 66 queries (a full tile of 64 and a short one) against 129 keys.
  for (std::int64_t window : {3, 64, 100})
    for (bool causal : {false, true})
      for (std::int64_t query_start : {0, 40})
        for (std::int64_t key_start : {0, 30}) {
          const Dims dims{1, 1, 1, 66, 129, 4, 3};
          check_f64_case({"wide sweep causal " + std::to_string(causal) + " window " + std::to_string(window) +
                              " query_start " + std::to_string(query_start) + " key_start " + std::to_string(key_start),
                          dims, make_mask(causal, window, Tensor(), Tensor(), query_start, key_start)},
                         seed += 3);
        }
}
