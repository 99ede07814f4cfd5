#include "autograd/functions/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/functions/arithmetic.h"
#include "autograd/functions/array.h"
#include "autograd/functions/linalg.h"
#include "autograd/functions/softmax.h"
#include "core/error.h"
#include "core/ops.h"

namespace tandem {
namespace functions {

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
  TANDEM_CHECK(!causal || tk >= tq, op, ": causal attention needs at least as many keys (", tk, ") as queries (",
               tq, ")");
  TANDEM_CHECK(d > 0, op, ": d = 0 (q ", q.description(), ")");
  // The scale and the mask inside one fused softmax (masked scores get exactly zero weight).
  const Variable weights = scaled_softmax(matmul(q, k, false, true), 1.0 / std::sqrt(static_cast<double>(d)), causal);
  return matmul(weights, v);
}

Variable multi_head_self_attention(const Variable& qkv, std::int64_t heads, bool causal) {
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
  const Variable out = scaled_dot_product_attention(q, k, v, causal);  // [B, H, T, d]
  return reshape(transpose(out, {0, 2, 1, 3}), {B, T, heads * d});
}

}  // namespace functions
}  // namespace tandem
