#include "core/ops/softmax.h"

#include <limits>
#include <vector>

#include "core/backend.h"
#include "core/ops/checks.h"
#include "core/ops/elementwise.h"
#include "core/ops/half_compute.h"
#include "core/ops/indexing.h"
#include "core/ops/reduce.h"

namespace tandem {

namespace {

// x's rows [rows, n] along its last axis; x must be floating and have an axis.
void check_rows(const Tensor& x, const char* op, std::int64_t& rows, std::int64_t& n) {
  ops_detail::check_floating(x, op);
  TANDEM_CHECK(x.dim() >= 1, op, ": needs an axis to normalise over, got ", x.description());
  n = x.shape().back();
  rows = n == 0 ? 0 : x.numel() / n;
}

}  // namespace

Tensor softmax_last_axis(const Tensor& x, double scale, bool causal) {
  const char* op = "softmax";
  if (x.defined() && is_half(x.dtype())) return softmax_last_axis(x.to(DType::f32), scale, causal).to(x.dtype());
  std::int64_t rows = 0, n = 0;
  check_rows(x, op, rows, n);
  TANDEM_CHECK(scale > 0, op, ": scale must be positive, got ", scale);
  std::int64_t tq = 0;
  if (causal) {
    TANDEM_CHECK(x.dim() >= 2, op, ": a causal mask needs score matrices [..., queries, keys], got ", x.description());
    tq = x.shape()[x.dim() - 2];
    TANDEM_CHECK(n >= tq, op, ": a causal mask needs at least as many keys (", n, ") as queries (", tq, "), got ",
                 x.description());
  }
  Tensor y(x.shape(), x.dtype(), x.device());
  if (rows == 0) return y;
  backend_for(x.device(), op).softmax_forward(x, rows, n, scale, tq, y);
  return y;
}

Tensor softmax_last_axis_backward(const Tensor& y, const Tensor& gy, double scale) {
  const char* op = "softmax (backward)";
  if (y.defined() && is_half(y.dtype())) {
    ops_detail::check_compatible({&y, &gy}, op);
    return softmax_last_axis_backward(y.to(DType::f32), gy.to(DType::f32), scale).to(y.dtype());
  }
  std::int64_t rows = 0, n = 0;
  check_rows(y, op, rows, n);
  ops_detail::check_compatible({&y, &gy}, op);
  TANDEM_CHECK(gy.shape() == y.shape(), op, ": the gradient ", gy.description(), " must have the output's shape ",
               y.description());
  Tensor gx(y.shape(), y.dtype(), y.device());
  if (rows == 0) return gx;
  backend_for(y.device(), op).softmax_backward(y, gy, rows, n, scale, gx);
  return gx;
}

// The composed defaults, for a backend without the fused kernels.
void Backend::softmax_forward(const Tensor& x, std::int64_t rows, std::int64_t n, double scale,
                              std::int64_t causal_queries, Tensor& y) {
  Tensor z = mul(x.reshape({rows, n}), scale);
  if (causal_queries > 0) {
    std::vector<double> mask(static_cast<std::size_t>(rows * n), 0.0);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = r % causal_queries + n - causal_queries + 1; j < n; ++j)
        mask[static_cast<std::size_t>(r * n + j)] = -std::numeric_limits<double>::infinity();
    z = add(z, from_vector(mask, {rows, n}).to(x.dtype()).to(x.device()));
  }
  const Tensor e = exp(sub(z, max(z, {1}, true)));
  y.copy_(div(e, sum(e, {1}, true)).reshape(y.shape()));
}

void Backend::softmax_backward(const Tensor& y, const Tensor& gy, std::int64_t rows, std::int64_t n, double scale,
                               Tensor& gx) {
  const Tensor y2 = y.reshape({rows, n}), gyy = mul(gy.reshape({rows, n}), y2);
  gx.copy_(mul(sub(gyy, mul(y2, sum(gyy, {1}, true))), scale).reshape(gx.shape()));
}

}  // namespace tandem
