// GEMM benchmark: fp32 C = A·B, square, through tandem's public matmul (core/ops/linalg.h), for
// the ids of ../shared/bench/gemm_peak.cpp:
//   gemm.n1024.t1   n = 1024, 1 thread,  3 warm-up + 15 timed products
//   gemm.n1024.t2   n = 1024, 2 threads, 3 warm-up + 20 timed products
//   gemm.n4096.t2   n = 4096, 2 threads, 1 warm-up +  5 timed products
// The reference's methodology: A and B uniform in [-1, 1) from std::mt19937 seeded 1 and 2, every
// product timed on its own, the median counts; gflops = 2 n^3 / median (gflops_best: / min);
// relerr = the worst of four sampled entries of C against a double-precision dot product,
// relative to the sum of the magnitudes of its terms (CHECK=FAIL above 1e-4). tandem's matmul
// returns a new tensor per call, so its time includes getting the output's memory (as a user
// pays it); the references write into a preallocated C. minflt_per_call= counts the page faults
// of a timed product (0 when the allocator recycles the output's block).
// library= is the product library tandem measured fastest for the shape on this machine and ran
// (core/cpu/gemm_choice.h).
// pct_peak= is the median against the machine's fp32 peak (../shared/bench/cpu_peak.cpp: 166.4
// GFLOP/s per core here; BENCH_PEAK_GFLOPS_PER_CORE overrides it).
//
//   OMP_WAIT_POLICY=PASSIVE bazel run -c opt //bench:gemm_bench
//   BENCH_ONLY=n1024 (or t2, n4096.t2, ...): the ids containing that text.  BENCH_SCALE=0.3: fewer
//   timed products (never below 3).
//
// On a GPU (BENCH_DEVICE=cuda:0, in a --config=cuda build; scripts/bench_gpu.sh sets it beside
// raw cublasSgemm and torch.mm on the same shapes): gemm.n{1024,4096,8192}.gpu in exact FP32 and
// gemm.n{1024,4096,8192}.gpu.tf32 with TF32 tensor-core math allowed (cuda::set_allow_tf32).
// A and B are the same matrices, copied to the device once. A timed sample is `per_sample`
// back-to-back products followed by a synchronize (the launch latency of one call would dominate
// a single n = 1024 product); the times printed are per product. tflops = 2 n^3 / median.
// relerr as above on C copied back (CHECK=FAIL above 1e-4, or 5e-3 for TF32, whose inputs keep
// 10 mantissa bits: about 5e-4 relative per term). mallocs_per_call= counts cudaMallocs of the
// caching allocator during the timed products (0 when it recycles the output's block).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <sys/resource.h>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/cpu/gemm_choice.h"
#include "core/ops.h"
#include "cuda/cuda.h"

using namespace tandem;

namespace {

bool selected(const std::string& id) {
  const char* only = std::getenv("BENCH_ONLY");
  if (only == nullptr || std::strstr(only, "gemm") != nullptr) return true;  // the whole family
  // Otherwise any word of BENCH_ONLY that occurs in the id selects it ("n1024", "t2").
  const std::string words(only);
  std::size_t pos = 0;
  while (pos < words.size()) {
    const std::size_t end = std::min(words.find(' ', pos), words.size());
    if (end > pos && id.find(words.substr(pos, end - pos)) != std::string::npos) return true;
    pos = end + 1;
  }
  return false;
}

double peak_gflops_per_core() {
  const char* e = std::getenv("BENCH_PEAK_GFLOPS_PER_CORE");
  return e && std::atof(e) > 0 ? std::atof(e) : 166.4;
}

void fill(std::vector<float>& v, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& x : v) x = d(g);
}

// gemm_peak.cpp's check: a few entries of row-major C against a naive double dot product.
double max_rel_err(const float* A, const float* B, const float* C, int n) {
  double worst = 0;
  const int idx[4][2] = {{0, 0}, {n - 1, n - 1}, {n / 3, n / 2}, {n / 2, 7}};
  for (auto& ij : idx) {
    const int i = ij[0], j = ij[1];
    double ref = 0, mag = 0;
    for (int k = 0; k < n; ++k) {
      ref += double(A[std::size_t(i) * n + k]) * B[std::size_t(k) * n + j];
      mag += std::fabs(double(A[std::size_t(i) * n + k]) * B[std::size_t(k) * n + j]);
    }
    worst = std::max(worst, std::fabs(ref - C[std::size_t(i) * n + j]) / (mag + 1e-30));
  }
  return worst;
}

// Minor page faults of this process so far: fresh memory touched for the first time (an output
// that the allocator does not recycle shows up here, as in comm_bench).
long minor_faults() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Returns false when the check failed.
bool run(int n, int threads, int warmup, int iters) {
  const std::string id = "gemm.n" + std::to_string(n) + ".t" + std::to_string(threads);
  if (!selected(id)) return true;
  bench::set_threads(threads);
  std::vector<float> a(std::size_t(n) * n), b(std::size_t(n) * n);
  fill(a, 1);
  fill(b, 2);
  const Tensor A = from_vector(a, {n, n}), B = from_vector(b, {n, n});
  Tensor C;
  long faults = 0;  // in the timed products only
  int calls = 0;
  const bench::Stats s = bench::measure(warmup, iters, [&] {
    const long f0 = minor_faults();
    C = matmul(A, B);
    if (++calls > warmup) faults += minor_faults() - f0;
  });
  const double err = max_rel_err(A.data<float>(), B.data<float>(), C.data<float>(), n);
  const double flops = 2.0 * double(n) * n * n;
  const double gflops = flops / (s.median_ms * 1e-3) / 1e9, gflops_best = flops / (s.min_ms * 1e-3) / 1e9;
  const double peak = peak_gflops_per_core() * threads;
  // The library the measured choice runs this shape on (core/cpu/gemm_choice.h); asked after the
  // products, so the class is already chosen.
  const char* library = cpu::gemm_backend_name(cpu::gemm_backend_for<float>(n, n, n, false, false));
  bench::print_stats(id, bench::threads_tag(threads) + " n=" + std::to_string(n) + " library=" + library, s);
  std::printf(" gflops=%.1f gflops_best=%.1f peak_gflops=%.1f pct_peak=%.1f relerr=%.1e minflt_per_call=%.1f%s\n",
              gflops, gflops_best, peak, 100.0 * gflops / peak, err, double(faults) / iters,
              err > 1e-4 ? " CHECK=FAIL" : "");
  std::fflush(stdout);
  return err <= 1e-4;
}

// The GPU product: `reps` products per timed sample, then a synchronize. Returns false when the
// check failed.
bool run_gpu(int n, const bench::Target& t, int warmup, int iters, int reps) {
  const std::string id = t.id("gemm.n" + std::to_string(n));
  if (!selected(id)) return true;
  t.apply();
  std::vector<float> a(std::size_t(n) * n), b(std::size_t(n) * n);
  fill(a, 1);
  fill(b, 2);
  const Tensor A = from_vector(a, {n, n}).to(t.device), B = from_vector(b, {n, n}).to(t.device);
  Tensor C;
  const int index = t.device.index();
  std::size_t mallocs = 0;  // in the timed samples only
  int calls = 0;
  bench::Stats s = bench::measure(warmup, iters, [&] {
    const std::size_t m0 = cuda::memory_stats(index).raw_allocations;
    for (int r = 0; r < reps; ++r) C = matmul(A, B);
    t.wait();
    if (++calls > warmup) mallocs += cuda::memory_stats(index).raw_allocations - m0;
  });
  s.median_ms /= reps;
  s.min_ms /= reps;
  s.max_ms /= reps;
  const std::vector<float> c = C.to_vector<float>();
  const double err = max_rel_err(a.data(), b.data(), c.data(), n);
  const double limit = t.tf32 ? 5e-3 : 1e-4;
  const double flops = 2.0 * double(n) * n * n;
  const double tflops = flops / (s.median_ms * 1e-3) / 1e12, tflops_best = flops / (s.min_ms * 1e-3) / 1e12;
  bench::print_stats(id, t.tags() + " n=" + std::to_string(n) + " per_sample=" + std::to_string(reps), s);
  std::printf(" gflops=%.0f tflops=%.2f tflops_best=%.2f relerr=%.1e mallocs_per_call=%.2f%s\n", tflops * 1e3, tflops,
              tflops_best, err, double(mallocs) / (double(iters) * reps), err > limit ? " CHECK=FAIL" : "");
  std::fflush(stdout);
  return err <= limit;
}

bool run_all_gpu(const Device& device) {
  bool ok = true;
  for (bool tf32 : {false, true}) {
    const bench::Target t{device, 0, tf32};
    ok &= run_gpu(1024, t, 5, bench::scaled(30), 20);
    ok &= run_gpu(4096, t, 3, bench::scaled(20), 2);
    ok &= run_gpu(8192, t, 2, bench::scaled(10), 1);
  }
  cuda::set_allow_tf32(false);
  return ok;
}

}  // namespace

int main() {
  Device device;
  try {
    device = bench::device_from_env();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_bench: %s\n", e.what());
    return 1;
  }
  // Start-up is over: ../shared/bench/runq restarts its noise window here.
  std::printf("# start\n");
  std::fflush(stdout);
  if (device.is_cuda()) {
    try {
      return run_all_gpu(device) ? 0 : 1;
    } catch (const std::exception& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "gemm_bench: %s\n", e.what());
      return 1;
    }
  }
  bool ok = true;
  ok &= run(1024, 1, 3, bench::scaled(15));
  ok &= run(1024, 2, 3, bench::scaled(20));
  ok &= run(4096, 2, 1, bench::scaled(5));
  return ok ? 0 : 1;
}
