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
#include <vector>

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
  gelu,         // GELU's tanh form: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
};

enum class BinaryOp {
  add, sub, mul, div, pow, maximum, minimum,
  relu_grad,  // relu_grad(gy, y) = y > 0 ? gy : 0: ReLU's backward in one pass
  gelu_grad,  // gelu_grad(gy, x) = gy * gelu'(x) (the tanh form's derivative): GELU's backward in one pass
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

// The geometry of a 2-D sliding window (convolution, pooling) over images [N, C, H, W]: output
// pixel (oy, ox) reads input rows oy * stride_y - pad_y + ky * dilate_y for ky in [0, kernel_h),
// and likewise for columns. Front ends fill it in and validate it (core/ops/conv.h).
struct Conv2DGeometry {
  std::int64_t batch = 0, channels = 0, height = 0, width = 0;
  std::int64_t kernel_h = 1, kernel_w = 1;
  std::int64_t stride_y = 1, stride_x = 1;
  std::int64_t pad_y = 0, pad_x = 0;
  std::int64_t dilate_y = 1, dilate_x = 1;
  std::int64_t out_h = 0, out_w = 0;
};

// Hyperparameters of one Adam step, with the bias correction already folded into alpha_t.
struct AdamStep {
  double alpha_t = 0;  // alpha * sqrt(1 - beta2^t) / (1 - beta1^t)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, eta = 1.0, weight_decay_rate = 0;
  bool amsgrad = false;
};

// The packed, time-major batch of a fused LSTM (Backend::lstm_sequence_forward): B sequences
// sorted by decreasing length (every one at least 1 long), step t holding one row per sequence
// still running, the sequences in that order; N rows in all.
struct LstmSequenceShape {
  std::int64_t layers = 0, hidden = 0, input_size = 0;
  std::vector<std::int64_t> lengths;  // per sequence, decreasing
};

// A fused attention's problem (Backend::attention_forward), validated by the front end
// (core/ops/attention.h, whose AttentionMask and AttentionDropout say what each field means).
// q [batch, query_heads, tq, d], k [batch, kv_heads, tk, d], v [batch, kv_heads, tk, dv],
// contiguous; query_heads a multiple of kv_heads; query_start and key_start resolved (>= 0).
// Segment ids, when used, are i64 [batch, tq] and [batch, tk] on the kernel's device.
struct AttentionGeometry {
  std::int64_t batch = 0, query_heads = 0, kv_heads = 0, tq = 0, tk = 0, d = 0, dv = 0;
  double scale = 1;
  bool causal = false;
  std::int64_t window = 0;
  std::int64_t query_start = 0, key_start = 0;
  const Tensor* query_segments = nullptr;
  const Tensor* key_segments = nullptr;
  double dropout = 0;
  std::uint64_t seed = 0;
  std::int64_t head_offset = 0;
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

  // Softmax over each row of x viewed as [rows, n] (rows, n > 0: the front end, core/ops/softmax.h,
  // handles the rest), of scale * x, optionally under a causal mask: with causal_queries = tq > 0
  // row r is query q = r % tq of a [tq, n] score matrix and sees keys j <= q + n - tq only; the
  // others get exactly 0. Fused because attention's scaling, mask and softmax were six passes
  // over its scores forward and five backward. The defaults (core/ops/softmax.cc) compose the
  // front-end operations, for a backend without the kernels; CPU and CUDA override them.
  virtual void softmax_forward(const Tensor& x, std::int64_t rows, std::int64_t n, double scale,
                               std::int64_t causal_queries, Tensor& y);
  // gx = scale * y * (gy - sum over the row of gy * y), from forward's y (masked entries stay 0).
  virtual void softmax_backward(const Tensor& y, const Tensor& gy, std::int64_t rows, std::int64_t n, double scale,
                                Tensor& gx);

  // Fused attention (core/ops/attention.h): whether this backend runs it for the dtype, and the
  // kernels. forward writes out [batch, query_heads, tq, dv] (q's dtype) and lse [batch,
  // query_heads, tq] (q's dtype; -inf for a query that sees no key); backward writes gq, gk, gv
  // (overwritten) from q, k, v, forward's out and lse, and gout. Backends without them answer false
  // and F::attention composes the reference instead.
  virtual bool runs_fused_attention(DType dtype) const { return false; }
  virtual void attention_forward(const AttentionGeometry& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                 Tensor& out, Tensor& lse);
  virtual void attention_backward(const AttentionGeometry& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const Tensor& gout, Tensor& gq, Tensor& gk,
                                  Tensor& gv);

  // Softmax cross-entropy over each row of x [rows, n] against labels t [rows] (i32/i64, each in
  // [0, n) or ignore_label: the front end, core/ops/cross_entropy.h, has checked them):
  // stats[0][r] = m = max_j x[r, j], stats[1][r] = log(sum_j exp(x[r, j] - m)), and
  // losses[r] = stats[1][r] - (x[r, t[r]] - m), exactly 0 where t[r] == ignore_label. Fused
  // because the composition was twelve passes over the scores. Defaults compose the front end.
  virtual void softmax_cross_entropy_forward(const Tensor& x, const Tensor& t, std::int64_t rows, std::int64_t n,
                                             std::int64_t ignore_label, Tensor& losses, Tensor& stats);
  // gx[r, j] = coef * (exp(x[r, j] - m - stats[1][r]) - [j == t[r]]), rows of ignored labels 0;
  // coef holds one value (every row) or one per row.
  virtual void softmax_cross_entropy_backward(const Tensor& x, const Tensor& stats, const Tensor& t,
                                              const Tensor& coef, std::int64_t rows, std::int64_t n,
                                              std::int64_t ignore_label, Tensor& gx);

  // Batched matrix product out[b] = op(a[b]) @ op(b[b]) for b in [0, batch), where op transposes
  // when the flag is set. a holds batch_a in {1, batch} matrices of [m, k] ([k, m] transposed),
  // b holds batch_b in {1, batch} matrices of [k, n] ([n, k] transposed); a batch of 1 is
  // reused for every b. out is [batch, m, n]. When accumulate is set, out += product.
  virtual void matmul(const Tensor& a, const Tensor& b, Tensor& out, std::int64_t batch, std::int64_t m,
                      std::int64_t n, std::int64_t k, bool transpose_a, bool transpose_b,
                      bool accumulate) = 0;
  // Whether matmul runs products of this 16-bit dtype itself (f32 sums, each result rounded once
  // to the dtype); otherwise the ops widen such operands to f32 (core/ops/half_compute.h).
  virtual bool runs_16bit_products(DType dtype) const { return false; }

  // Copies the elements of `shape` from a strided view of src's storage into a strided view of
  // dst's storage (same dtype). The one primitive behind permute, slicing, concat, split,
  // stack and broadcast_to.
  virtual void copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst,
                            const StridedView& dst_view, const Shape& shape) = 0;

  // out = xs joined along `axis` (checked by the caller: same dtype and device, matching
  // shapes, out contiguous of the joined shape). The default copies one input at a time with
  // copy_strided; the CUDA backend joins up to 64 inputs per kernel, since a batch of 64
  // sequences made each concat 64 launches (cuda/concat.cu).
  virtual void concat(const std::vector<Tensor>& xs, int axis, Tensor& out);

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

  // ---- random numbers (CPU: core/cpu/random.cc) ----
  // out[i] = element i of the Philox uniform stream `seed` on [low, high) (core/philox.h): the
  // same numbers on every device. out is f32 or f64.
  virtual void random_uniform(Tensor& out, std::uint64_t seed, double low, double high) = 0;

  // ---- convolution and pooling kernels (CPU: core/cpu/conv.cc, core/cpu/pooling.cc) ----

  // All of them view their images as [N, C, H, W] (contiguous) and take the window geometry,
  // already validated, from a Conv2DGeometry. Positions in the zero padding read as 0 (conv,
  // average pooling) or are skipped (max pooling).

  // col[n, (c * kernel_h + ky) * kernel_w + kx, oy * out_w + ox] =
  //   x[n, c, oy * stride_y - pad_y + ky * dilate_y, ox * stride_x - pad_x + kx * dilate_x]
  // for x [N, C, H, W] and col [N, C * kernel_h * kernel_w, out_h * out_w].
  virtual void im2col(const Tensor& x, const Conv2DGeometry& g, Tensor& col) = 0;
  // The adjoint of im2col: x = sum of every col entry into the input element it was read from
  // (overlapping windows accumulate; entries read from the padding are dropped). x is
  // overwritten, not added to.
  virtual void col2im(const Tensor& col, const Conv2DGeometry& g, Tensor& x) = 0;

  // Whether the conv2d family runs this 16-bit dtype itself for the geometry (f32 sums, each
  // result rounded once); otherwise the ops widen such operands to f32 (core/ops/half_compute.h).
  virtual bool runs_16bit_convolutions(DType dtype, const Conv2DGeometry& g, std::int64_t out_channels,
                                       std::int64_t groups) const {
    return false;
  }

  // Convolution of x [N, C, H, W] (geometry g, g.channels = C) with W [O, C / groups, kernel_h,
  // kernel_w] into y [N, O, out_h, out_w], plus b [O] when b is defined: y is overwritten.
  virtual void conv2d(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g,
                      std::int64_t groups, Tensor& y) = 0;
  // The same, then y = max(y, 0). The default runs the two in turn (the ReLU in place); the CPU
  // backend's oneDNN path applies it inside the convolution (a post-op: no second pass over y).
  virtual void conv2d_relu(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g,
                           std::int64_t groups, Tensor& y);
  // gx [N, C, H, W] = the input gradient of that convolution for gy [N, O, out_h, out_w] (overwritten).
  virtual void conv2d_grad_input(const Tensor& gy, const Tensor& W, const Conv2DGeometry& g, std::int64_t groups,
                                 Tensor& gx) = 0;
  // gW [O, C / groups, kernel_h, kernel_w] = its weight gradient, summed over the batch (overwritten).
  virtual void conv2d_grad_weight(const Tensor& x, const Tensor& gy, const Conv2DGeometry& g, std::int64_t groups,
                                  Tensor& gW) = 0;

  // Max pooling: y [N, C, out_h, out_w] holds the window maxima, indices (i64, same shape)
  // where each came from as iy * W + ix within its input plane (the first maximum in window
  // order). A window that lies entirely in the padding yields -inf and index -1. `indices` is
  // undefined when no gradient will be taken (inference): only y is written.
  virtual void max_pool2d(const Tensor& x, const Conv2DGeometry& g, Tensor& y, Tensor& indices) = 0;
  // gx = 0, then gx[n, c, indices[n, c, o]] += gy[n, c, o]; index -1 is skipped.
  virtual void max_pool2d_backward(const Tensor& gy, const Tensor& indices, const Conv2DGeometry& g,
                                   Tensor& gx) = 0;
  // Average pooling as in Chainer: the sum over the window's elements inside the input divided
  // by kernel_h * kernel_w (padding counts as zeros).
  virtual void avg_pool2d(const Tensor& x, const Conv2DGeometry& g, Tensor& y) = 0;
  // gx = the adjoint of avg_pool2d applied to gy (gx is overwritten).
  virtual void avg_pool2d_backward(const Tensor& gy, const Conv2DGeometry& g, Tensor& gx) = 0;

  // ---- embedding, recurrent and normalisation kernels (CPU: core/cpu/indexing.cc,
  //      core/cpu/recurrent.cc, core/cpu/normalization.cc) ----

  // Row gather: out[i, :] = table[ids[i], :] for the n = ids.numel() ids (i32 or i64, any shape)
  // of a [V, D] table; out is [n, D]. Rows whose id equals ignore_label (when has_ignore) are
  // zero. The front end has checked every other id against [0, V).
  virtual void take_rows(const Tensor& table, const Tensor& ids, Tensor& out, bool has_ignore,
                         std::int64_t ignore_label) = 0;
  // Row scatter-add: table[ids[i], :] += src[i, :] for src [n, D], accumulating repeated ids
  // (deterministically); rows whose id equals ignore_label (when has_ignore) are skipped.
  virtual void index_add_rows(Tensor& table, const Tensor& ids, const Tensor& src, bool has_ignore,
                              std::int64_t ignore_label) = 0;

  // Fused LSTM cell over B rows of H units. gates [B, 4H] holds per row the gate blocks i
  // (input), f (forget), a (cell input), o (output), H wide each: the pre-activations on entry,
  // sigmoid(i), sigmoid(f), tanh(a), sigmoid(o) on return. Writes c = f * c_prev + i * a and
  // h = o * tanh(c) ([B, H], like c_prev).
  virtual void lstm_cell_forward(Tensor& gates, const Tensor& c_prev, Tensor& c, Tensor& h) = 0;
  // Its backward, from the activations, c_prev and c of the forward and the gradients gh and gc
  // of h and c: writes the pre-activation gradient into ggates [B, 4H] and the gradient of
  // c_prev into gc_prev, which may be gc itself.
  virtual void lstm_cell_backward(const Tensor& activations, const Tensor& c_prev, const Tensor& c,
                                  const Tensor& gh, const Tensor& gc, Tensor& ggates, Tensor& gc_prev) = 0;

  // One LSTM layer's recurrence over a packed, time-major batch as one kernel, where the device
  // has one (the CPU backend on two or more threads: core/cpu/lstm_recurrence.cc); returns false,
  // touching nothing, where it has none, and the caller runs the cell-by-cell loop
  // (core/ops/recurrent.cc, the reference). Step t holds rows [offset_t, offset_t +
  // batch_sizes[t]), batch_sizes decreasing; every tensor is contiguous, of one floating dtype.
  // forward: gates [N, 4H] holds each row's input projection (bias included) and on return its
  // activations; for every step, gates_t += h_{t-1} wh^T ([4H, H]) and then the cell, h_{-1} and
  // c_{-1} being the first rows of h0, c0 [B, H]; writes hs and cs [N, H].
  virtual bool lstm_recurrence_forward(const std::vector<std::int64_t>& batch_sizes, Tensor& gates, const Tensor& wh,
                                       const Tensor& h0, const Tensor& c0, Tensor& hs, Tensor& cs);
  // Its backward, from the last step to the first: dh_t (the first batch_sizes[t] rows of dh
  // [B, H]) += ghs_t, the cell's backward writes ggates_t and turns dc_t into the gradient of
  // c_{t-1}, and dh_t becomes ggates_t wh, the gradient of h_{t-1}. dh and dc enter holding the
  // gradients of the final states and leave holding those of h0 and c0.
  virtual bool lstm_recurrence_backward(const std::vector<std::int64_t>& batch_sizes, const Tensor& activations,
                                        const Tensor& cs, const Tensor& c0, const Tensor& wh, const Tensor& ghs,
                                        Tensor& dh, Tensor& dc, Tensor& ggates);

  // A whole multi-layer LSTM (n_step_lstm without dropout) in one call, on devices that have a
  // fused one (the CUDA backend: cuDNN's RNN, as PyTorch's nn.LSTM); the cell-by-cell path
  // above is the reference and the fallback. Unlike the other kernels these allocate their
  // outputs, whose layout only the backend knows. The batch is packed time-major (see
  // LstmSequenceShape); `weights` holds per layer l ws[l][0..7] then bs[l][0..7] at 16 l + j
  // (n_step_lstm's order: input side i, f, a, o, then the hidden side). forward returns false,
  // touching nothing, when the backend has no fused LSTM for these arguments; otherwise y
  // [N, H] (the top layer's h at every row of x), hy and cy [L, B, H], and two opaque tensors for
  // backward: the backend's packed weights and (training only) its reserve.
  virtual bool lstm_sequence_forward(const LstmSequenceShape& shape, const Tensor& x, const Tensor& hx,
                                     const Tensor& cx, const std::vector<Tensor>& weights, bool training,
                                     Tensor& y, Tensor& hy, Tensor& cy, Tensor& packed_weights, Tensor& reserve);
  // Its backward (only after a training forward that returned true): gx [N, in], ghx and gcx
  // [L, B, H] and, when weight_grads, one gradient per tensor of `weights` in its shape. It may
  // overwrite `reserve` unless keep_reserve (another backward will use it).
  virtual void lstm_sequence_backward(const LstmSequenceShape& shape, const Tensor& x, const Tensor& hx,
                                      const Tensor& cx, const Tensor& packed_weights, const Tensor& reserve,
                                      bool keep_reserve, const Tensor& y, const Tensor& gy, const Tensor& ghy,
                                      const Tensor& gcy, bool weight_grads, Tensor& gx, Tensor& ghx, Tensor& gcx,
                                      std::vector<Tensor>& gweights);

  // Batch normalisation over x viewed as [outer, channels, inner]; per-channel tensors are
  // [channels] of x's dtype. Mean and biased variance of each channel over outer and inner.
  virtual void batch_norm_stats(const Tensor& x, std::int64_t outer, std::int64_t channels,
                                std::int64_t inner, Tensor& mean, Tensor& var) = 0;
  // out = x * scale[c] + shift[c], plus z * zscale[c] when z is defined (z shaped like x).
  virtual void channel_affine(const Tensor& x, const Tensor& scale, const Tensor& z, const Tensor& zscale,
                              const Tensor& shift, std::int64_t outer, std::int64_t channels,
                              std::int64_t inner, Tensor& out) = 0;
  // Per channel: sum_gy[c] = sum of gy, sum_gy_xmu[c] = sum of gy * (x - mean[c]).
  virtual void batch_norm_backward_sums(const Tensor& gy, const Tensor& x, const Tensor& mean,
                                        std::int64_t outer, std::int64_t channels, std::int64_t inner,
                                        Tensor& sum_gy, Tensor& sum_gy_xmu) = 0;

  // Layer normalisation over x viewed as [rows, n] (rows > 0, n > 0: the front end handles empty
  // inputs): each row is normalised over its n features. gamma and beta are [n], mean and rstd
  // [rows], all of x's dtype. Fused, because composing it from broadcasting element-wise ops and
  // reductions took a large share of a transformer's training step on the CPU (docs/performance.md,
  // "Costs outside the products").
  // The defaults (core/ops/normalization.cc) compose it from the front-end operations, for a
  // backend without fused kernels (tests/comm's stand-in device); CPU and CUDA override them.
  //
  // Forward: per row the mean and rstd = 1 / sqrt(var + eps) (biased variance), kept for
  // backward, and y = (x - mean) * rstd * gamma + beta.
  virtual void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, std::int64_t rows,
                                  std::int64_t n, double eps, Tensor& y, Tensor& mean, Tensor& rstd);
  // Backward from forward's mean and rstd, with xhat = (x - mean) * rstd and g = gy * gamma:
  // gbeta = sum over rows of gy, ggamma = sum over rows of gy * xhat ([n] each), and
  // gx = rstd * (g - mean_n(g) - xhat * mean_n(g * xhat)) ([rows, n]). All three are overwritten.
  virtual void layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                   const Tensor& rstd, std::int64_t rows, std::int64_t n, Tensor& gx,
                                   Tensor& ggamma, Tensor& gbeta);
};

// The backend for a device type; throws naming OP when that device has no backend in this
// build (a CUDA tensor in a build without --config=cuda).
Backend& backend_for(const Device& device, const char* op);
// Called by cuda/ when it is linked in.
void register_backend(DeviceType type, Backend* backend);
// The CPU backend, built in (core/cpu/cpu_backend.cc; //core links it always).
Backend& builtin_cpu_backend();

}  // namespace tandem
