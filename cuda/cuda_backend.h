// The CUDA backend: tandem's core operations on NVIDIA GPUs. Element-wise kernels, reductions
// and the fused kernels are tandem's own; products run on cuBLAS and convolutions on cuDNN.
// Everything a device does is queued on its one stream (cuda/device_context.h); the host waits
// only where a value must come back (copy_to_host, sum_of_squares).
//
// The members are defined by kernel family: memory and copies in backend.cu, element-wise and
// strided copies in elementwise.cu, reductions in reduce.cu, products in matmul.cu, optimizer
// updates in optimizer.cu, and so on as named below. The instance registers itself with
// core/backend.h when the library is linked (registration.cu).
#pragma once

#include "core/backend.h"

namespace tandem {
namespace cuda {

class CudaBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::cuda; }

  // ---- memory and copies (backend.cu) ----
  void* allocate(std::size_t nbytes, int device_index) override;
  void deallocate(void* ptr, std::size_t nbytes, int device_index) override;
  void copy_to_host(void* host_dst, const void* src, std::size_t nbytes, int device_index) override;
  void copy_from_host(void* dst, const void* host_src, std::size_t nbytes, int device_index) override;

  // ---- element-wise, broadcasting and strided copies (elementwise.cu, copy.cu), reductions
  //      (reduce.cu), products (matmul.cu) ----
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
  void matmul(const Tensor& a, const Tensor& b, Tensor& out, std::int64_t batch, std::int64_t m,
              std::int64_t n, std::int64_t k, bool transpose_a, bool transpose_b, bool accumulate) override;
  void copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst, const StridedView& dst_view,
                    const Shape& shape) override;
  void concat(const std::vector<Tensor>& xs, int axis, Tensor& out) override;  // concat.cu

  // ---- optimizer kernels (optimizer.cu) ----
  void sgd_update(Tensor& param, const Tensor& grad, double lr) override;
  void momentum_sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, double lr, double momentum) override;
  void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& vhat,
                   const AdamStep& step) override;
  double sum_of_squares(const Tensor& x) override;
  void random_uniform(Tensor& out, std::uint64_t seed, double low, double high) override;  // random.cu

  // ---- convolution (conv.cu, cuDNN; im2col.cu) and pooling (pooling.cu) ----
  void im2col(const Tensor& x, const Conv2DGeometry& g, Tensor& col) override;
  void col2im(const Tensor& col, const Conv2DGeometry& g, Tensor& x) override;
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

  // ---- embedding, recurrent and normalisation (indexing.cu, recurrent.cu, normalization.cu) ----
  void take_rows(const Tensor& table, const Tensor& ids, Tensor& out, bool has_ignore,
                 std::int64_t ignore_label) override;
  void index_add_rows(Tensor& table, const Tensor& ids, const Tensor& src, bool has_ignore,
                      std::int64_t ignore_label) override;
  void lstm_cell_forward(Tensor& gates, const Tensor& c_prev, Tensor& c, Tensor& h) override;
  void lstm_cell_backward(const Tensor& activations, const Tensor& c_prev, const Tensor& c, const Tensor& gh,
                          const Tensor& gc, Tensor& ggates, Tensor& gc_prev) override;
  // rnn.cu: the whole LSTM on cuDNN's RNN API
  bool lstm_sequence_forward(const LstmSequenceShape& shape, const Tensor& x, const Tensor& hx, const Tensor& cx,
                             const std::vector<Tensor>& weights, bool training, Tensor& y, Tensor& hy, Tensor& cy,
                             Tensor& packed_weights, Tensor& reserve) override;
  void lstm_sequence_backward(const LstmSequenceShape& shape, const Tensor& x, const Tensor& hx, const Tensor& cx,
                              const Tensor& packed_weights, const Tensor& reserve, bool keep_reserve, const Tensor& y,
                              const Tensor& gy, const Tensor& ghy, const Tensor& gcy, bool weight_grads, Tensor& gx,
                              Tensor& ghx, Tensor& gcx, std::vector<Tensor>& gweights) override;
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
};

CudaBackend& backend();

// The inverse of concat for 1-D pieces (concat.cu): outs[i] (contiguous, any shape) receives
// the next outs[i].numel() elements of `src`, in one launch per 64 pieces.
struct DeviceContext;
void split_flat(const DeviceContext& ctx, const Tensor& src, std::vector<Tensor>& outs);

}  // namespace cuda
}  // namespace tandem
