// The device interface. A Backend owns memory on one kind of device and runs the kernels of
// every core operation there. The front-end operations (core/ops/) validate shapes, dtypes and
// devices once, allocate outputs and then call the backend of their operands' device, so the
// checks and error messages are identical on every device. The CPU backend (core/cpu/) is
// always present; cuda/ registers a CUDA backend at start-up when it is built.
//
// Kernels receive already validated tensors: outputs are allocated, contiguous and of the
// right shape and dtype. A kernel may assume that its inputs live on its device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace tandem {

class Tensor;

enum class UnaryOp {
  neg, exp, log, tanh, sigmoid, relu, sqrt, abs, square, sign,
  pow_scalar,   // x ** p0
  clip,         // min(max(x, p0), p1)
  leaky_relu,   // x if x > 0 else p0 * x
  scale_shift,  // p0 * x + p1
  rsub_scalar,  // p0 - x
  rdiv_scalar,  // p0 / x
};

enum class BinaryOp {
  add, sub, mul, div, pow, maximum, minimum,
  // Comparisons write a boolean output.
  eq, ne, lt, le, gt, ge,
};

enum class ReduceOp { sum, max, min, argmax, argmin };

// A strided view for copy kernels: the element at multi-index i is at
// data + (offset + sum_k i_k * strides[k]) * element_size. Strides may be 0 (broadcast).
struct StridedView {
  std::int64_t offset = 0;
  Shape strides;
};

// Hyperparameters of one Adam step, with the bias correction already folded into alpha_t.
struct AdamStep {
  double alpha_t = 0;  // alpha * sqrt(1 - beta2^t) / (1 - beta1^t)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, eta = 1.0, weight_decay_rate = 0;
  bool amsgrad = false;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;

  // Memory. Pointers are device pointers of the given device index.
  virtual void* allocate(std::size_t nbytes, int device_index) = 0;
  virtual void deallocate(void* ptr, std::size_t nbytes, int device_index) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t nbytes, int device_index) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, std::size_t nbytes, int device_index) = 0;

  // Element-wise kernels. For binary/where, inputs broadcast to out's shape (NumPy rules).
  virtual void fill(Tensor& out, double value) = 0;
  virtual void cast(const Tensor& in, Tensor& out) = 0;
  virtual void unary(UnaryOp op, const Tensor& in, Tensor& out, double p0, double p1) = 0;
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) = 0;

  // Reduces `in`, viewed as [outer, reduced, inner], over its middle axis into `out`, viewed as
  // [outer, inner]. argmax/argmin write i64 indices.
  virtual void reduce(ReduceOp op, const Tensor& in, std::int64_t outer, std::int64_t reduced,
                      std::int64_t inner, Tensor& out) = 0;

  // Batched matrix product out[b] = op(a[b]) @ op(b[b]) for b in [0, batch), where op transposes
  // when the flag is set. a holds batch_a in {1, batch} matrices of [m, k] ([k, m] transposed),
  // b holds batch_b in {1, batch} matrices of [k, n] ([n, k] transposed); a batch of 1 is
  // reused for every b. out is [batch, m, n]. When accumulate is set, out += product.
  virtual void matmul(const Tensor& a, const Tensor& b, Tensor& out, std::int64_t batch, std::int64_t m,
                      std::int64_t n, std::int64_t k, bool transpose_a, bool transpose_b,
                      bool accumulate) = 0;

  // Copies the elements of `shape` from a strided view of src's storage into a strided view of
  // dst's storage (same dtype). The one primitive behind permute, slicing, concat, split,
  // stack and broadcast_to.
  virtual void copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst,
                            const StridedView& dst_view, const Shape& shape) = 0;

  // ---- optimizer kernels (CPU: core/cpu/optimizer.cc): one fused pass per parameter ----
  virtual void sgd_update(Tensor& param, const Tensor& grad, double lr) = 0;
  // v = momentum * v - lr * g; p += v
  virtual void momentum_sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, double lr,
                                   double momentum) = 0;
  // Chainer's Adam step (see layers/optimizers/adam.h); vhat is used only when step.amsgrad.
  virtual void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& vhat,
                           const AdamStep& step) = 0;
  // Sum of squares of all elements, accumulated in double (gradient clipping).
  virtual double sum_of_squares(const Tensor& x) = 0;

  // ---- convolution and pooling kernels (CPU: core/cpu/conv.cc, core/cpu/pooling.cc) ----

  // ---- embedding, recurrent and normalisation kernels (CPU: core/cpu/indexing.cc,
  //      core/cpu/recurrent.cc, core/cpu/normalization.cc) ----
};

// The backend for a device type; throws naming OP when that device has no backend in this
// build (a CUDA tensor in a build without --config=cuda).
Backend& backend_for(const Device& device, const char* op);
// Called by cuda/ when it is linked in.
void register_backend(DeviceType type, Backend* backend);

}  // namespace tandem
