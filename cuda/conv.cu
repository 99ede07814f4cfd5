// 2-D convolution on cuDNN's legacy API (cudnnConvolutionForward / BackwardData /
// BackwardFilter): NCHW, f32 and f64, groups, padding, stride, dilation. cuDNN's
// CUDNN_CROSS_CORRELATION is what the CPU backend computes (y[o] = sum W[o, c, ky, kx] *
// x[c, oy * stride - pad + ky * dilate, ...], the kernel not flipped).
//
// Algorithm choice. Each pass asks cuDNN's heuristics (cudnnGet*Algorithm_v7: no benchmark, no
// memory, and the same answer on every run on the same GPU and cuDNN, so results are
// reproducible from run to run) once per shape; the answer is cached by device, pass, dtype,
// precision mode and geometry. Only algorithms that cuDNN marks CUDNN_DETERMINISTIC are taken
// (the backward passes' atomics-based ALGO_0 never is), and for f32 by default only FMA math:
// CUDNN_DEFAULT_MATH may run f32 convolutions on TF32 tensor cores on Ampere and later, while
// CUDNN_FMA_MATH restricts cuDNN to kernels using FMA instructions, i.e. exact FP32. TF32 is
// used only under tandem::cuda::allow_tf32(); f64 runs with the default math, which has no
// reduced-precision mode for doubles. Candidates are taken in the heuristics' order,
// each checked by querying its workspace with the final math type; when none qualifies, a
// short list of deterministic algorithms that support every geometry is tried.
//
// Batches are cut into chunks whose tensors have fewer than 2^31 elements (cuDNN's 4-D
// descriptors take int sizes and strides); the weight gradient sums its chunks with beta = 1,
// in order. Scratch space comes from the device's caching allocator (DeviceBuffer).
#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "cuda/cuda.h"
#include "cuda/cuda_backend.h"
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

using ConvKey = std::array<std::int64_t, 18>;

ConvKey make_key(int device, ConvPass pass, const CudnnConv& c, const Conv2DGeometry& g, std::int64_t out_channels,
                 std::int64_t groups, std::int64_t batch) {
  return {device,     static_cast<std::int64_t>(pass),
          static_cast<std::int64_t>(c.type), c.fma_only ? 1 : 0,
          batch,      g.channels, g.height,   g.width,  out_channels,
          g.kernel_h, g.kernel_w, g.stride_y, g.stride_x,
          g.pad_y,    g.pad_x,    g.dilate_y, g.dilate_x,
          groups};
}

std::mutex& cache_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<ConvKey, ConvAlgorithm>& algorithm_cache() {
  static auto* cache = new std::map<ConvKey, ConvAlgorithm>();
  return *cache;
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

// Deterministic algorithms that support groups, dilation and f64, for when the heuristics
// offer none that qualifies.
std::vector<int> fallback_algorithms(ConvPass pass) {
  switch (pass) {
    case ConvPass::forward:
      return {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
              CUDNN_CONVOLUTION_FWD_ALGO_GEMM};
    case ConvPass::backward_data:
      return {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1};
    case ConvPass::backward_filter:
      return {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1};
  }
  return {};
}

ConvAlgorithm choose_algorithm(const DeviceContext& ctx, ConvPass pass, const CudnnConv& c) {
  const std::size_t limit = workspace_limit(ctx);
  ConvAlgorithm chosen;
  auto try_candidate = [&](int algo, cudnnMathType_t math) {
    std::size_t bytes = 0;
    if (!query_workspace(ctx, pass, c, algo, math, &bytes) || bytes > limit) return false;
    chosen.algo = algo;
    chosen.math = math;
    chosen.workspace = bytes;
    return true;
  };
  bool found = false;
  for (const Candidate& cand : heuristic_candidates(ctx, pass, c)) {
    if (cand.status != CUDNN_STATUS_SUCCESS || cand.determinism != CUDNN_DETERMINISTIC) continue;
    // Exact f32: only FMA configurations (a DEFAULT_MATH one may be TF32). Otherwise anything but
    // TENSOR_OP_MATH_ALLOW_CONVERSION (data converted to f16).
    if (c.fma_only ? cand.math != CUDNN_FMA_MATH : cand.math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    if ((found = try_candidate(cand.algo, cand.math))) break;
  }
  if (!found) {
    const cudnnMathType_t math = base_math(c);
    for (int algo : fallback_algorithms(pass)) {
      if ((found = try_candidate(algo, math))) break;
    }
  }
  // Leave the descriptor as it was described; the caller sets the chosen math type.
  (void)cudnnSetConvolutionMathType(c.conv.get(), base_math(c));
  TANDEM_CHECK(found, pass_op(pass), ": cuDNN offers no deterministic", c.fma_only ? " exact-FP32" : "",
               " algorithm for this convolution (", c.type == CUDNN_DATA_DOUBLE ? "f64" : "f32", ")");
  return chosen;
}

// The cached algorithm for this chunk's shape, chosen on first use; sets the descriptor's math type.
ConvAlgorithm algorithm_for(const DeviceContext& ctx, ConvPass pass, const CudnnConv& c, const Conv2DGeometry& g,
                            std::int64_t out_channels, std::int64_t groups, std::int64_t batch) {
  const ConvKey key = make_key(ctx.index, pass, c, g, out_channels, groups, batch);
  ConvAlgorithm algorithm;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto it = algorithm_cache().find(key);
    if (it != algorithm_cache().end()) {
      algorithm = it->second;
      cached = true;
    }
  }
  if (!cached) {
    algorithm = choose_algorithm(ctx, pass, c);
    std::lock_guard<std::mutex> lock(cache_mutex());
    algorithm_cache().emplace(key, algorithm);
  }
  TANDEM_CUDNN_CHECK(cudnnSetConvolutionMathType(c.conv.get(), algorithm.math));
  return algorithm;
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

bool fma_only_for(DType dtype) { return dtype == DType::f32 && !allow_tf32(); }

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
    c.type = cudnn_data_type(x.dtype(), op);
    c.fma_only = fma_only_for(x.dtype());
    const CudnnScalars scalars(c.type, 1.0, 0.0);
    const std::int64_t chunk = images_per_chunk(g, O, op);
    const std::int64_t x_image = g.channels * g.height * g.width, y_image = O * g.out_h * g.out_w;
    const std::size_t element = dtype_size(x.dtype());
    const char* px = static_cast<const char*>(x.raw_data());
    char* py = static_cast<char*>(y.raw_data());
    for (std::int64_t first = 0; first < g.batch; first += chunk) {
      const std::int64_t count = g.batch - first < chunk ? g.batch - first : chunk;
      describe(c, g, O, groups, count, op);
      const ConvAlgorithm a = algorithm_for(ctx, ConvPass::forward, c, g, O, groups, count);
      DeviceBuffer workspace(a.workspace, ctx.index);
      TANDEM_CUDNN_CHECK(cudnnConvolutionForward(
          ctx.cudnn, scalars.alpha(), c.x.get(), px + first * x_image * element, c.w.get(), W.raw_data(),
          c.conv.get(), static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), workspace.data(), a.workspace,
          scalars.beta(), c.y.get(), py + first * y_image * element));
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
  c.type = cudnn_data_type(gy.dtype(), op);
  c.fma_only = fma_only_for(gy.dtype());
  const CudnnScalars scalars(c.type, 1.0, 0.0);  // beta = 0: gx is overwritten
  const std::int64_t chunk = images_per_chunk(g, O, op);
  const std::int64_t x_image = g.channels * g.height * g.width, y_image = O * g.out_h * g.out_w;
  const std::size_t element = dtype_size(gy.dtype());
  const char* pgy = static_cast<const char*>(gy.raw_data());
  char* pgx = static_cast<char*>(gx.raw_data());
  for (std::int64_t first = 0; first < g.batch; first += chunk) {
    const std::int64_t count = g.batch - first < chunk ? g.batch - first : chunk;
    describe(c, g, O, groups, count, op);
    const ConvAlgorithm a = algorithm_for(ctx, ConvPass::backward_data, c, g, O, groups, count);
    DeviceBuffer workspace(a.workspace, ctx.index);
    TANDEM_CUDNN_CHECK(cudnnConvolutionBackwardData(
        ctx.cudnn, scalars.alpha(), c.w.get(), W.raw_data(), c.y.get(), pgy + first * y_image * element,
        c.conv.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo), workspace.data(), a.workspace,
        scalars.beta(), c.x.get(), pgx + first * x_image * element));
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
  c.type = cudnn_data_type(x.dtype(), op);
  c.fma_only = fma_only_for(x.dtype());
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
    const ConvAlgorithm a = algorithm_for(ctx, ConvPass::backward_filter, c, g, O, groups, count);
    DeviceBuffer workspace(a.workspace, ctx.index);
    TANDEM_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        ctx.cudnn, scalars.alpha(), c.x.get(), px + first * x_image * element, c.y.get(),
        pgy + first * y_image * element, c.conv.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo),
        workspace.data(), a.workspace, scalars.beta(), c.w.get(), gW.raw_data()));
  }
}

}  // namespace cuda
}  // namespace tandem
