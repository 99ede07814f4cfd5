// cuda/cuda_check.h (status codes to tandem::Error) and cuda/cuda.h (is there a GPU?) on the
// host. The macros are exercised against stand-ins for the CUDA and cuBLAS status APIs, so the
// test needs no CUDA headers; cuda/cuda.h is checked in whatever build this is: without
// --config=cuda it must say "no GPU, build with --config=cuda", with it it must agree with
// the driver.
#include <catch2/catch.hpp>

#include <functional>
#include <string>

#include "core/error.h"
#include "cuda/cuda.h"
#include "cuda/cuda_check.h"

namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const tandem::Error& e) {
    return e.what();
  }
  return "";
}

// Stand-ins for the parts of the CUDA runtime and cuBLAS APIs that the macros use.
enum cudaError_t { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorInvalidValue = 1 };
int last_error_reads = 0;
cudaError_t pending_launch_error = cudaSuccess;
const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaErrorMemoryAllocation ? "out of memory" : e == cudaErrorInvalidValue ? "invalid argument" : "no error";
}
cudaError_t cudaGetLastError() {
  ++last_error_reads;
  const cudaError_t e = pending_launch_error;
  pending_launch_error = cudaSuccess;
  return e;
}
cudaError_t fake_malloc(bool fail) { return fail ? cudaErrorMemoryAllocation : cudaSuccess; }

enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 };
const char* cublasGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_INVALID_VALUE ? "CUBLAS_STATUS_INVALID_VALUE" : "CUBLAS_STATUS_SUCCESS";
}
cublasStatus_t fake_gemm(int m) { return m < 0 ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS; }

}  // namespace

TEST_CASE("status_message names the library, code, meaning, call and place") {
  const std::string message =
      tandem::cuda::status_message("CUDA", 2, "out of memory", "cudaMalloc(&ptr, nbytes)", "cuda/device_memory.cu", 31);
  REQUIRE(message == "CUDA error 2 (out of memory) in cudaMalloc(&ptr, nbytes) at cuda/device_memory.cu:31");
  // A library that has no string for a code still gives a readable message.
  REQUIRE(tandem::cuda::status_message("cuDNN", 9, nullptr, "cudnnCreate(&h)", "x.cu", 1) ==
          "cuDNN error 9 (unknown status) in cudnnCreate(&h) at x.cu:1");
}

TEST_CASE("throw_status throws tandem::Error with that message") {
  const std::string message =
      error_of([] { tandem::cuda::throw_status("NCCL", 3, "internal error", "ncclAllReduce(...)", "comm.cu", 7); });
  REQUIRE(message == "NCCL error 3 (internal error) in ncclAllReduce(...) at comm.cu:7");
}

TEST_CASE("TANDEM_CUDA_CHECK: success passes, failure throws naming the call as written and file:line") {
  last_error_reads = 0;
  REQUIRE_NOTHROW([] { TANDEM_CUDA_CHECK(fake_malloc(false)); }());
  REQUIRE(last_error_reads == 0);  // the happy path does not touch the error state

  const int line = __LINE__ + 1;
  const std::string message = error_of([] { TANDEM_CUDA_CHECK(fake_malloc(1 > 0)); });
  CHECK_THAT(message, Catch::StartsWith("CUDA error 2 (out of memory) in fake_malloc(1 > 0) at "));
  CHECK_THAT(message, Catch::EndsWith("tests/cuda/cuda_check_test.cc:" + std::to_string(line)));
  // The non-sticky error is cleared so that the next call starts clean.
  REQUIRE(last_error_reads == 1);
}

TEST_CASE("TANDEM_CUDA_CHECK_LAUNCH names the kernel") {
  REQUIRE_NOTHROW([] { TANDEM_CUDA_CHECK_LAUNCH("add_kernel"); }());
  pending_launch_error = cudaErrorInvalidValue;
  const std::string message = error_of([] { TANDEM_CUDA_CHECK_LAUNCH(std::string("binary_kernel<f32>")); });
  CHECK_THAT(message, Catch::StartsWith("CUDA error 1 (invalid argument) in launch of binary_kernel<f32> at "));
  CHECK_THAT(message, Catch::Contains("cuda_check_test.cc:"));
}

TEST_CASE("TANDEM_CUBLAS_CHECK names cuBLAS and its status string") {
  REQUIRE_NOTHROW([] { TANDEM_CUBLAS_CHECK(fake_gemm(3)); }());
  const std::string message = error_of([] { TANDEM_CUBLAS_CHECK(fake_gemm(-1)); });
  CHECK_THAT(message, Catch::StartsWith("cuBLAS error 7 (CUBLAS_STATUS_INVALID_VALUE) in fake_gemm(-1) at "));
}

TEST_CASE("cuda/cuda.h agrees with the build: no CUDA means no device and a pointer to --config=cuda") {
  if (tandem::cuda::built_with_cuda()) {
    // --config=cuda: the answer comes from the driver. Either a device is there and nothing
    // is unavailable, or there is none and the reason says why (cudaGetDeviceCount's error).
    const int count = tandem::cuda::device_count();
    REQUIRE(count >= 0);
    INFO("unavailable_reason: " << tandem::cuda::unavailable_reason());
    REQUIRE(tandem::cuda::unavailable_reason().empty() == (count > 0));
    const std::string missing = error_of([&] { tandem::cuda::require_device(count, "Tensor::to(cuda:N)"); });
    CHECK_THAT(missing, Catch::Contains("Tensor::to(cuda:N)"));
    if (count > 0) {
      CHECK_THAT(missing, Catch::Contains("there is no device cuda:" + std::to_string(count)));
      REQUIRE_NOTHROW(tandem::cuda::require_device(0, "test"));
    } else {
      CHECK_THAT(missing, Catch::Contains("no CUDA device"));
      CHECK_THAT(missing, Catch::Contains(tandem::cuda::unavailable_reason()));
    }
    const std::string negative = error_of([] { tandem::cuda::require_device(-1, "pure_nccl"); });
    CHECK_THAT(negative, Catch::Contains("pure_nccl"));
  } else {
    REQUIRE(tandem::cuda::device_count() == 0);
    CHECK_THAT(tandem::cuda::unavailable_reason(), Catch::Contains("--config=cuda"));
    const std::string message = error_of([] { tandem::cuda::require_device(0, "Tensor::to(cuda:0)"); });
    CHECK_THAT(message, Catch::Contains("Tensor::to(cuda:0)"));
    CHECK_THAT(message, Catch::Contains("--config=cuda"));
    // Everything that needs a device says so instead of doing nothing.
    CHECK_THAT(error_of([] { tandem::cuda::synchronize(0); }), Catch::Contains("cuda::synchronize"));
    CHECK_THAT(error_of([] { tandem::cuda::memory_stats(0); }), Catch::Contains("cuda::memory_stats"));
    CHECK_THAT(error_of([] { tandem::cuda::empty_cache(0); }), Catch::Contains("cuda::empty_cache"));
    CHECK_THAT(error_of([] { tandem::cuda::empty_cache(0); }), Catch::Contains("--config=cuda"));
    // TF32 cannot be turned on where there is no cuBLAS.
    tandem::cuda::set_allow_tf32(true);
    REQUIRE_FALSE(tandem::cuda::allow_tf32());
  }
}

TEST_CASE("without a device, the runtime functions that need one throw instead of crashing") {
  if (tandem::cuda::device_count() > 0) return;  // covered by the GPU tests
  CHECK_THAT(error_of([] { tandem::cuda::synchronize(0); }), Catch::Contains("no CUDA device"));
  CHECK_THAT(error_of([] { tandem::cuda::memory_stats(0); }), Catch::Contains("no CUDA device"));
  CHECK_THAT(error_of([] { tandem::cuda::empty_cache(0); }), Catch::Contains("no CUDA device"));
}
