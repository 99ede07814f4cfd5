#include "autograd/functions/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/function_node.h"
#include "autograd/functions/arithmetic.h"
#include "autograd/functions/array.h"
#include "autograd/functions/linalg.h"
#include "autograd/functions/softmax.h"
#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/ops.h"

namespace tandem {
namespace functions {

namespace {

// The fused kernels (core/ops/attention.h) as one differentiable function of q, k and v: forward
// keeps q, k, v, the output and the per-query log-sum-exp, O(T) memory; backward recomputes the
// weights tile by tile.
class FusedAttention : public FunctionNode {
 public:
  FusedAttention(AttentionMask mask, double scale, AttentionDropout dropout)
      : mask_(std::move(mask)), scale_(scale), dropout_(dropout) {}
  std::string name() const override { return "attention"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    AttentionOutput result = fused_attention_forward(in[0], in[1], in[2], mask_, scale_, dropout_);
    save_for_backward({in[0], in[1], in[2], result.out, result.lse});
    return {result.out};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    const std::vector<Tensor>& s = saved();
    AttentionGradients g = fused_attention_backward(s[0], s[1], s[2], s[3], s[4], gy[0], mask_, scale_, dropout_);
    return {g.q, g.k, g.v};
  }

 private:
  AttentionMask mask_;
  double scale_;
  AttentionDropout dropout_;
};

const char* kAttention = "attention";

// The scale (1 / sqrt(d) unless given) and dropout (seed drawn from the generator, in train mode
// only) of a call, with q's shape checked enough to read d.
double scale_of(const Variable& q, const AttentionOptions& options) {
  TANDEM_CHECK(q.defined() && q.dim() == 4, kAttention, ": q must be [B, Hq, Tq, d], got ",
               q.defined() ? q.description() : std::string("undefined"));
  TANDEM_CHECK(options.scale >= 0, kAttention, ": the scale must be positive (0: 1 / sqrt(d)), got ", options.scale);
  const std::int64_t d = q.shape()[3];
  TANDEM_CHECK(options.scale > 0 || d > 0, kAttention, ": d = 0 (q ", q.description(), ")");
  return options.scale > 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(d));
}

AttentionDropout dropout_of(const AttentionOptions& options) {
  TANDEM_CHECK(options.dropout >= 0 && options.dropout < 1, kAttention, ": the dropout ratio must be in [0, 1), got ",
               options.dropout);
  AttentionDropout dropout;
  dropout.head_offset = options.head_offset;
  if (!train_mode() || options.dropout == 0) return dropout;
  dropout.ratio = options.dropout;
  dropout.seed = (options.generator ? *options.generator : global_generator()).next();
  return dropout;
}

}  // namespace

Variable attention(const Variable& q, const Variable& k, const Variable& v, const AttentionOptions& options) {
  const double scale = scale_of(q, options);
  return call<FusedAttention>({q, k, v}, options.mask, scale, dropout_of(options))[0];
}

Variable composed_attention(const Variable& q, const Variable& k, const Variable& v, const AttentionOptions& options) {
  const double scale = scale_of(q, options);
  const AttentionDropout dropout = dropout_of(options);
  TANDEM_CHECK(k.defined() && v.defined() && k.dim() == 4 && v.dim() == 4, kAttention,
               ": k [B, Hkv, Tk, d] and v [B, Hkv, Tk, dv] must have 4 axes");
  const std::int64_t B = q.shape()[0], Hq = q.shape()[1], Tq = q.shape()[2], Hkv = k.shape()[1], Tk = k.shape()[2];
  TANDEM_CHECK(Hkv > 0 && Hq % Hkv == 0, kAttention, ": q's heads (q ", q.description(),
               ") must be a multiple of k's (k ", k.description(), ")");
  const DType dtype = q.dtype();
  const Device device = q.device();
  // Each key/value head repeated for its group of query heads.
  const auto widen = [&](const Variable& t) {
    if (Hkv == Hq) return t;
    const Shape& s = t.shape();
    return reshape(broadcast_to(reshape(t, {s[0], s[1], 1, s[2], s[3]}), {s[0], s[1], Hq / Hkv, s[2], s[3]}),
                   {s[0], Hq, s[2], s[3]});
  };
  const Tensor visible = attention_visibility(options.mask, B, Tq, Tk).to(device);
  // Masked scores get a bias so large that their weight is exactly 0, then the weights are
  // multiplied by the mask, so a query that sees no key gets 0 (a -inf bias would give NaN).
  const Tensor zero = zeros({}, dtype, device), one = full({}, 1.0, dtype, device);
  const Variable bias(where(visible, zero, full({}, dtype == DType::f32 ? -1e30 : -1e300, dtype, device)));
  const Variable seen(where(visible, one, zero));
  const Variable scores = add(mul(matmul(q, widen(k), false, true), scale), bias);
  Variable weights = mul(softmax(scores, 3), seen);
  if (dropout.ratio > 0) {
    const AttentionMask& m = options.mask;
    const Tensor keep =
        attention_dropout_keep(dropout, B, Hq, m.query_start == -1 ? Tk - Tq : m.query_start, Tq, m.key_start, Tk)
            .to(device);
    weights = mul(weights, Variable(where(keep, full({}, 1 / (1 - dropout.ratio), dtype, device), zero)));
  }
  return matmul(weights, widen(v));
}

Variable scaled_dot_product_attention(const Variable& q, const Variable& k, const Variable& v, bool causal) {
  const char* op = "scaled_dot_product_attention";
  TANDEM_CHECK(q.defined() && k.defined() && v.defined(), op, ": q, k and v must be defined");
  TANDEM_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op, ": q ", q.description(), ", k ",
               k.description(), " and v ", v.description(), " must have the same number (>= 2) of axes");
  const std::size_t n = q.dim();
  for (std::size_t a = 0; a + 2 < n; ++a)
    TANDEM_CHECK(q.shape()[a] == k.shape()[a] && q.shape()[a] == v.shape()[a], op, ": leading axes differ: q ",
                 q.description(), ", k ", k.description(), ", v ", v.description());
  const std::int64_t tq = q.shape()[n - 2], d = q.shape()[n - 1], tk = k.shape()[n - 2];
  TANDEM_CHECK(k.shape()[n - 1] == d, op, ": q ", q.description(), " and k ", k.description(),
               " must have the same last axis (d)");
  TANDEM_CHECK(v.shape()[n - 2] == tk, op, ": v ", v.description(), " must have one row per key of k ",
               k.description());
  TANDEM_CHECK(!causal || tk >= tq, op, ": causal attention needs at least as many keys (", tk, ") as queries (", tq,
               ")");
  TANDEM_CHECK(d > 0, op, ": d = 0 (q ", q.description(), ")");
  // The leading axes as the batch, one head.
  std::int64_t batch = 1;
  for (std::size_t a = 0; a + 2 < n; ++a) batch *= q.shape()[a];
  const std::int64_t dv = v.shape()[n - 1];
  AttentionOptions options;
  options.mask.causal = causal;
  const Variable out =
      attention(reshape(q, {batch, 1, tq, d}), reshape(k, {batch, 1, tk, d}), reshape(v, {batch, 1, tk, dv}), options);
  Shape shape = q.shape();
  shape[n - 1] = dv;
  return reshape(out, shape);
}

Variable multi_head_self_attention(const Variable& qkv, std::int64_t heads, bool causal,
                                   const AttentionFunction& attend, std::int64_t head_offset) {
  const char* op = "multi_head_self_attention";
  TANDEM_CHECK(qkv.defined() && qkv.dim() == 3, op, ": qkv must be [B, T, heads * 3 * d], not ",
               qkv.defined() ? qkv.description() : std::string("undefined"));
  const std::int64_t B = qkv.shape()[0], T = qkv.shape()[1], features = qkv.shape()[2];
  TANDEM_CHECK(heads > 0 && features % (3 * heads) == 0 && features > 0, op, ": qkv ", qkv.description(),
               " does not hold ", heads, " head(s) of q, k and v: its last axis must be a positive multiple of 3 * ",
               heads);
  const std::int64_t d = features / (3 * heads);
  // [B, T, H, 3, d] -> [3, B, H, T, d]: q, k and v of every head as batched matrices.
  const Variable grouped = transpose(reshape(qkv, {B, T, heads, 3, d}), {3, 0, 2, 1, 4});
  const Variables parts = split_axis(grouped, 3, 0);
  const Variable q = reshape(parts[0], {B, heads, T, d}), k = reshape(parts[1], {B, heads, T, d}),
                 v = reshape(parts[2], {B, heads, T, d});
  AttentionOptions options;
  options.mask.causal = causal;
  options.head_offset = head_offset;
  const Variable out = attend ? attend(q, k, v, options) : attention(q, k, v, options);  // [B, H, T, d]
  return reshape(transpose(out, {0, 2, 1, 3}), {B, T, heads * d});
}

}  // namespace functions
}  // namespace tandem
