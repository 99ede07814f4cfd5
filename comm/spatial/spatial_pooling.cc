#include "comm/spatial/spatial_pooling.h"

#include <limits>

#include "autograd/functions/array.h"
#include "autograd/functions/pooling.h"
#include "autograd/functions/reduction.h"
#include "comm/spatial/halo_exchange.h"
#include "core/error.h"

namespace tandem::functions {

namespace {

// Pools every rank's tile of the output from the input rect its windows read, exchanged with
// `fill` outside the image.
SpatialMap pool(const SpatialMap& x, std::int64_t ksize, std::optional<std::int64_t> stride, std::int64_t pad,
                bool cover_all, bool max, const char* op) {
  x.check(op);
  const std::int64_t s = stride.value_or(ksize);
  TANDEM_CHECK(ksize > 0 && s > 0 && pad >= 0, op, ": needs ksize > 0, stride > 0 and pad >= 0, got ", ksize, ", ", s,
               ", ", pad);
  const WindowAxis w{ksize, s, pad, 1, cover_all};
  const SpatialLayout out = x.layout.after_window(w, w, op);
  const std::int64_t n = x.local.shape()[0];
  ExchangePlan plan;
  plan.op = op;
  for (int r = 0; r < x.comm->size(); ++r) {
    plan.held.push_back({0, n, x.layout.tile(r)});
    const Rect o = out.tile(r);
    plan.needed.push_back(
        {0, n,
         o.empty() ? Rect{} : Rect{w.first_input(o.y0), w.input_end(o.y1), w.first_input(o.x0), w.input_end(o.x1)}});
  }
  const double fill = max ? -std::numeric_limits<double>::infinity() : 0.0;
  const Variable X = exchange_boxes(*x.comm, plan, x.local, fill);
  const Rect o = out.tile(x.comm->rank());
  // An empty tile still answers its part of the exchange's backward: y stays connected to X.
  if (o.empty()) return {broadcast_to(sum(X), {n, x.local.shape()[1], o.rows(), o.cols()}), out, x.comm};
  const Variable y =
      max ? max_pooling_2d(X, ksize, ksize, s, s, 0, 0, false) : average_pooling_2d(X, ksize, ksize, s, s, 0, 0);
  return {y, out, x.comm};
}

}  // namespace

SpatialMap spatial_max_pooling_2d(const SpatialMap& x, std::int64_t ksize, std::optional<std::int64_t> stride,
                                  std::int64_t pad, bool cover_all) {
  return pool(x, ksize, stride, pad, cover_all, true, "spatial_max_pooling_2d");
}

SpatialMap spatial_average_pooling_2d(const SpatialMap& x, std::int64_t ksize, std::optional<std::int64_t> stride,
                                      std::int64_t pad) {
  return pool(x, ksize, stride, pad, false, false, "spatial_average_pooling_2d");
}

}  // namespace tandem::functions
