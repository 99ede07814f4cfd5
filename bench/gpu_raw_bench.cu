// Raw cuBLAS and cuDNN on the shapes of train_step_bench and gemm_bench: what the GPU libraries
// do alone, with no framework around them, so that scripts/bench_gpu.sh can set tandem's GPU
// figures (BENCH_DEVICE=cuda:0) beside them and beside PyTorch. Plain CUDA: no tandem code.
//
//   gemm.n{1024,4096,8192}.gpu       cublasSgemm, C = A·B row-major, A and B as gemm_bench
//                                    (uniform [-1, 1), std::mt19937 seeded 1 and 2), relerr as there
//   mlp.infer.matmuls.gpu            the MLP's three layer products, batch 100 (784-1000-1000-10)
//   mlp.train.matmuls.gpu            the same forward, then dW of all three layers and dX of l3, l2
//                                    (the input needs no gradient): the products of a training
//                                    step, without bias, ReLU, loss or update
//   conv.c{1..4}.{fwd,bwd_data,bwd_filter}.gpu
//                                    cudnnConvolutionForward / BackwardData / BackwardFilter of the
//                                    CNN's four 3x3 pad-1 layers at batch 64 (1->64 @28, 64->64 @28,
//                                    64->128 @14, 128->128 @14), NCHW, algorithm by cudnnFind*
//   conv.infer.convs.gpu             the four forwards in a row
//   conv.train.convs.gpu             the four forwards, backward data of c4..c2, backward filter of
//                                    c4..c1: the convolutions of a training step and nothing else
// Every id comes twice: exact FP32 (CUBLAS_DEFAULT_MATH; CUDNN_FMA_MATH, no tensor cores) and
// .tf32 (CUBLAS_TF32_TENSOR_OP_MATH; CUDNN_DEFAULT_MATH, which lets cuDNN use TF32).
//
// Timing: cudaEvents on one stream around `per_sample` back-to-back calls (after warm-up calls),
// the per-call median of `iters` samples counts; lines in ../shared/bench's format,
// `name=raw.<id> ... median_ms=`. BENCH_DEVICE=cuda:N picks the device (default cuda:0),
// BENCH_ONLY="gemm mlp conv" a subset, BENCH_SCALE fewer samples. Without a GPU it says so in
// one line and exits 0.
//
//   bazel build -c opt --config=cuda //bench:gpu_raw_bench && bazel-bin/bench/gpu_raw_bench
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

// ---- errors: a failed call ends the program, naming the call ------------------------------------

[[noreturn]] void die(const char* call, const std::string& why, const char* file, int line) {
  std::fflush(stdout);
  std::fprintf(stderr, "gpu_raw_bench: %s failed: %s (%s:%d)\n", call, why.c_str(), file, line);
  std::exit(1);
}

#define CUDA_OK(call)                                                                \
  do {                                                                               \
    const cudaError_t status_ = (call);                                              \
    if (status_ != cudaSuccess) die(#call, cudaGetErrorString(status_), __FILE__, __LINE__); \
  } while (0)
#define CUBLAS_OK(call)                                                                                  \
  do {                                                                                                   \
    const cublasStatus_t status_ = (call);                                                               \
    if (status_ != CUBLAS_STATUS_SUCCESS) die(#call, cublasGetStatusString(status_), __FILE__, __LINE__); \
  } while (0)
#define CUDNN_OK(call)                                                                                 \
  do {                                                                                                 \
    const cudnnStatus_t status_ = (call);                                                              \
    if (status_ != CUDNN_STATUS_SUCCESS) die(#call, cudnnGetErrorString(status_), __FILE__, __LINE__); \
  } while (0)

// ---- the environment, as bench/bench_util.h reads it ---------------------------------------------

int scaled(int iters) {
  const char* e = std::getenv("BENCH_SCALE");
  const double f = e && std::atof(e) > 0 ? std::atof(e) : 1.0;
  return std::max(3, static_cast<int>(iters * f + 0.5));
}

bool selected(const char* family) {
  const char* only = std::getenv("BENCH_ONLY");
  return only == nullptr || std::strstr(only, family) != nullptr;
}

std::string kv(std::string v) {
  for (auto& c : v)
    if (c == ' ' || c == ',' || c == '=' || c == '\t' || c == '\n') c = '_';
  return v.empty() ? "none" : v;
}

// ---- the GPU, its stream and library handles ----------------------------------------------------

struct Gpu {
  int index = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cudnnHandle_t cudnn = nullptr;
  std::string tags;  // "lib=raw device=cuda:0 gpu=... cublas=... cudnn=..."
};

struct Stats {
  int iters = 0;
  double median_ms = 0, min_ms = 0, max_ms = 0;
};

// `warmup` calls, then `iters` samples of `per_sample` calls each between two events; per call.
Stats time_events(const Gpu& gpu, int warmup, int iters, int per_sample, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  CUDA_OK(cudaStreamSynchronize(gpu.stream));
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    CUDA_OK(cudaEventRecord(start, gpu.stream));
    for (int r = 0; r < per_sample; ++r) fn();
    CUDA_OK(cudaEventRecord(stop, gpu.stream));
    CUDA_OK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(double(ms) / per_sample);
  }
  CUDA_OK(cudaEventDestroy(start));
  CUDA_OK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  Stats s;
  const std::size_t n = times.size();
  s.iters = static_cast<int>(n);
  s.median_ms = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  s.min_ms = times.front();
  s.max_ms = times.back();
  return s;
}

std::string suffix(bool tf32) { return tf32 ? ".gpu.tf32" : ".gpu"; }

// Prints "name=raw.<id> <tags> iters=.. median_ms=.. min_ms=.. max_ms=.." without a newline.
void print_stats(const Gpu& gpu, const std::string& id, bool tf32, const std::string& tags, const Stats& s) {
  std::printf("name=raw.%s %s tf32=%d %s iters=%d median_ms=%.4f min_ms=%.4f max_ms=%.4f", id.c_str(),
              gpu.tags.c_str(), tf32 ? 1 : 0, tags.c_str(), s.iters, s.median_ms, s.min_ms, s.max_ms);
}

// A device array of `count` floats, uniform in [lo, hi) from std::mt19937(seed); the host copy
// is kept when `host` is given.
float* device_random(std::size_t count, unsigned seed, float lo = -1.f, float hi = 1.f,
                     std::vector<float>* host = nullptr) {
  std::vector<float> values(count);
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (auto& x : values) x = d(g);
  float* p = nullptr;
  CUDA_OK(cudaMalloc(&p, count * sizeof(float)));
  CUDA_OK(cudaMemcpy(p, values.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  if (host) *host = std::move(values);
  return p;
}

float* device_zeros(std::size_t count) {
  float* p = nullptr;
  CUDA_OK(cudaMalloc(&p, count * sizeof(float)));
  CUDA_OK(cudaMemset(p, 0, count * sizeof(float)));
  return p;
}

void set_cublas_math(const Gpu& gpu, bool tf32) {
  CUBLAS_OK(cublasSetMathMode(gpu.cublas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

// ---- GEMM -----------------------------------------------------------------------------------------

// gemm_bench's check: a few entries of row-major C against a double dot product, relative to
// the sum of the magnitudes of its terms.
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

bool gemm(const Gpu& gpu, int n, bool tf32, int warmup, int iters, int per_sample) {
  const std::size_t count = std::size_t(n) * n;
  std::vector<float> a, b, c(count);
  float* A = device_random(count, 1, -1.f, 1.f, &a);
  float* B = device_random(count, 2, -1.f, 1.f, &b);
  float* C = device_zeros(count);
  set_cublas_math(gpu, tf32);
  const float one = 1, zero = 0;
  // Row-major C = A·B is column-major C^T = B^T·A^T: the same call with A and B swapped.
  const Stats s = time_events(gpu, warmup, iters, per_sample, [&] {
    CUBLAS_OK(cublasSgemm(gpu.cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, B, n, A, n, &zero, C, n));
  });
  CUDA_OK(cudaMemcpy(c.data(), C, count * sizeof(float), cudaMemcpyDeviceToHost));
  const double err = max_rel_err(a.data(), b.data(), c.data(), n);
  const double limit = tf32 ? 5e-3 : 1e-4;
  const double flops = 2.0 * double(n) * n * n;
  const double tflops = flops / (s.median_ms * 1e-3) / 1e12;
  print_stats(gpu, "gemm.n" + std::to_string(n) + suffix(tf32), tf32,
              "n=" + std::to_string(n) + " per_sample=" + std::to_string(per_sample), s);
  std::printf(" gflops=%.0f tflops=%.2f tflops_best=%.2f relerr=%.1e%s\n", tflops * 1e3, tflops,
              flops / (s.min_ms * 1e-3) / 1e12, err, err > limit ? " CHECK=FAIL" : "");
  std::fflush(stdout);
  CUDA_OK(cudaFree(A));
  CUDA_OK(cudaFree(B));
  CUDA_OK(cudaFree(C));
  return err <= limit;
}

// ---- the MLP's products ---------------------------------------------------------------------------

// Row-major tensors as the framework holds them: x [batch, in], W [out, in], y [batch, out].
// Each product is the column-major call on the transposed views (no copies).
struct Dense {
  int in, out;
  float *W, *dW;
};

// y = x·W^T
void linear_forward(const Gpu& gpu, int batch, const Dense& l, const float* x, float* y) {
  const float one = 1, zero = 0;
  CUBLAS_OK(cublasSgemm(gpu.cublas, CUBLAS_OP_T, CUBLAS_OP_N, l.out, batch, l.in, &one, l.W, l.in, x, l.in, &zero, y,
                        l.out));
}

// dW = dy^T·x
void linear_backward_weight(const Gpu& gpu, int batch, const Dense& l, const float* x, const float* dy) {
  const float one = 1, zero = 0;
  CUBLAS_OK(cublasSgemm(gpu.cublas, CUBLAS_OP_N, CUBLAS_OP_T, l.in, l.out, batch, &one, x, l.in, dy, l.out, &zero,
                        l.dW, l.in));
}

// dx = dy·W
void linear_backward_input(const Gpu& gpu, int batch, const Dense& l, const float* dy, float* dx) {
  const float one = 1, zero = 0;
  CUBLAS_OK(cublasSgemm(gpu.cublas, CUBLAS_OP_N, CUBLAS_OP_N, l.in, batch, l.out, &one, l.W, l.in, dy, l.out, &zero,
                        dx, l.in));
}

void mlp(const Gpu& gpu, bool tf32) {
  const int B = 100, IN = 784, U = 1000, OUT = 10;
  set_cublas_math(gpu, tf32);
  Dense l1{IN, U, device_random(std::size_t(U) * IN, 3, -0.03f, 0.03f), device_zeros(std::size_t(U) * IN)};
  Dense l2{U, U, device_random(std::size_t(U) * U, 4, -0.03f, 0.03f), device_zeros(std::size_t(U) * U)};
  Dense l3{U, OUT, device_random(std::size_t(OUT) * U, 5, -0.03f, 0.03f), device_zeros(std::size_t(OUT) * U)};
  float* x = device_random(std::size_t(B) * IN, 6, 0.f, 1.f);
  float *h1 = device_zeros(std::size_t(B) * U), *h2 = device_zeros(std::size_t(B) * U);
  float* y = device_zeros(std::size_t(B) * OUT);
  float* dy = device_random(std::size_t(B) * OUT, 7, -0.01f, 0.01f);
  float *dh2 = device_zeros(std::size_t(B) * U), *dh1 = device_zeros(std::size_t(B) * U);
  auto forward = [&] {
    linear_forward(gpu, B, l1, x, h1);
    linear_forward(gpu, B, l2, h1, h2);
    linear_forward(gpu, B, l3, h2, y);
  };
  auto train = [&] {
    forward();
    linear_backward_weight(gpu, B, l3, h2, dy);
    linear_backward_input(gpu, B, l3, dy, dh2);
    linear_backward_weight(gpu, B, l2, h1, dh2);
    linear_backward_input(gpu, B, l2, dh2, dh1);
    linear_backward_weight(gpu, B, l1, x, dh1);
  };
  const double forward_flops = 2.0 * B * (double(IN) * U + double(U) * U + double(U) * OUT);
  const double train_flops = 2 * forward_flops + 2.0 * B * (double(U) * U + double(U) * OUT);
  const std::string tags = "batch=100 per_sample=10";
  Stats s = time_events(gpu, 20, scaled(100), 10, train);
  print_stats(gpu, "mlp.train.matmuls" + suffix(tf32), tf32, tags, s);
  std::printf(" gflops=%.1f samples_per_s=%.0f\n", train_flops / (s.median_ms * 1e6), B / (s.median_ms * 1e-3));
  s = time_events(gpu, 20, scaled(100), 10, forward);
  print_stats(gpu, "mlp.infer.matmuls" + suffix(tf32), tf32, tags, s);
  std::printf(" gflops=%.1f samples_per_s=%.0f\n", forward_flops / (s.median_ms * 1e6), B / (s.median_ms * 1e-3));
  std::fflush(stdout);
  for (float* p : {l1.W, l1.dW, l2.W, l2.dW, l3.W, l3.dW, x, h1, h2, y, dy, dh2, dh1}) CUDA_OK(cudaFree(p));
}

// ---- the CNN's convolutions -----------------------------------------------------------------------

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor_op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor_op_conversion";
    case CUDNN_FMA_MATH: return "fma";
  }
  return "unknown";
}

// The first (fastest) successful result of a cudnnFind* call that keeps the requested precision:
// exact FP32 takes only CUDNN_FMA_MATH results (or CUDNN_DEFAULT_MATH ones, which cuDNN may
// report for algorithms without tensor cores; the descriptor stays FMA when running, so TF32
// can never be used); TF32 takes any. Returns -1 when none.
template <typename Perf>
int pick(const std::vector<Perf>& results, int returned, bool tf32) {
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < returned; ++i) {
      const Perf& p = results[i];
      if (p.status != CUDNN_STATUS_SUCCESS) continue;
      if (tf32 || p.mathType == CUDNN_FMA_MATH || (pass == 1 && p.mathType == CUDNN_DEFAULT_MATH)) return i;
    }
  return -1;
}

struct ConvLayer {
  const char* name;
  int cin, cout, hw;
  bool needs_input_grad;  // c1's input is the data: no backward-data
  cudnnTensorDescriptor_t x_desc = nullptr, y_desc = nullptr;
  cudnnFilterDescriptor_t w_desc = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  float *x = nullptr, *w = nullptr, *y = nullptr, *dy = nullptr, *dx = nullptr, *dw = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo{};
  cudnnMathType_t fwd_math{}, bwd_data_math{}, bwd_filter_math{};
  std::size_t workspace = 0;
};

void conv_math(ConvLayer& l, cudnnMathType_t m) { CUDNN_OK(cudnnSetConvolutionMathType(l.conv, m)); }

// Descriptors, buffers, and the algorithms found for the requested precision. Returns false (and
// says why) when cuDNN offers no algorithm of that precision.
bool setup(const Gpu& gpu, ConvLayer& l, int batch, bool tf32) {
  const int n = batch, h = l.hw;
  CUDNN_OK(cudnnCreateTensorDescriptor(&l.x_desc));
  CUDNN_OK(cudnnCreateTensorDescriptor(&l.y_desc));
  CUDNN_OK(cudnnCreateFilterDescriptor(&l.w_desc));
  CUDNN_OK(cudnnCreateConvolutionDescriptor(&l.conv));
  CUDNN_OK(cudnnSetTensor4dDescriptor(l.x_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, l.cin, h, h));
  CUDNN_OK(cudnnSetTensor4dDescriptor(l.y_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, l.cout, h, h));
  CUDNN_OK(cudnnSetFilter4dDescriptor(l.w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, l.cout, l.cin, 3, 3));
  CUDNN_OK(cudnnSetConvolution2dDescriptor(l.conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  const cudnnMathType_t requested = tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  conv_math(l, requested);
  const std::size_t xs = std::size_t(n) * l.cin * h * h, ys = std::size_t(n) * l.cout * h * h,
                    ws = std::size_t(l.cout) * l.cin * 9;
  l.x = device_random(xs, 11, 0.f, 1.f);
  l.w = device_random(ws, 12, -0.1f, 0.1f);
  l.y = device_zeros(ys);
  l.dy = device_random(ys, 13, -0.01f, 0.01f);
  l.dx = device_zeros(xs);
  l.dw = device_zeros(ws);

  int max_count = 0, returned = 0, i = 0;
  CUDNN_OK(cudnnGetConvolutionForwardAlgorithmMaxCount(gpu.cudnn, &max_count));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> fwd(std::max(max_count, 1));
  CUDNN_OK(cudnnFindConvolutionForwardAlgorithm(gpu.cudnn, l.x_desc, l.w_desc, l.conv, l.y_desc, max_count,
                                                &returned, fwd.data()));
  if ((i = pick(fwd, returned, tf32)) < 0) {
    std::printf("# conv.%s: cuDNN found no %s forward algorithm\n", l.name, tf32 ? "TF32" : "exact FP32");
    return false;
  }
  l.fwd_algo = fwd[i].algo;
  l.fwd_math = tf32 ? fwd[i].mathType : CUDNN_FMA_MATH;
  l.workspace = std::max(l.workspace, fwd[i].memory);

  conv_math(l, requested);
  CUDNN_OK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(gpu.cudnn, &max_count));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> bwd_data(std::max(max_count, 1));
  CUDNN_OK(cudnnFindConvolutionBackwardDataAlgorithm(gpu.cudnn, l.w_desc, l.y_desc, l.conv, l.x_desc, max_count,
                                                     &returned, bwd_data.data()));
  if ((i = pick(bwd_data, returned, tf32)) < 0) {
    std::printf("# conv.%s: cuDNN found no %s backward-data algorithm\n", l.name, tf32 ? "TF32" : "exact FP32");
    return false;
  }
  l.bwd_data_algo = bwd_data[i].algo;
  l.bwd_data_math = tf32 ? bwd_data[i].mathType : CUDNN_FMA_MATH;
  l.workspace = std::max(l.workspace, bwd_data[i].memory);

  conv_math(l, requested);
  CUDNN_OK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(gpu.cudnn, &max_count));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> bwd_filter(std::max(max_count, 1));
  CUDNN_OK(cudnnFindConvolutionBackwardFilterAlgorithm(gpu.cudnn, l.x_desc, l.y_desc, l.conv, l.w_desc, max_count,
                                                       &returned, bwd_filter.data()));
  if ((i = pick(bwd_filter, returned, tf32)) < 0) {
    std::printf("# conv.%s: cuDNN found no %s backward-filter algorithm\n", l.name, tf32 ? "TF32" : "exact FP32");
    return false;
  }
  l.bwd_filter_algo = bwd_filter[i].algo;
  l.bwd_filter_math = tf32 ? bwd_filter[i].mathType : CUDNN_FMA_MATH;
  l.workspace = std::max(l.workspace, bwd_filter[i].memory);
  return true;
}

void teardown(ConvLayer& l) {
  for (float* p : {l.x, l.w, l.y, l.dy, l.dx, l.dw})
    if (p) CUDA_OK(cudaFree(p));
  if (l.x_desc) CUDNN_OK(cudnnDestroyTensorDescriptor(l.x_desc));
  if (l.y_desc) CUDNN_OK(cudnnDestroyTensorDescriptor(l.y_desc));
  if (l.w_desc) CUDNN_OK(cudnnDestroyFilterDescriptor(l.w_desc));
  if (l.conv) CUDNN_OK(cudnnDestroyConvolutionDescriptor(l.conv));
}

void conv(const Gpu& gpu, bool tf32) {
  const int batch = 64;
  std::vector<ConvLayer> layers = {
      {"c1", 1, 64, 28, false}, {"c2", 64, 64, 28, true}, {"c3", 64, 128, 14, true}, {"c4", 128, 128, 14, true}};
  bool ok = true;
  for (auto& l : layers) ok = ok && setup(gpu, l, batch, tf32);
  if (!ok) {
    for (auto& l : layers) teardown(l);
    return;
  }
  std::size_t workspace_bytes = 0;
  for (auto& l : layers) workspace_bytes = std::max(workspace_bytes, l.workspace);
  void* workspace = nullptr;
  if (workspace_bytes) CUDA_OK(cudaMalloc(&workspace, workspace_bytes));
  const float one = 1, zero = 0;
  // The math type of each call is set before it: the algorithm was found with it.
  auto forward = [&](ConvLayer& l) {
    conv_math(l, l.fwd_math);
    CUDNN_OK(cudnnConvolutionForward(gpu.cudnn, &one, l.x_desc, l.x, l.w_desc, l.w, l.conv, l.fwd_algo, workspace,
                                     workspace_bytes, &zero, l.y_desc, l.y));
  };
  auto backward_data = [&](ConvLayer& l) {
    conv_math(l, l.bwd_data_math);
    CUDNN_OK(cudnnConvolutionBackwardData(gpu.cudnn, &one, l.w_desc, l.w, l.y_desc, l.dy, l.conv, l.bwd_data_algo,
                                          workspace, workspace_bytes, &zero, l.x_desc, l.dx));
  };
  auto backward_filter = [&](ConvLayer& l) {
    conv_math(l, l.bwd_filter_math);
    CUDNN_OK(cudnnConvolutionBackwardFilter(gpu.cudnn, &one, l.x_desc, l.x, l.y_desc, l.dy, l.conv,
                                            l.bwd_filter_algo, workspace, workspace_bytes, &zero, l.w_desc, l.dw));
  };
  const int warmup = 5, iters = scaled(50), per_sample = 5;
  const std::string tags = "batch=64 per_sample=" + std::to_string(per_sample);
  double forward_flops = 0;
  for (auto& l : layers) {
    const double flops = 2.0 * batch * l.cin * l.cout * 9.0 * l.hw * l.hw;  // each of the three
    forward_flops += flops;
    const std::string shape = " cin=" + std::to_string(l.cin) + " cout=" + std::to_string(l.cout) +
                              " hw=" + std::to_string(l.hw);
    struct Pass {
      const char* name;
      int algo;
      cudnnMathType_t math;
      std::function<void()> run;
    };
    const Pass passes[] = {
        {"fwd", int(l.fwd_algo), l.fwd_math, [&] { forward(l); }},
        {"bwd_data", int(l.bwd_data_algo), l.bwd_data_math, [&] { backward_data(l); }},
        {"bwd_filter", int(l.bwd_filter_algo), l.bwd_filter_math, [&] { backward_filter(l); }},
    };
    for (const Pass& p : passes) {
      const Stats s = time_events(gpu, warmup, iters, per_sample, p.run);
      print_stats(gpu, std::string("conv.") + l.name + "." + p.name + suffix(tf32), tf32, tags + shape, s);
      std::printf(" algo=%d math=%s gflops=%.1f\n", p.algo, math_name(p.math), flops / (s.median_ms * 1e6));
    }
  }
  // The step's convolutions in the order a framework runs them.
  auto train = [&] {
    for (auto& l : layers) forward(l);
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
      backward_filter(*it);
      if (it->needs_input_grad) backward_data(*it);
    }
  };
  auto infer = [&] {
    for (auto& l : layers) forward(l);
  };
  // Backward data is skipped for c1: 3 x forward less c1's share.
  const double c1_flops = 2.0 * batch * 1 * 64 * 9.0 * 28 * 28;
  const double train_flops = 3 * forward_flops - c1_flops;
  Stats s = time_events(gpu, warmup, iters, per_sample, train);
  print_stats(gpu, "conv.train.convs" + suffix(tf32), tf32, tags, s);
  std::printf(" gflops=%.1f samples_per_s=%.0f\n", train_flops / (s.median_ms * 1e6), batch / (s.median_ms * 1e-3));
  s = time_events(gpu, warmup, iters, per_sample, infer);
  print_stats(gpu, "conv.infer.convs" + suffix(tf32), tf32, tags, s);
  std::printf(" gflops=%.1f samples_per_s=%.0f\n", forward_flops / (s.median_ms * 1e6), batch / (s.median_ms * 1e-3));
  std::fflush(stdout);
  if (workspace) CUDA_OK(cudaFree(workspace));
  for (auto& l : layers) teardown(l);
}

// BENCH_DEVICE: cuda:N (default cuda:0; "cpu" is not for this program). -1 when malformed.
int device_index() {
  const char* e = std::getenv("BENCH_DEVICE");
  if (e == nullptr || *e == '\0' || std::strcmp(e, "cuda") == 0) return 0;
  if (std::strncmp(e, "cuda:", 5) != 0) return -1;
  char* end = nullptr;
  const long v = std::strtol(e + 5, &end, 10);
  return end != e + 5 && *end == '\0' && v >= 0 ? static_cast<int>(v) : -1;
}

}  // namespace

int main() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    std::printf("# gpu_raw_bench: no CUDA device (%s): nothing measured\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "cudaGetDeviceCount found none");
    return 0;
  }
  Gpu gpu;
  gpu.index = device_index();
  if (gpu.index < 0 || gpu.index >= count) {
    std::fprintf(stderr, "gpu_raw_bench: BENCH_DEVICE=%s: expected cuda or cuda:N with N < %d\n",
                 std::getenv("BENCH_DEVICE"), count);
    return 1;
  }
  CUDA_OK(cudaSetDevice(gpu.index));
  CUDA_OK(cudaStreamCreateWithFlags(&gpu.stream, cudaStreamNonBlocking));
  CUBLAS_OK(cublasCreate(&gpu.cublas));
  CUBLAS_OK(cublasSetStream(gpu.cublas, gpu.stream));
  CUDNN_OK(cudnnCreate(&gpu.cudnn));
  CUDNN_OK(cudnnSetStream(gpu.cudnn, gpu.stream));
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, gpu.index));
  int cublas_version = 0;
  CUBLAS_OK(cublasGetVersion(gpu.cublas, &cublas_version));
  gpu.tags = "lib=raw device=cuda:" + std::to_string(gpu.index) + " gpu=" + kv(prop.name) +
             " cublas=" + std::to_string(cublas_version) + " cudnn=" + std::to_string(cudnnGetVersion());
  std::printf("# gpu_raw_bench: %s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount,
              prop.totalGlobalMem / double(1 << 30));
  std::printf("# start\n");
  std::fflush(stdout);

  bool ok = true;
  for (bool tf32 : {false, true}) {
    if (selected("gemm")) {
      ok &= gemm(gpu, 1024, tf32, 5, scaled(30), 20);
      ok &= gemm(gpu, 4096, tf32, 3, scaled(20), 2);
      ok &= gemm(gpu, 8192, tf32, 2, scaled(10), 1);
    }
    if (selected("mlp")) mlp(gpu, tf32);
    if (selected("conv")) conv(gpu, tf32);
  }
  CUDNN_OK(cudnnDestroy(gpu.cudnn));
  CUBLAS_OK(cublasDestroy(gpu.cublas));
  CUDA_OK(cudaStreamDestroy(gpu.stream));
  return ok ? 0 : 1;
}
