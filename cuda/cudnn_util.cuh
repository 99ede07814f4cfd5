// Owning wrappers of cuDNN's legacy descriptors (created on construction, destroyed with the
// object, never copied) and the per-dtype constants every cuDNN call needs.
#pragma once

#include <cudnn.h>

#include <climits>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda/cuda_check.h"

namespace tandem {
namespace cuda {

// The cuDNN data type of a tandem floating dtype; throws naming OP for any other.
inline cudnnDataType_t cudnn_data_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    default:
      TANDEM_FAIL(op, ": dtype ", dtype_name(dtype), " is not supported (needs f32 or f64)");
  }
}

// cuDNN's alpha and beta point to a double for double data and to a float otherwise.
struct CudnnScalars {
  float f32_alpha, f32_beta;
  double f64_alpha, f64_beta;
  cudnnDataType_t type;
  CudnnScalars(cudnnDataType_t data_type, double alpha, double beta)
      : f32_alpha(static_cast<float>(alpha)),
        f32_beta(static_cast<float>(beta)),
        f64_alpha(alpha),
        f64_beta(beta),
        type(data_type) {}
  const void* alpha() const { return type == CUDNN_DATA_DOUBLE ? static_cast<const void*>(&f64_alpha) : &f32_alpha; }
  const void* beta() const { return type == CUDNN_DATA_DOUBLE ? static_cast<const void*>(&f64_beta) : &f32_beta; }
};

// A size as cuDNN's int, or an error naming OP and WHAT when it does not fit.
inline int cudnn_int(std::int64_t value, const char* op, const char* what) {
  TANDEM_CHECK(value >= 0 && value <= INT_MAX, op, ": ", what, " = ", value, " exceeds cuDNN's int range");
  return static_cast<int>(value);
}

class CudnnTensorDescriptor {
 public:
  CudnnTensorDescriptor() { TANDEM_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_)); }
  ~CudnnTensorDescriptor() { (void)cudnnDestroyTensorDescriptor(desc_); }
  CudnnTensorDescriptor(const CudnnTensorDescriptor&) = delete;
  CudnnTensorDescriptor& operator=(const CudnnTensorDescriptor&) = delete;

  // A contiguous NCHW tensor.
  void set_nchw(cudnnDataType_t type, int n, int c, int h, int w) {
    TANDEM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc_, CUDNN_TENSOR_NCHW, type, n, c, h, w));
  }
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

class CudnnFilterDescriptor {
 public:
  CudnnFilterDescriptor() { TANDEM_CUDNN_CHECK(cudnnCreateFilterDescriptor(&desc_)); }
  ~CudnnFilterDescriptor() { (void)cudnnDestroyFilterDescriptor(desc_); }
  CudnnFilterDescriptor(const CudnnFilterDescriptor&) = delete;
  CudnnFilterDescriptor& operator=(const CudnnFilterDescriptor&) = delete;

  // A contiguous [out_channels, in_channels_per_group, kh, kw] filter.
  void set_kcrs(cudnnDataType_t type, int k, int c, int h, int w) {
    TANDEM_CUDNN_CHECK(cudnnSetFilter4dDescriptor(desc_, type, CUDNN_TENSOR_NCHW, k, c, h, w));
  }
  cudnnFilterDescriptor_t get() const { return desc_; }

 private:
  cudnnFilterDescriptor_t desc_ = nullptr;
};

class CudnnConvolutionDescriptor {
 public:
  CudnnConvolutionDescriptor() { TANDEM_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc_)); }
  ~CudnnConvolutionDescriptor() { (void)cudnnDestroyConvolutionDescriptor(desc_); }
  CudnnConvolutionDescriptor(const CudnnConvolutionDescriptor&) = delete;
  CudnnConvolutionDescriptor& operator=(const CudnnConvolutionDescriptor&) = delete;

  cudnnConvolutionDescriptor_t get() const { return desc_; }

 private:
  cudnnConvolutionDescriptor_t desc_ = nullptr;
};

}  // namespace cuda
}  // namespace tandem
