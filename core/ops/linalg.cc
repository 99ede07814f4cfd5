#include "core/ops/linalg.h"

#include "core/backend.h"
#include "core/ops/checks.h"
#include "core/ops/half_compute.h"
#include "core/ops/shape_ops.h"

namespace tandem {

namespace {

std::string flags(bool ta, bool tb) {
  return std::string(" (transpose_a=") + (ta ? "true" : "false") + ", transpose_b=" + (tb ? "true" : "false") + ")";
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb) {
  ops_detail::check_compatible({&a_in, &b_in}, "matmul");
  if (is_half(a_in.dtype()) && !backend_for(a_in.device(), "matmul").runs_16bit_products(a_in.dtype()))
    return matmul(a_in.to(DType::f32), b_in.to(DType::f32), ta, tb).to(a_in.dtype());
  if (!is_half(a_in.dtype())) ops_detail::check_numeric(a_in, "matmul");  // 16-bit: the backend's own
  TANDEM_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, "matmul: operands must have at least 1 dimension, got ",
               a_in.description(), " and ", b_in.description());
  // 1-D operands: a vector on the left is a row, on the right a column; transposing one is a no-op.
  const bool a_vector = a_in.dim() == 1, b_vector = b_in.dim() == 1;
  Tensor a = a_vector ? a_in.reshape({1, a_in.numel()}) : a_in;
  Tensor b = b_vector ? b_in.reshape({b_in.numel(), 1}) : b_in;
  if (a_vector) ta = false;
  if (b_vector) tb = false;

  const std::int64_t m = ta ? a.size(-1) : a.size(-2);
  const std::int64_t k = ta ? a.size(-2) : a.size(-1);
  const std::int64_t kb = tb ? b.size(-1) : b.size(-2);
  const std::int64_t n = tb ? b.size(-2) : b.size(-1);
  TANDEM_CHECK(k == kb, "matmul: inner dimensions differ: ", a_in.description(), " @ ", b_in.description(),
               flags(ta, tb), ": ", k, " vs ", kb);

  const Shape batch_a(a.shape().begin(), a.shape().end() - 2);
  const Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  const Shape batch_shape = broadcast_shapes(batch_a, batch_b, "matmul");
  const std::int64_t batch = shape_numel(batch_shape);
  // The kernel reuses a batch of one for every product; any other broadcast is materialised.
  auto prepare = [&](const Tensor& t, const Shape& own_batch) {
    if (shape_numel(own_batch) == 1 || own_batch == batch_shape) return t;
    Shape full = batch_shape;
    full.push_back(t.size(-2));
    full.push_back(t.size(-1));
    return broadcast_to(t, full);
  };
  const Tensor a_ready = prepare(a, batch_a), b_ready = prepare(b, batch_b);

  Shape out_shape = batch_shape;
  if (!a_vector) out_shape.push_back(m);
  if (!b_vector) out_shape.push_back(n);
  Tensor out(out_shape, a.dtype(), a.device());
  backend_for(a.device(), "matmul").matmul(a_ready, b_ready, out, batch, m, n, k, ta, tb, false);
  return out;
}

void matmul_accumulate_(Tensor& out, const Tensor& a, const Tensor& b, bool ta, bool tb) {
  ops_detail::check_compatible({&out, &a, &b}, "matmul_accumulate_");
  if (is_half(out.dtype()) && !backend_for(out.device(), "matmul_accumulate_").runs_16bit_products(out.dtype())) {
    // out + a @ b in f32, rounded once
    Tensor sum = out.to(DType::f32);
    matmul_accumulate_(sum, a.to(DType::f32), b.to(DType::f32), ta, tb);
    return ops_detail::narrow_into(out, sum);
  }
  if (!is_half(a.dtype())) ops_detail::check_numeric(a, "matmul_accumulate_");  // 16-bit: the backend's own
  TANDEM_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2, "matmul_accumulate_: needs 2-D operands, got ",
               out.description(), " += ", a.description(), " @ ", b.description());
  const std::int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1);
  const std::int64_t kb = tb ? b.size(1) : b.size(0), n = tb ? b.size(0) : b.size(1);
  TANDEM_CHECK(k == kb && out.size(0) == m && out.size(1) == n, "matmul_accumulate_: shapes do not match: ",
               out.description(), " += ", a.description(), " @ ", b.description(), flags(ta, tb));
  // GEMM reads its operands while writing out: an operand that shares out's memory is copied.
  const Tensor a_safe = a.shares_storage_with(out) ? a.clone() : a;
  const Tensor b_safe = b.shares_storage_with(out) ? b.clone() : b;
  backend_for(a.device(), "matmul_accumulate_").matmul(a_safe, b_safe, out, 1, m, n, k, ta, tb, true);
}

}  // namespace tandem
