// The CPU backend: Eigen for vectorised math and GEMM, OpenMP across cores where the work is
// large enough to pay for waking the threads.
#pragma once

#include "core/backend.h"

namespace tandem {

class CpuBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::cpu; }

  void* allocate(std::size_t nbytes, int device_index) override;
  void deallocate(void* ptr, std::size_t nbytes, int device_index) override;
  void copy_to_host(void* host_dst, const void* src, std::size_t nbytes, int device_index) override;
  void copy_from_host(void* dst, const void* host_src, std::size_t nbytes, int device_index) override;

  void fill(Tensor& out, double value) override;
  void cast(const Tensor& in, Tensor& out) override;
  void unary(UnaryOp op, const Tensor& in, Tensor& out, double p0, double p1) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) override;
  void reduce(ReduceOp op, const Tensor& in, std::int64_t outer, std::int64_t reduced, std::int64_t inner,
              Tensor& out) override;
  void matmul(const Tensor& a, const Tensor& b, Tensor& out, std::int64_t batch, std::int64_t m,
              std::int64_t n, std::int64_t k, bool transpose_a, bool transpose_b, bool accumulate) override;
  void copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst, const StridedView& dst_view,
                    const Shape& shape) override;

  // ---- optimizer kernels (optimizer.cc) ----
  void sgd_update(Tensor& param, const Tensor& grad, double lr) override;
  void momentum_sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, double lr, double momentum) override;
  void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& vhat,
                   const AdamStep& step) override;
  double sum_of_squares(const Tensor& x) override;

  // ---- convolution and pooling (conv.cc, pooling.cc) ----

  // ---- embedding, recurrent and normalisation (indexing.cc, recurrent.cc, normalization.cc) ----
};

CpuBackend& cpu_backend();

}  // namespace tandem
