// 2-D convolution on cuDNN's legacy API (cudnnConvolutionForward / BackwardData /
// BackwardFilter): NCHW, f32 and f64, groups, padding, stride, dilation. cuDNN's
// CUDNN_CROSS_CORRELATION is what the CPU backend computes (y[o] = sum W[o, c, ky, kx] *
// x[c, oy * stride - pad + ky * dilate, ...], the kernel not flipped).
//
// Algorithm choice (cuda::set_deterministic(false) admits the atomics-based ones too, and
// becomes part of the cache key). Each pass asks cuDNN's heuristics (cudnnGet*Algorithm_v7: no benchmark, no
// memory, and the same answer on every run on the same GPU and cuDNN, so results are
// reproducible from run to run) for a ranking of the algorithms. Only deterministic ones are
// taken (the backward passes' atomics-based ALGO_0 and the filter's ALGO_3 never are), and for
// f32 by default only FMA math: CUDNN_DEFAULT_MATH may run f32 convolutions on TF32 tensor
// cores on Ampere and later, while CUDNN_FMA_MATH restricts cuDNN to kernels using FMA
// instructions, i.e. exact FP32. Unless TF32 is allowed (tandem::cuda::allow_tf32()) or
// cuda::set_conv_direct_only(false) was called, the FFT/Winograd algorithms are left out too (see
// exact_mode). f64 runs with the default math,
// which has no reduced-precision mode for doubles. The candidates that pass, then a short list
// of direct deterministic fallbacks, are tried in order until one runs (a candidate whose
// workspace query succeeded can still fail to run, or its workspace fail to allocate); the one
// that ran is cached by device, pass, dtype, precision mode, the switches, geometry and pointer
// alignment. In benchmark mode (cuda::set_cudnn_benchmark(true), as PyTorch's
// cudnn.benchmark) every other algorithm the rules admit joins the candidates, each is timed on
// the call's inputs into a scratch output, and they are tried fastest first (see
// by_measured_time). TANDEM_CUDNN_VERBOSE=1 prints each cached choice (and the times) to stderr.
//
// Batches are cut into chunks whose tensors have fewer than 2^31 elements (cuDNN's 4-D
// descriptors take int sizes and strides); the weight gradient sums its chunks with beta = 1,
// in order. Scratch space comes from the device's caching allocator (DeviceBuffer).
#include <array>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "cuda/cuda.h"
#include "cuda/cuda_backend.h"
#include "cuda/conv_timing.h"
#include "cuda/cudnn_util.cuh"
#include "cuda/kernel_util.cuh"

namespace tandem {
namespace cuda {

namespace {

enum class ConvPass { forward = 0, backward_data = 1, backward_filter = 2 };

const char* pass_op(ConvPass pass) {
  switch (pass) {
    case ConvPass::forward: return "conv2d";
    case ConvPass::backward_data: return "conv2d_grad_input";
    case ConvPass::backward_filter: return "conv2d_grad_weight";
  }
  return "conv2d";
}

// One convolution as cuDNN sees it: descriptors for a chunk of `batch` images.
struct CudnnConv {
  cudnnDataType_t type;
  // f32 without allow_tf32(): FMA math only. Otherwise cuDNN's default math, which is exact
  // for f64 and may use TF32 for f32.
  bool fma_only;
  // Only algorithms with the same bits on every run (tandem::cuda::deterministic()).
  bool deterministic = true;
  // Exact mode admits only direct algorithms (tandem::cuda::conv_direct_only(); see exact_mode).
  bool direct_only = true;
  // The candidates are timed, the fastest taken (tandem::cuda::cudnn_benchmark()).
  bool benchmark = false;
  CudnnTensorDescriptor x, y;
  CudnnFilterDescriptor w;
  CudnnConvolutionDescriptor conv;
};

// The math type the descriptors are described with (and the fallbacks run with).
cudnnMathType_t base_math(const CudnnConv& c) { return c.fma_only ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH; }

// Describes the convolution of a chunk of `batch` images into `c`, with the base math type.
void describe(CudnnConv& c, const Conv2DGeometry& g, std::int64_t out_channels, std::int64_t groups,
              std::int64_t batch, const char* op) {
  const int n = cudnn_int(batch, op, "batch");
  const int ch = cudnn_int(g.channels, op, "channels");
  const int o = cudnn_int(out_channels, op, "out_channels");
  c.x.set_nchw(c.type, n, ch, cudnn_int(g.height, op, "height"), cudnn_int(g.width, op, "width"));
  c.y.set_nchw(c.type, n, o, cudnn_int(g.out_h, op, "out_h"), cudnn_int(g.out_w, op, "out_w"));
  c.w.set_kcrs(c.type, o, cudnn_int(g.channels / groups, op, "channels per group"),
               cudnn_int(g.kernel_h, op, "kernel_h"), cudnn_int(g.kernel_w, op, "kernel_w"));
  TANDEM_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      c.conv.get(), cudnn_int(g.pad_y, op, "pad_y"), cudnn_int(g.pad_x, op, "pad_x"),
      cudnn_int(g.stride_y, op, "stride_y"), cudnn_int(g.stride_x, op, "stride_x"),
      cudnn_int(g.dilate_y, op, "dilate_y"), cudnn_int(g.dilate_x, op, "dilate_x"), CUDNN_CROSS_CORRELATION,
      c.type));
  TANDEM_CUDNN_CHECK(cudnnSetConvolutionGroupCount(c.conv.get(), cudnn_int(groups, op, "groups")));
  TANDEM_CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv.get(), base_math(c)));
  // The front end's output size (Chainer's, cover_all off) must be cuDNN's.
  int dims[4] = {0, 0, 0, 0};
  TANDEM_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(c.conv.get(), c.x.get(), c.w.get(), &dims[0], &dims[1],
                                                           &dims[2], &dims[3]));
  TANDEM_CHECK(dims[0] == n && dims[1] == o && dims[2] == g.out_h && dims[3] == g.out_w, op,
               ": cuDNN's output shape [", dims[0], ", ", dims[1], ", ", dims[2], ", ", dims[3],
               "] differs from the expected [", n, ", ", o, ", ", g.out_h, ", ", g.out_w, "]");
}

// ---- algorithm choice ----

struct ConvAlgorithm {
  int algo = 0;  // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  cudnnMathType_t math = CUDNN_FMA_MATH;
  std::size_t workspace = 0;
};

bool same_algorithm(const ConvAlgorithm& a, const ConvAlgorithm& b) { return a.algo == b.algo && a.math == b.math; }

// Exact mode (f64, and f32 unless allow_tf32(); unless conv_direct_only() is off): only
// algorithms that compute every output as a sum over its own window. FFT, FFT_TILING, WINOGRAD
// and WINOGRAD_NONFUSED are deterministic but transform the whole tile: an Inf/NaN in the input
// reaches outputs whose window does not contain it (Inf - Inf in the transform), and FFT's
// rounding error is relative to the tensor's largest magnitude, not to each output's terms, so
// they would not match the CPU reference. Under allow_tf32() exactness is already given up and
// they are allowed; with conv_direct_only() off the user accepts them in FP32 (still FMA math
// for f32: fma_only does not depend on it), as PyTorch does by default.
bool exact_mode(const CudnnConv& c) { return c.direct_only && (c.type == CUDNN_DATA_DOUBLE || c.fma_only); }

// Whether `algo` of `pass` sums each output over its window (no FFT/Winograd transform).
bool is_direct(ConvPass pass, int algo) {
  switch (pass) {
    case ConvPass::forward:
      return algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
             algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || algo == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
    case ConvPass::backward_data:
      return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    case ConvPass::backward_filter:
      return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
             algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
  }
  return false;
}

// cudnn_ops.h marks backward data ALGO_0 and backward filter ALGO_0 and ALGO_3 non-deterministic
// (atomic adds); every forward algorithm is deterministic. Checked besides the heuristics'
// `determinism` field so that the fallbacks go through the same test.
bool is_deterministic(ConvPass pass, int algo) {
  switch (pass) {
    case ConvPass::forward: return true;
    case ConvPass::backward_data: return algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
    case ConvPass::backward_filter:
      return algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 && algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
  }
  return false;
}

const char* algorithm_name(ConvPass pass, int algo) {
  static const char* const forward[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM",     "DIRECT",
                                        "FFT",           "FFT_TILING",            "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* const data[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* const filter[] = {"ALGO_0",   "ALGO_1",           "FFT",       "ALGO_3",
                                       "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  switch (pass) {
    case ConvPass::forward: return algo >= 0 && algo < 8 ? forward[algo] : "?";
    case ConvPass::backward_data: return algo >= 0 && algo < 6 ? data[algo] : "?";
    case ConvPass::backward_filter: return algo >= 0 && algo < 7 ? filter[algo] : "?";
  }
  return "?";
}

const char* math_name(cudnnMathType_t math) {
  switch (math) {
    case CUDNN_DEFAULT_MATH: return "DEFAULT_MATH";
    case CUDNN_TENSOR_OP_MATH: return "TENSOR_OP_MATH";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "TENSOR_OP_MATH_ALLOW_CONVERSION";
    case CUDNN_FMA_MATH: return "FMA_MATH";
  }
  return "?";
}

// The alignment of the chunk's data pointers, at most 16 bytes. Part of the cache key: a chunk
// at an odd offset (batch chunks start at first * image_size * element) may need a fallback
// that an aligned call of the same shape must not inherit.
std::int64_t pointer_alignment(const void* a, const void* b, const void* c) {
  const std::uintptr_t bits = reinterpret_cast<std::uintptr_t>(a) | reinterpret_cast<std::uintptr_t>(b) |
                              reinterpret_cast<std::uintptr_t>(c) | std::uintptr_t(16);
  return static_cast<std::int64_t>(bits & (~bits + 1));  // the lowest set bit
}

using ConvKey = std::array<std::int64_t, 22>;

ConvKey make_key(int device, ConvPass pass, const CudnnConv& c, const Conv2DGeometry& g, std::int64_t out_channels,
                 std::int64_t groups, std::int64_t batch, std::int64_t alignment) {
  return {device,     static_cast<std::int64_t>(pass),
          static_cast<std::int64_t>(c.type), c.fma_only ? 1 : 0,
          batch,      g.channels, g.height,   g.width,  out_channels,
          g.kernel_h, g.kernel_w, g.stride_y, g.stride_x,
          g.pad_y,    g.pad_x,    g.dilate_y, g.dilate_x,
          groups,     alignment, c.deterministic ? 1 : 0,
          c.direct_only ? 1 : 0, c.benchmark ? 1 : 0};
}

std::mutex& cache_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Per key, the first algorithm that actually ran (never one that was only ranked).
std::map<ConvKey, ConvAlgorithm>& algorithm_cache() {
  static auto* cache = new std::map<ConvKey, ConvAlgorithm>();
  return *cache;
}

// TANDEM_CUDNN_VERBOSE=1: one line per cache key on stderr with the algorithm chosen, so that a
// GPU run can confirm what exact FP32 really runs (e.g. that it does not always land on the
// fallbacks because the heuristics offered no FMA_MATH candidate).
bool verbose() {
  static const bool on = [] {
    const char* value = std::getenv("TANDEM_CUDNN_VERBOSE");
    return value != nullptr && value[0] != '\0' && std::string(value) != "0";
  }();
  return on;
}

// The most workspace a candidate may ask for: an eighth of the device's memory, at most 4 GiB
// (the FFT algorithms can ask for more than the tensors themselves).
std::size_t workspace_limit(const DeviceContext& ctx) {
  const std::size_t cap = std::size_t(4) << 30;
  const std::size_t eighth = ctx.properties.totalGlobalMem / 8;
  return eighth < cap ? eighth : cap;
}

// The workspace of `algo` of `pass` with the descriptor's math set to `math`; false when cuDNN
// does not support the combination.
bool query_workspace(const DeviceContext& ctx, ConvPass pass, const CudnnConv& c, int algo, cudnnMathType_t math,
                     std::size_t* bytes) {
  if (cudnnSetConvolutionMathType(c.conv.get(), math) != CUDNN_STATUS_SUCCESS) return false;
  cudnnStatus_t status = CUDNN_STATUS_NOT_SUPPORTED;
  switch (pass) {
    case ConvPass::forward:
      status = cudnnGetConvolutionForwardWorkspaceSize(ctx.cudnn, c.x.get(), c.w.get(), c.conv.get(), c.y.get(),
                                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
      break;
    case ConvPass::backward_data:
      status = cudnnGetConvolutionBackwardDataWorkspaceSize(ctx.cudnn, c.w.get(), c.y.get(), c.conv.get(), c.x.get(),
                                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
      break;
    case ConvPass::backward_filter:
      status = cudnnGetConvolutionBackwardFilterWorkspaceSize(
          ctx.cudnn, c.x.get(), c.y.get(), c.conv.get(), c.w.get(),
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
      break;
  }
  return status == CUDNN_STATUS_SUCCESS;
}

struct Candidate {
  int algo;
  cudnnStatus_t status;
  cudnnDeterminism_t determinism;
  cudnnMathType_t math;
};

template <typename Perf>
std::vector<Candidate> to_candidates(const std::vector<Perf>& perf, int count) {
  std::vector<Candidate> out;
  for (int i = 0; i < count; ++i)
    out.push_back({static_cast<int>(perf[i].algo), perf[i].status, perf[i].determinism, perf[i].mathType});
  return out;
}

// cuDNN's heuristic ranking of the algorithms of `pass` for the descriptors in `c`; empty when
// the heuristics fail (the fallbacks are tried then).
std::vector<Candidate> heuristic_candidates(const DeviceContext& ctx, ConvPass pass, const CudnnConv& c) {
  int max_count = 0, count = 0;
  switch (pass) {
    case ConvPass::forward: {
      TANDEM_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(ctx.cudnn, &max_count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<std::size_t>(max_count > 0 ? max_count : 1));
      if (cudnnGetConvolutionForwardAlgorithm_v7(ctx.cudnn, c.x.get(), c.w.get(), c.conv.get(), c.y.get(), max_count,
                                                 &count, perf.data()) != CUDNN_STATUS_SUCCESS)
        return {};
      return to_candidates(perf, count);
    }
    case ConvPass::backward_data: {
      TANDEM_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(ctx.cudnn, &max_count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<std::size_t>(max_count > 0 ? max_count : 1));
      if (cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx.cudnn, c.w.get(), c.y.get(), c.conv.get(), c.x.get(),
                                                      max_count, &count, perf.data()) != CUDNN_STATUS_SUCCESS)
        return {};
      return to_candidates(perf, count);
    }
    case ConvPass::backward_filter: {
      TANDEM_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(ctx.cudnn, &max_count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<std::size_t>(max_count > 0 ? max_count : 1));
      if (cudnnGetConvolutionBackwardFilterAlgorithm_v7(ctx.cudnn, c.x.get(), c.y.get(), c.conv.get(), c.w.get(),
                                                        max_count, &count, perf.data()) != CUDNN_STATUS_SUCCESS)
        return {};
      return to_candidates(perf, count);
    }
  }
  return {};
}

// Deterministic, direct algorithms that support groups, dilation and f64, tried after the
// heuristics' candidates. The last is the last resort, taken whatever workspace it asks for:
// forward IMPLICIT_GEMM needs none; backward ALGO_1 is the only deterministic direct algorithm
// (ALGO_0, which needs no workspace, adds with atomics), so it is the backward passes' last resort.
std::vector<int> fallback_algorithms(ConvPass pass) {
  switch (pass) {
    case ConvPass::forward:
      return {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
              CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM};
    case ConvPass::backward_data:
      return {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1};
    case ConvPass::backward_filter:
      return {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1};
  }
  return {};
}

// The number of algorithms of `pass` (cudnnConvolution*Algo_t runs from 0 to it).
int algorithm_count(ConvPass pass) {
  switch (pass) {
    case ConvPass::forward: return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    case ConvPass::backward_data: return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    case ConvPass::backward_filter: return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  }
  return 0;
}

// Every algorithm worth trying, best first, and why the others were left out (for the
// verbose line).
struct RankedAlgorithms {
  std::vector<ConvAlgorithm> list;
  int from_heuristics = 0;  // the first ones of `list`
  int from_fallbacks = 0;   // the end of the fallbacks after them; the rest: benchmark mode's others
  int offered = 0, nondeterministic = 0, wrong_math = 0, transform = 0, no_workspace = 0;
};

const char* source_of(const RankedAlgorithms& ranked, std::size_t index) {
  const int i = static_cast<int>(index);
  return i < ranked.from_heuristics ? "heuristic" : i < ranked.from_fallbacks ? "fallback" : "searched";
}

RankedAlgorithms rank_algorithms(const DeviceContext& ctx, ConvPass pass, const CudnnConv& c) {
  const std::size_t limit = workspace_limit(ctx);
  const bool exact = exact_mode(c);
  RankedAlgorithms ranked;
  // Adds ALGO with MATH unless cuDNN rejects it, it is listed already or it needs more than the
  // workspace limit (which the last resort ignores).
  auto add = [&](int algo, cudnnMathType_t math, bool ignore_limit) {
    for (const ConvAlgorithm& a : ranked.list)
      if (a.algo == algo && a.math == math) return true;
    std::size_t bytes = 0;
    if (!query_workspace(ctx, pass, c, algo, math, &bytes) || (bytes > limit && !ignore_limit)) return false;
    ranked.list.push_back({algo, math, bytes});
    return true;
  };
  for (const Candidate& cand : heuristic_candidates(ctx, pass, c)) {
    if (cand.status != CUDNN_STATUS_SUCCESS) continue;
    ++ranked.offered;
    if (c.deterministic && (cand.determinism != CUDNN_DETERMINISTIC || !is_deterministic(pass, cand.algo))) {
      ++ranked.nondeterministic;
      continue;
    }
    // Exact f32: only FMA configurations (a DEFAULT_MATH one may be TF32). Otherwise anything but
    // TENSOR_OP_MATH_ALLOW_CONVERSION (data converted to f16).
    if (c.fma_only ? cand.math != CUDNN_FMA_MATH : cand.math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) {
      ++ranked.wrong_math;
      continue;
    }
    if (exact && !is_direct(pass, cand.algo)) {
      ++ranked.transform;
      continue;
    }
    if (!add(cand.algo, cand.math, false)) ++ranked.no_workspace;
  }
  ranked.from_heuristics = static_cast<int>(ranked.list.size());
  const std::vector<int> fallbacks = fallback_algorithms(pass);
  for (std::size_t i = 0; i < fallbacks.size(); ++i) add(fallbacks[i], base_math(c), i + 1 == fallbacks.size());
  ranked.from_fallbacks = static_cast<int>(ranked.list.size());
  // Benchmark mode times what cudnnFind would: every algorithm of the pass, not only those the
  // heuristics rank (v7 may list an FFT or Winograd configuration only under a math type that
  // the rules above turn away), each with the base math, under the same rules.
  if (c.benchmark) {
    for (int algo = 0; algo < algorithm_count(pass); ++algo) {
      if (c.deterministic && !is_deterministic(pass, algo)) continue;
      if (exact && !is_direct(pass, algo)) continue;
      add(algo, base_math(c), false);
    }
  }
  return ranked;
}

// cuDNN statuses after which the next candidate is tried: the algorithm does not support this
// call (NOT_SUPPORTED, BAD_PARAM, e.g. a misaligned pointer) -- both reported before anything
// runs -- or it failed while running. A failure while running may have written part of the
// output, so it is retried only when the output is overwritten (beta = 0), never when the call
// accumulates into it.
bool worth_retrying(cudnnStatus_t status, bool accumulates) {
  const int category = CUDNN_STATUS_CATEGORY(static_cast<int>(status));
  if (category == CUDNN_STATUS_NOT_SUPPORTED || category == CUDNN_STATUS_BAD_PARAM) return true;
  return !accumulates && (category == CUDNN_STATUS_EXECUTION_FAILED ||
                          status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED);
}

std::string algorithm_label(ConvPass pass, const ConvAlgorithm& a) {
  return std::string(algorithm_name(pass, a.algo)) + "/" + math_name(a.math);
}

// Runs `launch(algorithm, workspace, output)` with `a` into `output`: true when it ran; false,
// with the reason added to `failures`, when its workspace could not be allocated or cuDNN
// refused it in a way worth retrying; throws on any other cuDNN error.
template <typename Launch>
bool try_algorithm(const DeviceContext& ctx, ConvPass pass, const CudnnConv& c, const ConvAlgorithm& a, void* output,
                   bool accumulates, const char* call, Launch& launch, std::string* failures) {
  TANDEM_CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv.get(), a.math));
  const std::string name = algorithm_label(pass, a);
  DeviceBuffer workspace;
  try {
    workspace = DeviceBuffer(a.workspace, ctx.index);
  } catch (const Error& e) {  // out of memory: a smaller workspace may still fit
    (void)cudaGetLastError();
    *failures += "; " + name + ": workspace of " + std::to_string(a.workspace) + " bytes: " + e.what();
    return false;
  }
  const cudnnStatus_t status = launch(a, workspace.data(), output);
  if (status == CUDNN_STATUS_SUCCESS) return true;
  if (!worth_retrying(status, accumulates))
    throw_status("cuDNN", static_cast<long>(status), cudnnGetErrorString(status), call, __FILE__, __LINE__);
  (void)cudaGetLastError();  // clear a non-sticky CUDA error so that the next candidate starts clean
  *failures += "; " + name + ": " + cudnnGetErrorString(status);
  return false;
}

// ---- benchmark mode ----

// A CUDA event that records time, destroyed with the object.
class TimingEvent {
 public:
  TimingEvent() { TANDEM_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~TimingEvent() { (void)cudaEventDestroy(event_); }
  TimingEvent(const TimingEvent&) = delete;
  TimingEvent& operator=(const TimingEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

constexpr int kTimedRuns = 3;

// The time of `a` on this call's inputs, written into `scratch`: one untimed run (it loads the
// kernels and warms the caches), then the median of kTimedRuns runs between events on the
// device's stream. kNotTimed, with the reason in *note, when its workspace cannot be allocated
// or cuDNN refuses it with any status: nothing but the scratch is written, so every refusal is
// worth skipping (a sticky CUDA error, the device itself failing, still throws at the next
// synchronisation).
template <typename Launch>
double time_algorithm(const DeviceContext& ctx, const CudnnConv& c, const ConvAlgorithm& a, void* scratch,
                      const TimingEvent& start, const TimingEvent& stop, Launch& launch, std::string* note) {
  if (cudnnSetConvolutionMathType(c.conv.get(), a.math) != CUDNN_STATUS_SUCCESS) {
    *note = "math type refused";
    return kNotTimed;
  }
  DeviceBuffer workspace;
  try {
    workspace = DeviceBuffer(a.workspace, ctx.index);
  } catch (const Error&) {
    (void)cudaGetLastError();
    *note = "workspace of " + std::to_string(a.workspace) + " bytes not allocated";
    return kNotTimed;
  }
  cudnnStatus_t status = launch(a, workspace.data(), scratch);
  std::vector<double> samples;
  for (int run = 0; run < kTimedRuns && status == CUDNN_STATUS_SUCCESS; ++run) {
    TANDEM_CUDA_CHECK(cudaEventRecord(start.get(), ctx.stream));
    status = launch(a, workspace.data(), scratch);
    TANDEM_CUDA_CHECK(cudaEventRecord(stop.get(), ctx.stream));
    TANDEM_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0;
    TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    samples.push_back(ms);
  }
  if (status != CUDNN_STATUS_SUCCESS) {
    (void)cudaGetLastError();
    *note = cudnnGetErrorString(status);
    return kNotTimed;
  }
  return median_ms(samples);
}

// Benchmark mode: the indices of `list` in the order to try them, the timed ones fastest first
// (conv_timing.h), then those that could not be timed in their ranked order (the real run tries
// them again and reports why they fail); each one's time goes to *report for the verbose line.
// The runs write into a scratch buffer of the output's size, never into the output itself: the
// weight gradient's later chunks add into theirs (beta = 1), which a timed run would change.
// The scratch output starts at the same offset from a 16-byte boundary as `output`, so that an
// algorithm that needs more alignment fails there as it would on the output (part of the key).
// Without memory for the scratch the ranked order stays.
template <typename Launch>
std::vector<std::size_t> by_measured_time(const DeviceContext& ctx, ConvPass pass, const CudnnConv& c,
                                          const std::vector<ConvAlgorithm>& list, const void* output,
                                          std::size_t output_bytes, Launch& launch, std::string* report) {
  std::vector<std::size_t> order;
  const std::size_t offset = reinterpret_cast<std::uintptr_t>(output) % 16;
  DeviceBuffer scratch;
  try {
    scratch = DeviceBuffer(output_bytes + offset, ctx.index);
  } catch (const Error&) {
    (void)cudaGetLastError();
    *report = "; not timed: no memory for a scratch output of " + std::to_string(output_bytes) + " bytes";
    for (std::size_t i = 0; i < list.size(); ++i) order.push_back(i);
    return order;
  }
  void* scratch_output = static_cast<char*>(scratch.data()) + offset;
  // Defined values for the accumulating passes to add to.
  if (output_bytes > 0) TANDEM_CUDA_CHECK(cudaMemsetAsync(scratch_output, 0, output_bytes, ctx.stream));
  const TimingEvent start, stop;
  std::vector<double> ms(list.size(), kNotTimed);
  for (std::size_t i = 0; i < list.size(); ++i) {
    std::string note;
    ms[i] = time_algorithm(ctx, c, list[i], scratch_output, start, stop, launch, &note);
    char time[32];
    std::snprintf(time, sizeof time, "%.4f ms", ms[i]);
    *report += (i == 0 ? "; timed: " : ", ") + algorithm_label(pass, list[i]) + " " +
               (was_timed(ms[i]) ? std::string(time) : "not timed (" + note + ")");
  }
  order = fastest_first(ms);
  for (std::size_t i = 0; i < list.size(); ++i)
    if (!was_timed(ms[i])) order.push_back(i);
  return order;
}

// ---- running ----

// Runs one chunk into `output` (of `output_bytes`): the cached algorithm of `key` if there is
// one, else (or when it fails, e.g. its workspace no longer fits) the ranked candidates in order,
// as PyTorch's Conv_v7 does; in benchmark mode a key's first call tries them fastest first
// instead (a cached algorithm that failed is not timed again). Only an algorithm that ran is
// cached, and a cached entry is never replaced, so that a transient out-of-memory does not
// change the results of later calls.
template <typename Launch>
void run_convolution(const DeviceContext& ctx, ConvPass pass, const CudnnConv& c, const ConvKey& key, void* output,
                     std::size_t output_bytes, bool accumulates, const char* call, Launch launch) {
  std::string failures;
  ConvAlgorithm cached;
  bool have_cached = false;
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto it = algorithm_cache().find(key);
    if (it != algorithm_cache().end()) {
      cached = it->second;
      have_cached = true;
    }
  }
  if (have_cached && try_algorithm(ctx, pass, c, cached, output, accumulates, call, launch, &failures)) return;
  const RankedAlgorithms ranked = rank_algorithms(ctx, pass, c);
  std::string times;
  std::vector<std::size_t> order;
  if (c.benchmark && !have_cached) {
    order = by_measured_time(ctx, pass, c, ranked.list, output, output_bytes, launch, &times);
  } else {
    for (std::size_t i = 0; i < ranked.list.size(); ++i) order.push_back(i);
  }
  for (std::size_t n = 0; n < order.size(); ++n) {
    const std::size_t i = order[n];
    const ConvAlgorithm& a = ranked.list[i];
    if (have_cached && same_algorithm(a, cached)) continue;  // failed just above
    if (!try_algorithm(ctx, pass, c, a, output, accumulates, call, launch, &failures)) continue;
    if (have_cached) return;
    bool inserted = false;
    {
      std::lock_guard<std::mutex> lock(cache_mutex());
      inserted = algorithm_cache().emplace(key, a).second;
    }
    if (inserted && verbose()) {
      auto k = [&](int f) { return static_cast<long long>(key[f]); };  // the fields of make_key
      const std::string mode = std::string(c.deterministic ? "" : " non-deterministic") +
                               (c.direct_only ? "" : " FFT/Winograd-allowed") + (c.benchmark ? " benchmark" : "");
      std::fprintf(stderr,
                   "tandem cuDNN: %s %s%s%s device %d x [%lld, %lld, %lld, %lld] W [%lld, -, %lld, %lld] stride "
                   "%lld,%lld pad %lld,%lld dilate %lld,%lld groups %lld align %lld: %s %s, workspace %zu bytes "
                   "(candidate %zu of %zu, %s%s; heuristics offered %d: %d non-deterministic, %d wrong math, %d "
                   "FFT/Winograd, %d unsupported or over the workspace limit)%s%s\n",
                   pass_op(pass), c.type == CUDNN_DATA_DOUBLE ? "f64" : "f32",
                   c.fma_only ? " exact-FP32" : (c.type == CUDNN_DATA_DOUBLE ? "" : " TF32-allowed"), mode.c_str(),
                   ctx.index, k(4), k(5), k(6), k(7), k(8), k(9), k(10), k(11), k(12), k(13), k(14), k(15), k(16),
                   k(17), k(18), algorithm_name(pass, a.algo), math_name(a.math), a.workspace, i + 1,
                   ranked.list.size(), source_of(ranked, i),
                   c.benchmark && !have_cached ? ", the fastest that ran" : "",
                   ranked.offered, ranked.nondeterministic, ranked.wrong_math, ranked.transform, ranked.no_workspace,
                   times.c_str(), failures.empty() ? "" : ("; after" + failures.substr(1)).c_str());
    }
    return;
  }
  TANDEM_FAIL(pass_op(pass), ": no", c.deterministic ? " deterministic" : "", exact_mode(c) ? " direct" : "",
              c.fma_only ? " exact-FP32" : "", " cuDNN algorithm could run this convolution (",
              c.type == CUDNN_DATA_DOUBLE ? "f64" : "f32", ", batch ", key[4], ", pointer alignment ", key[18],  // see make_key
              "): ", failures.empty() ? std::string("none was offered") : failures.substr(2));
}

// ---- batching ----

// Images per cuDNN call: as many as keep both the input and the output chunk under 2^31
// elements (cuDNN's descriptors take int sizes and strides).
std::int64_t images_per_chunk(const Conv2DGeometry& g, std::int64_t out_channels, const char* op) {
  const std::int64_t in_image = g.channels * g.height * g.width;
  const std::int64_t out_image = out_channels * g.out_h * g.out_w;
  const std::int64_t per_image = in_image > out_image ? in_image : out_image;
  TANDEM_CHECK(per_image <= INT_MAX, op, ": one image of ", in_image, " input or ", out_image,
               " output elements exceeds cuDNN's 2^31 limit");
  const std::int64_t chunk = per_image == 0 ? g.batch : INT_MAX / per_image;
  return chunk < g.batch ? chunk : g.batch;
}

// The data type and the switches of the calling thread's moment: the precision mode
// (allow_tf32), determinism, direct-only and benchmark mode.
void configure(CudnnConv& c, DType dtype, const char* op) {
  c.type = cudnn_data_type(dtype, op);
  c.fma_only = dtype == DType::f32 && !allow_tf32();
  c.deterministic = deterministic();
  c.direct_only = conv_direct_only();
  c.benchmark = cudnn_benchmark();
}

void zero(Tensor& t, const DeviceContext& ctx) {
  if (t.numel() > 0) TANDEM_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), ctx.stream));
}

template <typename T>
__global__ void add_channel_bias_kernel(T* y, const T* b, std::int64_t channels, std::int64_t plane,
                                        std::int64_t n) {
  TANDEM_GRID_STRIDE_LOOP(i, n) { y[i] += b[(i / plane) % channels]; }
}

// y [N, O, out_h, out_w] += b[o] on every plane of channel o.
void add_channel_bias(Tensor& y, const Tensor& b, const DeviceContext& ctx) {
  const std::int64_t channels = y.size(1), plane = y.size(2) * y.size(3), n = y.numel();
  TANDEM_DISPATCH_FLOAT(y.dtype(), "conv2d", [&] {
    launch_elementwise("conv2d bias", ctx, n, add_channel_bias_kernel<scalar_t>, y.data<scalar_t>(),
                       b.data<scalar_t>(), channels, plane, n);
  });
}

}  // namespace

void CudaBackend::conv2d(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g,
                         std::int64_t groups, Tensor& y) {
  const char* op = "conv2d";
  if (y.numel() == 0) return;
  DeviceContext& ctx = context_of(y, op);
  const std::int64_t O = W.size(0);
  if (x.numel() == 0) {
    // No input elements (C, H or W is 0): every window reads only zeros.
    zero(y, ctx);
  } else {
    CudnnConv c;
    configure(c, x.dtype(), op);
    const CudnnScalars scalars(c.type, 1.0, 0.0);
    const std::int64_t chunk = images_per_chunk(g, O, op);
    const std::int64_t x_image = g.channels * g.height * g.width, y_image = O * g.out_h * g.out_w;
    const std::size_t element = dtype_size(x.dtype());
    const char* px = static_cast<const char*>(x.raw_data());
    char* py = static_cast<char*>(y.raw_data());
    for (std::int64_t first = 0; first < g.batch; first += chunk) {
      const std::int64_t count = g.batch - first < chunk ? g.batch - first : chunk;
      describe(c, g, O, groups, count, op);
      const void* cx = px + first * x_image * element;
      void* cy = py + first * y_image * element;
      const ConvKey key =
          make_key(ctx.index, ConvPass::forward, c, g, O, groups, count, pointer_alignment(cx, W.raw_data(), cy));
      const std::size_t y_bytes = static_cast<std::size_t>(count * y_image) * element;
      run_convolution(ctx, ConvPass::forward, c, key, cy, y_bytes, /*accumulates=*/false, "cudnnConvolutionForward",
                      [&](const ConvAlgorithm& a, void* workspace, void* out) {
                        return cudnnConvolutionForward(
                            ctx.cudnn, scalars.alpha(), c.x.get(), cx, c.w.get(), W.raw_data(), c.conv.get(),
                            static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), workspace, a.workspace, scalars.beta(),
                            c.y.get(), out);
                      });
    }
  }
  if (b.defined()) add_channel_bias(y, b, ctx);
}

void CudaBackend::conv2d_grad_input(const Tensor& gy, const Tensor& W, const Conv2DGeometry& g,
                                    std::int64_t groups, Tensor& gx) {
  const char* op = "conv2d_grad_input";
  if (gx.numel() == 0) return;
  DeviceContext& ctx = context_of(gx, op);
  const std::int64_t O = W.size(0);
  if (gy.numel() == 0 || W.numel() == 0) {  // no output channels: nothing flows back
    zero(gx, ctx);
    return;
  }
  CudnnConv c;
  configure(c, gy.dtype(), op);
  const CudnnScalars scalars(c.type, 1.0, 0.0);  // beta = 0: gx is overwritten
  const std::int64_t chunk = images_per_chunk(g, O, op);
  const std::int64_t x_image = g.channels * g.height * g.width, y_image = O * g.out_h * g.out_w;
  const std::size_t element = dtype_size(gy.dtype());
  const char* pgy = static_cast<const char*>(gy.raw_data());
  char* pgx = static_cast<char*>(gx.raw_data());
  for (std::int64_t first = 0; first < g.batch; first += chunk) {
    const std::int64_t count = g.batch - first < chunk ? g.batch - first : chunk;
    describe(c, g, O, groups, count, op);
    const void* cgy = pgy + first * y_image * element;
    void* cgx = pgx + first * x_image * element;
    const ConvKey key = make_key(ctx.index, ConvPass::backward_data, c, g, O, groups, count,
                                 pointer_alignment(cgx, W.raw_data(), cgy));
    const std::size_t gx_bytes = static_cast<std::size_t>(count * x_image) * element;
    run_convolution(ctx, ConvPass::backward_data, c, key, cgx, gx_bytes, /*accumulates=*/false,
                    "cudnnConvolutionBackwardData", [&](const ConvAlgorithm& a, void* workspace, void* out) {
                      return cudnnConvolutionBackwardData(
                          ctx.cudnn, scalars.alpha(), c.w.get(), W.raw_data(), c.y.get(), cgy, c.conv.get(),
                          static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo), workspace, a.workspace,
                          scalars.beta(), c.x.get(), out);
                    });
  }
}

void CudaBackend::conv2d_grad_weight(const Tensor& x, const Tensor& gy, const Conv2DGeometry& g,
                                     std::int64_t groups, Tensor& gW) {
  const char* op = "conv2d_grad_weight";
  if (gW.numel() == 0) return;
  DeviceContext& ctx = context_of(gW, op);
  const std::int64_t O = gW.size(0);
  if (x.numel() == 0 || gy.numel() == 0) {  // an empty batch (or empty images) sums to 0
    zero(gW, ctx);
    return;
  }
  CudnnConv c;
  configure(c, x.dtype(), op);
  const std::int64_t chunk = images_per_chunk(g, O, op);
  const std::int64_t x_image = g.channels * g.height * g.width, y_image = O * g.out_h * g.out_w;
  const std::size_t element = dtype_size(x.dtype());
  const char* px = static_cast<const char*>(x.raw_data());
  const char* pgy = static_cast<const char*>(gy.raw_data());
  for (std::int64_t first = 0; first < g.batch; first += chunk) {
    const std::int64_t count = g.batch - first < chunk ? g.batch - first : chunk;
    // The first chunk overwrites gW, later ones add to it, in order.
    const CudnnScalars scalars(c.type, 1.0, first == 0 ? 0.0 : 1.0);
    describe(c, g, O, groups, count, op);
    const void* cx = px + first * x_image * element;
    const void* cgy = pgy + first * y_image * element;
    const ConvKey key = make_key(ctx.index, ConvPass::backward_filter, c, g, O, groups, count,
                                 pointer_alignment(cx, gW.raw_data(), cgy));
    // Chunks after the first add into gW: a failure while running is not retried (see worth_retrying).
    run_convolution(ctx, ConvPass::backward_filter, c, key, gW.raw_data(), gW.nbytes(),
                    /*accumulates=*/first > 0, "cudnnConvolutionBackwardFilter",
                    [&](const ConvAlgorithm& a, void* workspace, void* out) {
                      return cudnnConvolutionBackwardFilter(
                          ctx.cudnn, scalars.alpha(), c.x.get(), cx, c.y.get(), cgy, c.conv.get(),
                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo), workspace, a.workspace,
                          scalars.beta(), c.w.get(), out);
                    });
  }
}

}  // namespace cuda
}  // namespace tandem
