// The Backend defaults of fused attention (Backend::attention_forward/backward in
// core/ops/attention.cc, which compose the front-end operations: what every backend without tiled
// kernels runs, CUDA's included) against the CPU backend's tiled kernels (core/cpu/attention.cc),
// on the same data. The CPU backend overrides the defaults, so they run here on the stand-in CUDA
// device of gpu_fake_device.h (the CPU backend's other kernels as the backend of Device::cuda(0),
// in host memory), which does not override them.
//
// Every case compares fused_attention_forward's output and log-sum-exp and
// fused_attention_backward's gradients of q, k and v (f64 within 1e-12, f32 within 1e-5, relative
// plus absolute): no mask, causal, causal with a window, a bidirectional window, packed documents
// (with and without causal, and a query whose document has no key: output 0, log-sum-exp -inf,
// finite gradients), Tq != Tk at explicit global positions, grouped-query attention, dv != d,
// dropout; then F::attention end to end (output and the gradients of its inputs).
//
// A single process: the stand-in's header includes MPI's, but nothing here calls MPI.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/functions/attention.h"
#include "autograd/grad_mode.h"
#include "autograd/variable.h"
#include "core/ops.h"
#include "core/ops/attention.h"
#include "tests/comm/transport/gpu_fake_device.h"

using namespace tandem;
namespace F = tandem::functions;

namespace {

const bool kStandInInstalled = fake_device::install();
const Device kGpu = Device::cuda(0);
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor uniform(const Shape& shape, std::uint64_t seed, double low, double high, DType dtype) {
  Generator gen(seed);
  return rand_uniform(shape, gen, low, high, DType::f64).to(dtype);
}

// Empty when got (on any device) matches want within abs + rel * |want| everywhere (equal
// infinities agree, a NaN never does); otherwise the first mismatch.
std::string differ(const Tensor& got, const Tensor& want, double rel, double abs) {
  if (!got.defined() || !want.defined()) return got.defined() ? "want is undefined" : "got is undefined";
  if (got.shape() != want.shape()) return "shape " + got.description() + " vs " + want.description();
  if (got.dtype() != want.dtype()) return "dtype " + got.description() + " vs " + want.description();
  const std::vector<double> g = got.to(Device::cpu()).to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (g[i] == w[i]) continue;
    if (!(std::abs(g[i] - w[i]) <= abs + rel * std::abs(w[i]))) {
      std::ostringstream out;
      out.precision(17);
      out << "element " << i << " of " << got.description() << ": got " << g[i] << ", want " << w[i] << " (diff "
          << std::abs(g[i] - w[i]) << ")";
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

bool all_finite(const Tensor& t) {
  for (double x : t.to(Device::cpu()).to_vector<double>())
    if (!std::isfinite(x)) return false;
  return true;
}

// Three documents of uneven lengths per row of T positions (different cuts and ids per row):
// i64 [B, T].
Tensor documents(std::int64_t B, std::int64_t T) {
  const std::int64_t labels[3] = {7, 2, 11};
  std::vector<std::int64_t> ids;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t c1 = T * (2 + b) / 7, c2 = std::max(c1, T * (5 + b) / 8);
    for (std::int64_t t = 0; t < T; ++t) ids.push_back(labels[t < c1 ? 0 : t < c2 ? 1 : 2] + b);
  }
  return from_vector<std::int64_t>(ids, {B, T});
}

// documents(B, T) with query (0, blind) in a document (99) that no key belongs to.
Tensor documents_with_blind_query(std::int64_t B, std::int64_t T, std::int64_t blind) {
  std::vector<std::int64_t> ids = documents(B, T).to_vector<std::int64_t>();
  ids[static_cast<std::size_t>(blind)] = 99;
  return from_vector<std::int64_t>(ids, {B, T});
}

// Positions [start, start + length) of documents(B, T): i64 [B, length].
Tensor documents_at(std::int64_t B, std::int64_t T, std::int64_t start, std::int64_t length) {
  const std::vector<std::int64_t> all = documents(B, T).to_vector<std::int64_t>();
  std::vector<std::int64_t> ids;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = start; t < start + length; ++t) ids.push_back(all[static_cast<std::size_t>(b * T + t)]);
  return from_vector<std::int64_t>(ids, {B, length});
}

struct Dims {
  std::int64_t B, hq, hkv, tq, tk, d, dv;
};

struct Case {
  std::string name;
  Dims dims;
  AttentionMask mask;
  AttentionDropout dropout;
  double scale = 0;               // 0: 1 / sqrt(d)
  std::int64_t blind_query = -1;  // a query of batch row 0 that sees no key (all heads)
};

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

// The mask with its segment ids on the device.
AttentionMask on(const AttentionMask& mask, Device device) {
  AttentionMask m = mask;
  if (m.query_segments.defined()) m.query_segments = m.query_segments.to(device);
  if (m.key_segments.defined()) m.key_segments = m.key_segments.to(device);
  return m;
}

std::vector<Case> cases() {
  std::vector<Case> all;
  const auto add_case = [&](std::string name, Dims dims, AttentionMask mask, AttentionDropout dropout = {},
                            double scale = 0, std::int64_t blind = -1) {
    all.push_back({std::move(name), dims, std::move(mask), dropout, scale, blind});
  };
  const Dims self{2, 2, 2, 17, 17, 8, 8};
  const Dims longer{2, 2, 2, 33, 33, 8, 8};
  add_case("no mask", self, make_mask(false));
  add_case("no mask, explicit scale", self, make_mask(false), {}, 0.7);
  add_case("causal", longer, make_mask(true));
  add_case("causal + window 3", longer, make_mask(true, 3));
  add_case("bidirectional window 2", longer, make_mask(false, 2));
  const Tensor docs = documents(2, 21);
  add_case("packed documents", {2, 2, 2, 21, 21, 8, 8}, make_mask(false, 0, docs, docs));
  add_case("packed documents + causal", {2, 2, 2, 21, 21, 8, 8}, make_mask(true, 0, docs, docs));
  add_case("packed documents + causal + window 3", {2, 2, 2, 21, 21, 8, 8}, make_mask(true, 3, docs, docs));
  add_case("packed documents, i32 ids", {2, 2, 2, 21, 21, 8, 8},
           make_mask(false, 0, docs.to(DType::i32), docs.to(DType::i32)));
  add_case("packed documents, a query whose document has no key", {2, 2, 2, 21, 21, 8, 8},
           make_mask(false, 0, documents_with_blind_query(2, 21, 9), docs), {}, 0, 9);
  add_case("packed documents + causal, a query whose document has no key", {2, 2, 2, 21, 21, 8, 8},
           make_mask(true, 0, documents_with_blind_query(2, 21, 4), docs), {}, 0, 4);
  // Tq != Tk at explicit global positions: queries 10..14 against keys 3..15.
  add_case("Tq 5, Tk 13, query_start 10, key_start 3", {2, 2, 2, 5, 13, 8, 8}, make_mask(false, 0, {}, {}, 10, 3));
  add_case("Tq 5, Tk 13, query_start 10, key_start 3, causal", {2, 2, 2, 5, 13, 8, 8},
           make_mask(true, 0, {}, {}, 10, 3));
  add_case("Tq 5, Tk 13, query_start 10, key_start 3, causal + window 4", {2, 2, 2, 5, 13, 8, 8},
           make_mask(true, 4, {}, {}, 10, 3));
  // Queries 2..8 against keys 6..16, causal: queries 2..5 see no key.
  add_case("Tq 7, Tk 11, query_start 2, key_start 6, causal (blind queries)", {2, 2, 2, 7, 11, 8, 8},
           make_mask(true, 0, {}, {}, 2, 6), {}, 0, 0);
  add_case("Tq 6, Tk 19, query_start -1 (the last 6), causal", {2, 2, 2, 6, 19, 8, 8}, make_mask(true));
  add_case("Tq 19, Tk 6, query_start 0, key_start 7, bidirectional window 5", {2, 2, 2, 19, 6, 8, 8},
           make_mask(false, 5, {}, {}, 0, 7));
  add_case("GQA Hq 4, Hkv 2, causal", {2, 4, 2, 17, 17, 8, 8}, make_mask(true));
  add_case("GQA Hq 4, Hkv 1, causal", {2, 4, 1, 17, 17, 8, 8}, make_mask(true));
  add_case("GQA Hq 4, Hkv 1, no mask", {2, 4, 1, 17, 17, 8, 8}, make_mask(false));
  add_case("dv 3 != d 8, causal", {2, 2, 2, 17, 17, 8, 3}, make_mask(true));
  add_case("dv 8 != d 5, window 4", {2, 2, 2, 17, 17, 5, 8}, make_mask(false, 4));
  const AttentionDropout drop{0.3, 12345, 1};
  add_case("dropout 0.3, no mask", self, make_mask(false), drop);
  add_case("dropout 0.3, causal", longer, make_mask(true), drop);
  add_case("dropout 0.3, GQA Hq 4, Hkv 2, packed documents + causal, dv 3", {2, 4, 2, 21, 21, 8, 3},
           make_mask(true, 0, docs, docs), drop);
  add_case("dropout 0.3, Tq 5, Tk 13, query_start 10, key_start 3, window 4", {2, 2, 2, 5, 13, 8, 8},
           make_mask(false, 4, {}, {}, 10, 3), drop);
  add_case(
      "everything: GQA Hq 4 Hkv 1, Tq 9 Tk 15, query_start 8 key_start 2, causal + window 6, "
      "documents, dv 5, dropout 0.3",
      {2, 4, 1, 9, 15, 8, 5}, make_mask(true, 6, documents_at(2, 17, 8, 9), documents_at(2, 17, 2, 15), 8, 2), drop);
  return all;
}

struct Forward {
  Tensor out, lse;
};
struct Backward {
  Tensor q, k, v;
};

// Forward and backward of the fused op on the device, for gout.
void run_fused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& gout, const AttentionMask& mask,
               double scale, const AttentionDropout& dropout, Forward& f, Backward& b) {
  const AttentionOutput o = fused_attention_forward(q, k, v, mask, scale, dropout);
  f = {o.out, o.lse};
  const AttentionGradients g = fused_attention_backward(q, k, v, o.out, o.lse, gout, mask, scale, dropout);
  b = {g.q, g.k, g.v};
}

void check_case(const Case& c, DType dtype, double tol) {
  const Dims& s = c.dims;
  const std::uint64_t seed = 1000 + 17 * static_cast<std::uint64_t>(c.dims.tq + 3 * c.dims.tk + c.dims.hq);
  const Tensor q = uniform({s.B, s.hq, s.tq, s.d}, seed, -2, 2, dtype);
  const Tensor k = uniform({s.B, s.hkv, s.tk, s.d}, seed + 1, -2, 2, dtype);
  const Tensor v = uniform({s.B, s.hkv, s.tk, s.dv}, seed + 2, -1, 1, dtype);
  const Tensor gout = uniform({s.B, s.hq, s.tq, s.dv}, seed + 3, -1, 1, dtype);
  const double scale = c.scale > 0 ? c.scale : 1 / std::sqrt(static_cast<double>(s.d));

  Forward cpu_f, gpu_f;
  Backward cpu_b, gpu_b;
  run_fused(q, k, v, gout, c.mask, scale, c.dropout, cpu_f, cpu_b);
  run_fused(q.to(kGpu), k.to(kGpu), v.to(kGpu), gout.to(kGpu), on(c.mask, kGpu), scale, c.dropout, gpu_f, gpu_b);

  for (const Tensor* t : {&gpu_f.out, &gpu_f.lse, &gpu_b.q, &gpu_b.k, &gpu_b.v}) {
    INFO(t->description());
    CHECK(t->device() == kGpu);
  }
  CHECK_CLOSE(gpu_f.out, cpu_f.out, tol, tol);
  CHECK_CLOSE(gpu_f.lse, cpu_f.lse, tol, tol);
  CHECK_CLOSE(gpu_b.q, cpu_b.q, tol, tol);
  CHECK_CLOSE(gpu_b.k, cpu_b.k, tol, tol);
  CHECK_CLOSE(gpu_b.v, cpu_b.v, tol, tol);
  CHECK(all_finite(gpu_f.out));
  CHECK(all_finite(gpu_b.q));
  CHECK(all_finite(gpu_b.k));
  CHECK(all_finite(gpu_b.v));

  if (c.blind_query >= 0) {
    // Batch row 0, query blind_query, every head: output 0, log-sum-exp -inf, query gradient 0.
    const std::vector<double> out = gpu_f.out.to(Device::cpu()).to_vector<double>();
    const std::vector<double> lse = gpu_f.lse.to(Device::cpu()).to_vector<double>();
    const std::vector<double> gq = gpu_b.q.to(Device::cpu()).to_vector<double>();
    for (std::int64_t h = 0; h < s.hq; ++h) {
      INFO("head " << h);
      const std::int64_t row = h * s.tq + c.blind_query;
      CHECK(lse[static_cast<std::size_t>(row)] == -kInf);
      for (std::int64_t x = 0; x < s.dv; ++x) CHECK(out[static_cast<std::size_t>(row * s.dv + x)] == 0);
      for (std::int64_t x = 0; x < s.d; ++x) CHECK(gq[static_cast<std::size_t>(row * s.d + x)] == 0);
    }
  }
}

}  // namespace

TEST_CASE("The Backend defaults of fused attention match the CPU kernels, f64", "[attention][default_backend]") {
  REQUIRE(kStandInInstalled);
  for (const Case& c : cases()) {
    INFO("f64: " << c.name);
    check_case(c, DType::f64, 1e-12);
  }
}

TEST_CASE("The Backend defaults of fused attention match the CPU kernels, f32", "[attention][default_backend]") {
  REQUIRE(kStandInInstalled);
  for (const Case& c : cases()) {
    INFO("f32: " << c.name);
    check_case(c, DType::f32, 1e-5);
  }
}

TEST_CASE("The Backend defaults: a query that sees no key among keys it would see by position",
          "[attention][default_backend]") {
  // Every key in another document, in both batch rows: the whole problem is blind.
  const Tensor qseg = full({2, 6}, 1.0, DType::i64, Device::cpu()), kseg = full({2, 9}, 2.0, DType::i64, Device::cpu());
  const AttentionMask mask = make_mask(false, 0, qseg, kseg);
  const Tensor q = uniform({2, 2, 6, 4}, 1, -2, 2, DType::f64).to(kGpu);
  const Tensor k = uniform({2, 2, 9, 4}, 2, -2, 2, DType::f64).to(kGpu);
  const Tensor v = uniform({2, 2, 9, 3}, 3, -1, 1, DType::f64).to(kGpu);
  const Tensor gout = uniform({2, 2, 6, 3}, 4, -1, 1, DType::f64).to(kGpu);
  Forward f;
  Backward b;
  run_fused(q, k, v, gout, on(mask, kGpu), 0.5, {}, f, b);
  CHECK_CLOSE(f.out, zeros({2, 2, 6, 3}, DType::f64, Device::cpu()), 0, 0);
  CHECK_CLOSE(f.lse, full({2, 2, 6}, -kInf, DType::f64, Device::cpu()), 0, 0);
  CHECK_CLOSE(b.q, zeros({2, 2, 6, 4}, DType::f64, Device::cpu()), 0, 0);
  CHECK_CLOSE(b.k, zeros({2, 2, 9, 4}, DType::f64, Device::cpu()), 0, 0);
  CHECK_CLOSE(b.v, zeros({2, 2, 9, 3}, DType::f64, Device::cpu()), 0, 0);
}

namespace {

struct AutogradResult {
  Tensor out, q, k, v;
};

// F::attention on the device of q, k and v, backward from a fixed weighting of its output;
// dropout's seed drawn from Generator(generator_seed).
AutogradResult run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& weights,
                             F::AttentionOptions options, std::uint64_t generator_seed) {
  Generator generator(generator_seed);
  options.generator = &generator;
  Variable vq(q.clone(), true), vk(k.clone(), true), vv(v.clone(), true);
  const Variable y = F::attention(vq, vk, vv, options);
  y.backward(weights);
  return {y.data(), vq.grad(), vk.grad(), vv.grad()};
}

}  // namespace

TEST_CASE("F::attention on a device with the Backend defaults matches the CPU end to end",
          "[attention][default_backend][autograd]") {
  REQUIRE(kStandInInstalled);
  struct AutogradCase {
    std::string name;
    Dims dims;
    AttentionMask mask;
    double dropout;
    DType dtype;
    double tol;
  };
  const Tensor docs = documents(2, 21);
  const std::vector<AutogradCase> all = {
      {"no mask", {2, 2, 2, 17, 17, 8, 8}, make_mask(false), 0, DType::f64, 1e-12},
      {"causal + window 3, GQA Hq 4 Hkv 2, dv 3", {2, 4, 2, 33, 33, 8, 3}, make_mask(true, 3), 0, DType::f64, 1e-12},
      {"packed documents + causal, GQA Hq 4 Hkv 1, dropout 0.3",
       {2, 4, 1, 21, 21, 8, 8},
       make_mask(true, 0, docs, docs),
       0.3,
       DType::f64,
       1e-12},
      {"Tq 5 Tk 13, query_start 10 key_start 3, causal, dropout 0.3",
       {2, 2, 2, 5, 13, 8, 8},
       make_mask(true, 0, {}, {}, 10, 3),
       0.3,
       DType::f64,
       1e-12},
      {"packed documents with a blind query, bidirectional window 4",
       {2, 2, 2, 21, 21, 8, 8},
       make_mask(false, 4, documents_with_blind_query(2, 21, 9), docs),
       0,
       DType::f64,
       1e-12},
      {"packed documents + causal, GQA Hq 4 Hkv 2, dropout 0.3, f32",
       {2, 4, 2, 21, 21, 8, 5},
       make_mask(true, 0, docs, docs),
       0.3,
       DType::f32,
       1e-5},
  };
  for (const AutogradCase& c : all) {
    INFO(c.name);
    const Dims& s = c.dims;
    const Tensor q = uniform({s.B, s.hq, s.tq, s.d}, 31, -2, 2, c.dtype);
    const Tensor k = uniform({s.B, s.hkv, s.tk, s.d}, 32, -2, 2, c.dtype);
    const Tensor v = uniform({s.B, s.hkv, s.tk, s.dv}, 33, -1, 1, c.dtype);
    const Tensor w = uniform({s.B, s.hq, s.tq, s.dv}, 34, -1, 1, c.dtype);
    F::AttentionOptions options;
    options.mask = c.mask;
    options.dropout = c.dropout;
    options.head_offset = 1;
    TrainModeGuard train(true);
    const AutogradResult cpu = run_attention(q, k, v, w, options, 77);
    F::AttentionOptions device_options = options;
    device_options.mask = on(c.mask, kGpu);
    const AutogradResult gpu = run_attention(q.to(kGpu), k.to(kGpu), v.to(kGpu), w.to(kGpu), device_options, 77);
    for (const Tensor* t : {&gpu.out, &gpu.q, &gpu.k, &gpu.v}) {
      INFO(t->description());
      REQUIRE(t->defined());
      CHECK(t->device() == kGpu);
    }
    CHECK_CLOSE(gpu.out, cpu.out, c.tol, c.tol);
    CHECK_CLOSE(gpu.q, cpu.q, c.tol, c.tol);
    CHECK_CLOSE(gpu.k, cpu.k, c.tol, c.tol);
    CHECK_CLOSE(gpu.v, cpu.v, c.tol, c.tol);
    CHECK(all_finite(gpu.out));
    CHECK(all_finite(gpu.q));
    CHECK(all_finite(gpu.k));
    CHECK(all_finite(gpu.v));
  }
}
