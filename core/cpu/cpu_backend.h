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
  void softmax_forward(const Tensor& x, std::int64_t rows, std::int64_t n, double scale, std::int64_t causal_queries,
                       Tensor& y) override;
  void softmax_backward(const Tensor& y, const Tensor& gy, std::int64_t rows, std::int64_t n, double scale,
                        Tensor& gx) override;
  bool runs_fused_attention(DType dtype) const override;  // f32 and f64 (attention.cc)
  void attention_forward(const AttentionGeometry& g, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                         Tensor& lse) override;
  void attention_backward(const AttentionGeometry& g, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor& gout, Tensor& gq, Tensor& gk,
                          Tensor& gv) override;
  void softmax_cross_entropy_forward(const Tensor& x, const Tensor& t, std::int64_t rows, std::int64_t n,
                                     std::int64_t ignore_label, Tensor& losses, Tensor& stats) override;
  void softmax_cross_entropy_backward(const Tensor& x, const Tensor& stats, const Tensor& t, const Tensor& coef,
                                      std::int64_t rows, std::int64_t n, std::int64_t ignore_label,
                                      Tensor& gx) override;
  void matmul(const Tensor& a, const Tensor& b, Tensor& out, std::int64_t batch, std::int64_t m,
              std::int64_t n, std::int64_t k, bool transpose_a, bool transpose_b, bool accumulate) override;
  bool runs_16bit_products(DType dtype) const override;  // bf16 where oneDNN runs it natively
  void copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst, const StridedView& dst_view,
                    const Shape& shape) override;

  // ---- optimizer kernels (optimizer.cc) ----
  void sgd_update(Tensor& param, const Tensor& grad, double lr) override;
  void momentum_sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, double lr, double momentum) override;
  void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& vhat,
                   const AdamStep& step) override;
  double sum_of_squares(const Tensor& x) override;
  void random_uniform(Tensor& out, std::uint64_t seed, double low, double high) override;  // random.cc

  // ---- convolution and pooling (conv.cc, pooling.cc) ----
  void im2col(const Tensor& x, const Conv2DGeometry& g, Tensor& col) override;
  void col2im(const Tensor& col, const Conv2DGeometry& g, Tensor& x) override;
  void conv2d_relu(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g, std::int64_t groups,
                   Tensor& y) override;
  // bf16 on oneDNN where runs_16bit_products, outside deterministic mode.
  bool runs_16bit_convolutions(DType dtype, const Conv2DGeometry& g, std::int64_t out_channels,
                               std::int64_t groups) const override;
  void conv2d(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g, std::int64_t groups,
              Tensor& y) override;
  void conv2d_grad_input(const Tensor& gy, const Tensor& W, const Conv2DGeometry& g, std::int64_t groups,
                         Tensor& gx) override;
  void conv2d_grad_weight(const Tensor& x, const Tensor& gy, const Conv2DGeometry& g, std::int64_t groups,
                          Tensor& gW) override;
  void max_pool2d(const Tensor& x, const Conv2DGeometry& g, Tensor& y, Tensor& indices) override;
  void max_pool2d_backward(const Tensor& gy, const Tensor& indices, const Conv2DGeometry& g, Tensor& gx) override;
  void avg_pool2d(const Tensor& x, const Conv2DGeometry& g, Tensor& y) override;
  void avg_pool2d_backward(const Tensor& gy, const Conv2DGeometry& g, Tensor& gx) override;

  // ---- embedding, recurrent and normalisation (indexing.cc, recurrent.cc, normalization.cc) ----
  void take_rows(const Tensor& table, const Tensor& ids, Tensor& out, bool has_ignore,
                 std::int64_t ignore_label) override;
  void index_add_rows(Tensor& table, const Tensor& ids, const Tensor& src, bool has_ignore,
                      std::int64_t ignore_label) override;
  void lstm_cell_forward(Tensor& gates, const Tensor& c_prev, Tensor& c, Tensor& h) override;
  void lstm_cell_backward(const Tensor& activations, const Tensor& c_prev, const Tensor& c, const Tensor& gh,
                          const Tensor& gc, Tensor& ggates, Tensor& gc_prev) override;
  bool lstm_recurrence_forward(const std::vector<std::int64_t>& batch_sizes, Tensor& gates, const Tensor& wh,
                               const Tensor& h0, const Tensor& c0, Tensor& hs, Tensor& cs) override;
  bool lstm_recurrence_backward(const std::vector<std::int64_t>& batch_sizes, const Tensor& activations,
                                const Tensor& cs, const Tensor& c0, const Tensor& wh, const Tensor& ghs, Tensor& dh,
                                Tensor& dc, Tensor& ggates) override;
  void batch_norm_stats(const Tensor& x, std::int64_t outer, std::int64_t channels, std::int64_t inner,
                        Tensor& mean, Tensor& var) override;
  void channel_affine(const Tensor& x, const Tensor& scale, const Tensor& z, const Tensor& zscale,
                      const Tensor& shift, std::int64_t outer, std::int64_t channels, std::int64_t inner,
                      Tensor& out) override;
  void batch_norm_backward_sums(const Tensor& gy, const Tensor& x, const Tensor& mean, std::int64_t outer,
                                std::int64_t channels, std::int64_t inner, Tensor& sum_gy,
                                Tensor& sum_gy_xmu) override;
  void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, std::int64_t rows,
                          std::int64_t n, double eps, Tensor& y, Tensor& mean, Tensor& rstd) override;
  void layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& rstd, std::int64_t rows, std::int64_t n, Tensor& gx, Tensor& ggamma,
                           Tensor& gbeta) override;

 private:
  // conv2d and conv2d_relu: oneDNN or im2col as measured, the ReLU a post-op on oneDNN's path.
  void conv2d_forward(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g, std::int64_t groups,
                      bool relu, Tensor& y);
};

CpuBackend& cpu_backend();

}  // namespace tandem
