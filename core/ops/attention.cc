#include "core/ops/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/attention_dropout.h"
#include "core/backend.h"
#include "core/ops/checks.h"
#include "core/ops/elementwise.h"
#include "core/ops/half_compute.h"
#include "core/ops/linalg.h"
#include "core/ops/reduce.h"
#include "core/ops/shape_ops.h"

namespace tandem {

namespace {

// Checks q, k, v, the mask and the dropout against each other and fills in the kernels' problem.
// The segment ids come back as i64 on q's device (`segments` keeps them alive).
AttentionGeometry check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const AttentionMask& mask, double scale, const AttentionDropout& dropout,
                                  Tensor segments[2]) {
  ops_detail::check_compatible({&q, &k, &v}, op);
  TANDEM_CHECK(is_floating(q.dtype()), op, ": needs floating q, k and v, got q ", q.description());
  TANDEM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op,
               ": q [B, Hq, Tq, d], k [B, Hkv, Tk, d] and v [B, Hkv, Tk, dv] must have 4 axes, got q ", q.description(),
               ", k ", k.description(), ", v ", v.description());
  AttentionGeometry g;
  g.batch = q.size(0);
  g.query_heads = q.size(1);
  g.tq = q.size(2);
  g.d = q.size(3);
  g.kv_heads = k.size(1);
  g.tk = k.size(2);
  g.dv = v.size(3);
  TANDEM_CHECK(k.size(0) == g.batch && v.size(0) == g.batch, op, ": batch sizes differ: q ", q.description(), ", k ",
               k.description(), ", v ", v.description());
  TANDEM_CHECK(k.size(3) == g.d, op, ": q ", q.description(), " and k ", k.description(),
               " must have the same last axis (d)");
  TANDEM_CHECK(v.size(1) == g.kv_heads && v.size(2) == g.tk, op, ": v ", v.description(),
               " must have k's heads and one row per key of k ", k.description());
  TANDEM_CHECK(g.kv_heads > 0 && g.query_heads % g.kv_heads == 0, op, ": q's heads (", g.query_heads, ", q ",
               q.description(), ") must be a multiple of k's and v's heads (", g.kv_heads, ", k ", k.description(),
               ")");
  TANDEM_CHECK(std::isfinite(scale) && scale > 0, op, ": the scale must be positive and finite, got ", scale);
  TANDEM_CHECK(mask.window >= 0, op, ": the window must be >= 0 (0: none), got ", mask.window);
  TANDEM_CHECK(mask.query_start >= -1, op, ": query_start must be a position >= 0 (or -1: Tk - Tq), got ",
               mask.query_start);
  TANDEM_CHECK(mask.key_start >= 0, op, ": key_start must be a position >= 0, got ", mask.key_start);
  TANDEM_CHECK(dropout.ratio >= 0 && dropout.ratio < 1, op, ": the dropout ratio must be in [0, 1), got ",
               dropout.ratio);
  TANDEM_CHECK(dropout.head_offset >= 0, op, ": dropout's head_offset must be >= 0, got ", dropout.head_offset);
  g.scale = scale;
  g.causal = mask.causal;
  g.window = mask.window;
  g.query_start = mask.query_start == -1 ? g.tk - g.tq : mask.query_start;
  g.key_start = mask.key_start;
  g.dropout = dropout.ratio;
  g.seed = dropout.seed;
  g.head_offset = dropout.head_offset;
  const Tensor& qs = mask.query_segments;
  const Tensor& ks = mask.key_segments;
  TANDEM_CHECK(qs.defined() == ks.defined(), op, ": packed documents need both query_segments and key_segments");
  if (qs.defined()) {
    TANDEM_CHECK(qs.dtype() == DType::i32 || qs.dtype() == DType::i64, op, ": query_segments must be i32 or i64, got ",
                 qs.description());
    TANDEM_CHECK(ks.dtype() == DType::i32 || ks.dtype() == DType::i64, op, ": key_segments must be i32 or i64, got ",
                 ks.description());
    TANDEM_CHECK(qs.shape() == Shape({g.batch, g.tq}), op, ": query_segments ", qs.description(),
                 " must be [B, Tq] = [", g.batch, ", ", g.tq, "] for q ", q.description());
    TANDEM_CHECK(ks.shape() == Shape({g.batch, g.tk}), op, ": key_segments ", ks.description(), " must be [B, Tk] = [",
                 g.batch, ", ", g.tk, "] for k ", k.description());
    segments[0] = qs.to(DType::i64).to(q.device());
    segments[1] = ks.to(DType::i64).to(q.device());
    g.query_segments = &segments[0];
    g.key_segments = &segments[1];
  }
  return g;
}

void check_same_shape(const Tensor& t, const Shape& shape, const char* what, const char* op, const Tensor& q) {
  TANDEM_CHECK(t.defined() && t.shape() == shape, op, ": ", what, " ",
               t.defined() ? t.description() : std::string("undefined"), " must be ", shape_str(shape), " for q ",
               q.description());
}

}  // namespace

AttentionOutput fused_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                                        double scale, const AttentionDropout& dropout) {
  const char* op = "attention";
  if (q.defined() && is_half(q.dtype())) {
    ops_detail::check_compatible({&q, &k, &v}, op);
    AttentionOutput wide =
        fused_attention_forward(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), mask, scale, dropout);
    return {wide.out.to(q.dtype()), wide.lse};
  }
  Tensor segments[2];
  const AttentionGeometry g = check_attention(op, q, k, v, mask, scale, dropout, segments);
  AttentionOutput result{Tensor({g.batch, g.query_heads, g.tq, g.dv}, q.dtype(), q.device()),
                         Tensor({g.batch, g.query_heads, g.tq}, q.dtype(), q.device())};
  if (result.lse.numel() == 0) return result;
  if (g.tk == 0) {  // nothing to see
    backend_for(q.device(), op).fill(result.out, 0);
    backend_for(q.device(), op).fill(result.lse, -std::numeric_limits<double>::infinity());
    return result;
  }
  if (g.dv == 0) {  // the log-sum-exp still counts: run with one zero column of values
    AttentionOutput one = fused_attention_forward(q, k, zeros({g.batch, g.kv_heads, g.tk, 1}, v.dtype(), v.device()),
                                                  mask, scale, dropout);
    result.lse = one.lse;
    return result;
  }
  backend_for(q.device(), op).attention_forward(g, q, k, v, result.out, result.lse);
  return result;
}

AttentionGradients fused_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                            const Tensor& lse, const Tensor& gout, const AttentionMask& mask,
                                            double scale, const AttentionDropout& dropout) {
  const char* op = "attention (backward)";
  if (q.defined() && is_half(q.dtype())) {
    ops_detail::check_compatible({&q, &k, &v, &out, &gout}, op);
    const AttentionGradients wide =
        fused_attention_backward(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), out.to(DType::f32),
                                 lse.to(DType::f32), gout.to(DType::f32), mask, scale, dropout);
    return {wide.q.to(q.dtype()), wide.k.to(q.dtype()), wide.v.to(q.dtype())};
  }
  Tensor segments[2];
  const AttentionGeometry g = check_attention(op, q, k, v, mask, scale, dropout, segments);
  const Shape out_shape{g.batch, g.query_heads, g.tq, g.dv};
  check_same_shape(out, out_shape, "the output", op, q);
  check_same_shape(gout, out_shape, "the output's gradient", op, q);
  check_same_shape(lse, Shape{g.batch, g.query_heads, g.tq}, "the log-sum-exp", op, q);
  ops_detail::check_compatible({&q, &out, &gout, &lse}, op);
  AttentionGradients grads{Tensor(q.shape(), q.dtype(), q.device()), Tensor(k.shape(), k.dtype(), k.device()),
                           Tensor(v.shape(), v.dtype(), v.device())};
  Backend& backend = backend_for(q.device(), op);
  if (q.numel() == 0 || k.numel() == 0 || v.numel() == 0 || gout.numel() == 0) {
    for (Tensor* t : {&grads.q, &grads.k, &grads.v})
      if (t->numel() > 0) backend.fill(*t, 0);
    return grads;
  }
  backend.attention_backward(g, q, k, v, out, lse, gout, grads.q, grads.k, grads.v);
  return grads;
}

Tensor attention_visibility(const AttentionMask& mask, std::int64_t batch, std::int64_t tq, std::int64_t tk) {
  const bool packed = mask.query_segments.defined();
  const std::int64_t rows = packed ? batch : 1;
  const std::int64_t query_start = mask.query_start == -1 ? tk - tq : mask.query_start;
  std::vector<std::int64_t> qs, ks;
  if (packed) {
    qs = mask.query_segments.to_vector<std::int64_t>();
    ks = mask.key_segments.to_vector<std::int64_t>();
    TANDEM_CHECK(
        static_cast<std::int64_t>(qs.size()) == batch * tq && static_cast<std::int64_t>(ks.size()) == batch * tk,
        "attention_visibility: segments ", mask.query_segments.description(), " and ", mask.key_segments.description(),
        " must be [B, Tq] and [B, Tk] for B ", batch, ", Tq ", tq, ", Tk ", tk);
  }
  std::vector<bool> visible(static_cast<std::size_t>(rows * tq * tk));
  for (std::int64_t b = 0; b < rows; ++b)
    for (std::int64_t i = 0; i < tq; ++i)
      for (std::int64_t j = 0; j < tk; ++j) {
        const std::int64_t p = query_start + i, s = mask.key_start + j;
        bool see = !mask.causal || s <= p;
        if (mask.window > 0) see = see && p - s < mask.window && (mask.causal || s - p < mask.window);
        if (packed) see = see && qs[static_cast<std::size_t>(b * tq + i)] == ks[static_cast<std::size_t>(b * tk + j)];
        visible[static_cast<std::size_t>((b * tq + i) * tk + j)] = see;
      }
  return from_vector(visible, {rows, 1, tq, tk}, Device::cpu());
}

Tensor attention_dropout_keep(const AttentionDropout& dropout, std::int64_t batch, std::int64_t heads,
                              std::int64_t query_start, std::int64_t tq, std::int64_t key_start, std::int64_t tk) {
  std::vector<bool> keep(static_cast<std::size_t>(batch * heads * tq * tk));
  std::size_t at = 0;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < tq; ++i)
        for (std::int64_t j = 0; j < tk; ++j)
          keep[at++] = attention_dropout_uniform(dropout.seed, b, dropout.head_offset + h, query_start + i,
                                                 key_start + j) >= dropout.ratio;
  return from_vector(keep, {batch, heads, tq, tk}, Device::cpu());
}

// ---- the Backend defaults: the computation composed of front-end operations, for devices
// without tiled kernels. Every [Tq, Tk] matrix lives only during the call. ----

namespace {

// k or v [B, Hkv, Tk, x] as [B * Hq, Tk, x]: each key/value head repeated for its query heads.
Tensor heads_for_queries(const Tensor& t, const AttentionGeometry& g) {
  const std::int64_t group = g.query_heads / g.kv_heads, rows = t.size(2), cols = t.size(3);
  Tensor wide = t.reshape({g.batch, g.kv_heads, 1, rows, cols});
  if (group > 1) wide = broadcast_to(wide, {g.batch, g.kv_heads, group, rows, cols});
  return wide.clone().reshape({g.batch * g.query_heads, rows, cols});
}

// [B * Hq, Tk, x] summed over each group of query heads back to [B, Hkv, Tk, x].
Tensor heads_for_keys(const Tensor& t, const AttentionGeometry& g) {
  const std::int64_t group = g.query_heads / g.kv_heads;
  const Tensor grouped = t.reshape({g.batch, g.kv_heads, group, t.size(1), t.size(2)});
  return sum(grouped, {2});
}

// Visibility [B or 1, 1, Tq, Tk] and dropout's scaled keep mask [B, Hq, Tq, Tk] (undefined
// without dropout), on the device in q's dtype.
struct ComposedMasks {
  Tensor visible, dropout_scale;
};
ComposedMasks composed_masks(const AttentionGeometry& g, const Tensor& q) {
  AttentionMask mask;
  mask.causal = g.causal;
  mask.window = g.window;
  mask.query_start = g.query_start;
  mask.key_start = g.key_start;
  if (g.query_segments) {
    mask.query_segments = g.query_segments->to(Device::cpu());
    mask.key_segments = g.key_segments->to(Device::cpu());
  }
  ComposedMasks masks;
  masks.visible = attention_visibility(mask, g.batch, g.tq, g.tk).to(q.device());
  if (g.dropout > 0) {
    const Tensor keep = attention_dropout_keep({g.dropout, g.seed, g.head_offset}, g.batch, g.query_heads,
                                               g.query_start, g.tq, g.key_start, g.tk)
                            .to(q.device());
    masks.dropout_scale =
        where(keep, full({}, 1 / (1 - g.dropout), q.dtype(), q.device()), zeros({}, q.dtype(), q.device()));
  }
  return masks;
}

// scale * q k^T as [B, Hq, Tq, Tk], masked entries -inf.
Tensor masked_scores(const AttentionGeometry& g, const Tensor& q, const Tensor& k_wide, const Tensor& visible) {
  const Tensor s = mul(matmul(q.reshape({g.batch * g.query_heads, g.tq, g.d}), k_wide, false, true), g.scale);
  return where(visible, s.reshape({g.batch, g.query_heads, g.tq, g.tk}),
               full({}, -std::numeric_limits<double>::infinity(), q.dtype(), q.device()));
}

}  // namespace

void Backend::attention_forward(const AttentionGeometry& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                Tensor& out, Tensor& lse) {
  const ComposedMasks masks = composed_masks(g, q);
  const Tensor s = masked_scores(g, q, heads_for_queries(k, g), masks.visible);
  // A row without a visible key has maximum -inf: shift it by 0 instead, so its sum is 0 and its
  // log-sum-exp -inf.
  const Tensor top = max(s, {3}, true);
  const Tensor shift =
      tandem::where(equal(top, -std::numeric_limits<double>::infinity()), zeros({}, q.dtype(), q.device()), top);
  const Tensor e = exp(sub(s, shift));
  const Tensor total = sum(e, {3}, true);
  lse.copy_(add(log(total), shift).reshape(lse.shape()));
  Tensor p = div(e, tandem::where(equal(total, 0.0), full({}, 1.0, q.dtype(), q.device()), total));
  if (masks.dropout_scale.defined()) p = mul(p, masks.dropout_scale);
  out.copy_(
      tandem::matmul(p.reshape({g.batch * g.query_heads, g.tq, g.tk}), heads_for_queries(v, g)).reshape(out.shape()));
}

void Backend::attention_backward(const AttentionGeometry& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& out, const Tensor& lse, const Tensor& gout, Tensor& gq, Tensor& gk,
                                 Tensor& gv) {
  const ComposedMasks masks = composed_masks(g, q);
  const Tensor k_wide = heads_for_queries(k, g), v_wide = heads_for_queries(v, g);
  const Tensor s = masked_scores(g, q, k_wide, masks.visible);
  // P = exp(s - lse) on visible entries; a row without any has lse -inf and no visible entry.
  const Tensor p = exp(tandem::where(masks.visible, sub(s, lse.reshape({g.batch, g.query_heads, g.tq, 1})),
                                     full({}, -std::numeric_limits<double>::infinity(), q.dtype(), q.device())));
  const std::int64_t bh = g.batch * g.query_heads;
  const Tensor dropped = masks.dropout_scale.defined() ? mul(p, masks.dropout_scale) : p;
  const Tensor go = gout.reshape({bh, g.tq, g.dv});
  gv.copy_(heads_for_keys(tandem::matmul(dropped.reshape({bh, g.tq, g.tk}), go, true, false), g));
  Tensor dp = tandem::matmul(go, v_wide, false, true).reshape({g.batch, g.query_heads, g.tq, g.tk});
  if (masks.dropout_scale.defined()) dp = mul(dp, masks.dropout_scale);
  // The softmax's backward with D = rowsum(gout * out) = rowsum(P * dP).
  const Tensor D = sum(mul(gout, out), {3}, true);
  const Tensor ds = mul(mul(p, sub(dp, D)), g.scale).reshape({bh, g.tq, g.tk});
  gq.copy_(tandem::matmul(ds, k_wide).reshape(gq.shape()));
  gk.copy_(heads_for_keys(tandem::matmul(ds, q.reshape({bh, g.tq, g.d}), true, false), g));
}

}  // namespace tandem
