// Fused attention (F::attention: FlashAttention-2's tiles, O(T) memory) beside the composed
// reference (F::composed_attention: matmul + softmax, every [T, T] score matrix held), causal,
// f32, B = 1, H = 4 heads, d = 64: q, k, v [1, 4, T, 64].
//
//   OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1 BENCH_T="512 1024 4096" bazel run -c opt //bench:attention_bench
//
// Per (impl, T, pass) one line:
//   name=tandem.attention.<fused|composed>.causal.t<T>.<fwd|fwdbwd> threads=N T=.. heads=4 d=64
//   peak_live_mb=.. median_ms=.. min_ms=.. gflops=.. ...
// (t<T> is the sequence length here, not the thread count: threads= says that.)
//   fwd:    the forward alone, under NoGradGuard (no graph, nothing saved for backward).
//   fwdbwd: forward with q, k, v requiring gradients, then backward seeded with a fixed random
//           output gradient (Variable::backward(seed)); the inputs' gradients are cleared first.
//   peak_live_mb: the peak of live tensor bytes on the host (core/storage.h, MB = 10^6 bytes)
//           during one such pass, less the bytes live before it (q, k, v and the seed): what the
//           attention itself holds at its peak (for fwdbwd the q, k, v gradients count). Fused
//           must grow linearly in T, composed quadratically.
//   gflops: a nominal count, the same for both implementations so that it reads as speed: the
//           forward's two products (q k^T and P v) at 2 * B * H * T * T * d FLOPs each, halved
//           for the causal mask (only the lower triangle is needed): 2 * 2 * B*H*T*T*d / 2; a
//           backward counts 2.5 forwards (its five products against the forward's two), so
//           fwdbwd = 3.5 * fwd. Softmax, exp and the mask are not counted; the composed
//           reference computes the full square products, which count no more.
// Environment:
//   BENCH_T="512 1024"    sequence lengths (default "512 1024 4096 16384");
//   BENCH_MAX_GB=6        composed is skipped where its predicted peak (kComposedMatrices f32
//                         [B, H, T, T] matrices and the [T, T] mask) exceeds this many GB
//                         (10^9 bytes); a line says so, with the prediction;
//   BENCH_IMPL=fused      only one implementation (fused or composed; default both);
//   BENCH_SCALE=0.5       scales the timed iterations (never fewer than 3);
//   OMP_NUM_THREADS       the threads (printed as threads=).
// Before timing, T = 256: fused and composed outputs (and the inputs' gradients) must agree
// within 1e-4 relative to the largest magnitude of the composed result, or the benchmark stops.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "bench/bench_util.h"
#include "core/storage.h"

using namespace tandem;

namespace {

constexpr std::int64_t kBatch = 1, kHeads = 4, kDim = 64;
// The composed reference's peak, predicted: the scores, the softmax's weights (kept for
// backward), and in backward the weights' gradient and the scores' gradient (measured: about 3.6
// matrices at T = 1024 and 4096, forward alone and forward+backward alike).
constexpr double kComposedMatrices = 4;

std::vector<std::int64_t> lengths_from_env() {
  const char* e = std::getenv("BENCH_T");
  std::vector<std::int64_t> out;
  if (e) {
    for (const char* p = e; *p;) {
      char* end = nullptr;
      const long long v = std::strtoll(p, &end, 10);
      if (end == p) break;
      if (v > 0) out.push_back(v);
      p = end;
    }
  }
  if (out.empty()) out = {512, 1024, 4096, 16384};
  return out;
}

double max_gb() {
  const char* e = std::getenv("BENCH_MAX_GB");
  return e && std::atof(e) > 0 ? std::atof(e) : 6.0;
}

bool impl_selected(const char* impl) {
  const char* e = std::getenv("BENCH_IMPL");
  return e == nullptr || *e == 0 || std::strstr(e, impl) != nullptr;
}

int threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

using AttentionFn = Variable (*)(const Variable&, const Variable&, const Variable&, const F::AttentionOptions&);

F::AttentionOptions causal_options() {
  F::AttentionOptions options;
  options.mask.causal = true;
  return options;
}

struct Inputs {
  Variable q, k, v;
  Tensor gout;  // the output gradient that seeds backward
};

Inputs make_inputs(std::int64_t T, std::uint64_t seed) {
  Generator gen(seed);
  const Shape shape{kBatch, kHeads, T, kDim};
  Inputs in;
  in.q = Variable(randn(shape, gen), true, "q");
  in.k = Variable(randn(shape, gen), true, "k");
  in.v = Variable(randn(shape, gen), true, "v");
  in.gout = randn(shape, gen);
  return in;
}

void clear_grads(const Inputs& in) {
  for (Variable x : {in.q, in.k, in.v}) x.cleargrad();  // handles: the copies share the variables
}

void forward_only(AttentionFn fn, const Inputs& in) {
  NoGradGuard no_grad;
  const Variable out = fn(in.q, in.k, in.v, causal_options());
  (void)out;
}

void forward_backward(AttentionFn fn, const Inputs& in) {
  clear_grads(in);
  const Variable out = fn(in.q, in.k, in.v, causal_options());
  out.backward(in.gout);
}

// Peak live host tensor bytes during fn, less those live before it.
std::int64_t peak_live_bytes(const std::function<void()>& fn) {
  const Device cpu = Device::cpu();
  const std::int64_t before = live_storage_bytes(cpu);
  reset_peak_live_storage_bytes(cpu);
  fn();
  return peak_live_storage_bytes(cpu) - before;
}

// max |a - b| / max |b|.
double relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  TANDEM_CHECK(x.size() == y.size(), "attention_bench: sizes differ: ", a.description(), " vs ", b.description());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(y[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// T = 256: the fused output and gradients against the composed reference's.
void check_agreement() {
  const std::int64_t T = 256;
  const double tolerance = 1e-4;
  const Inputs in = make_inputs(T, 7);
  struct Result {
    Tensor out, gq, gk, gv;
  };
  auto run = [&](AttentionFn fn) {
    clear_grads(in);
    const Variable out = fn(in.q, in.k, in.v, causal_options());
    out.backward(in.gout);
    return Result{out.data().clone(), in.q.grad().clone(), in.k.grad().clone(), in.v.grad().clone()};
  };
  const Result fused = run(&F::attention), composed = run(&F::composed_attention);
  const double e_out = relative_error(fused.out, composed.out), e_q = relative_error(fused.gq, composed.gq),
               e_k = relative_error(fused.gk, composed.gk), e_v = relative_error(fused.gv, composed.gv);
  std::printf("check T=%lld causal f32: fused vs composed rel_err out=%.3g gq=%.3g gk=%.3g gv=%.3g (tolerance %g)\n",
              static_cast<long long>(T), e_out, e_q, e_k, e_v, tolerance);
  std::fflush(stdout);
  TANDEM_CHECK(e_out <= tolerance && e_q <= tolerance && e_k <= tolerance && e_v <= tolerance,
               "attention_bench: fused and composed attention disagree at T=256 (rel_err out=", e_out, " gq=", e_q,
               " gk=", e_k, " gv=", e_v, ")");
}

// Timed iterations per T (BENCH_SCALE scales; at least 3).
int iterations(std::int64_t T) {
  if (T <= 512) return bench::scaled(30);
  if (T <= 1024) return bench::scaled(15);
  if (T <= 2048) return bench::scaled(6);
  return bench::scaled(3);
}

void report(const char* impl, std::int64_t T, const char* pass, std::int64_t peak_bytes, const bench::Stats& s,
            double flops) {
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  std::printf(
      "name=tandem.attention.%s.causal.t%lld.%s threads=%d T=%lld heads=%lld d=%lld peak_live_mb=%.2f median_ms=%.3f "
      "min_ms=%.3f gflops=%.2f lib=tandem batch=%lld iters=%d max_ms=%.3f omp_wait=%s\n",
      impl, static_cast<long long>(T), pass, threads(), static_cast<long long>(T), static_cast<long long>(kHeads),
      static_cast<long long>(kDim), peak_bytes / 1e6, s.median_ms, s.min_ms, flops / (s.median_ms * 1e6),
      static_cast<long long>(kBatch), s.iters, s.max_ms, wait ? wait : "default");
  std::fflush(stdout);
}

void run_impl(const char* impl, AttentionFn fn, std::int64_t T) {
  const double fwd_flops = 2.0 * 2.0 * kBatch * kHeads * double(T) * double(T) * kDim / 2;
  const double fwdbwd_flops = 3.5 * fwd_flops;
  if (std::strcmp(impl, "composed") == 0) {
    const double predicted =
        kComposedMatrices * kBatch * kHeads * double(T) * double(T) * sizeof(float) + double(T) * double(T);
    if (predicted > max_gb() * 1e9) {
      std::printf(
          "skipped name=tandem.attention.composed.causal.t%lld threads=%d T=%lld heads=%lld d=%lld "
          "predicted_peak_mb=%.0f max_gb=%g (%g f32 [B, H, T, T] matrices + the [T, T] mask)\n",
          static_cast<long long>(T), threads(), static_cast<long long>(T), static_cast<long long>(kHeads),
          static_cast<long long>(kDim), predicted / 1e6, max_gb(), kComposedMatrices);
      std::fflush(stdout);
      return;
    }
  }
  const Inputs in = make_inputs(T, 1);
  const int iters = iterations(T);
  const int warmup = T <= 1024 ? 2 : 0;  // the memory-measuring pass warms up large T

  // Forward alone: its peak from one pass (which also warms up), then the timed passes.
  const std::int64_t fwd_peak = peak_live_bytes([&] { forward_only(fn, in); });
  const bench::Stats fwd = bench::measure(warmup, iters, [&] { forward_only(fn, in); });
  report(impl, T, "fwd", fwd_peak, fwd, fwd_flops);

  clear_grads(in);
  const std::int64_t fwdbwd_peak = peak_live_bytes([&] { forward_backward(fn, in); });
  const bench::Stats fwdbwd = bench::measure(warmup, iters, [&] { forward_backward(fn, in); });
  report(impl, T, "fwdbwd", fwdbwd_peak, fwdbwd, fwdbwd_flops);
}

}  // namespace

int main() {
  try {
    check_agreement();
    for (const std::int64_t T : lengths_from_env()) {
      if (impl_selected("fused")) run_impl("fused", &F::attention, T);
      if (impl_selected("composed")) run_impl("composed", &F::composed_attention, T);
    }
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
