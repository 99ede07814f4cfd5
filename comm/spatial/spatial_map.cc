#include "comm/spatial/spatial_map.h"

#include <sstream>
#include <string>
#include <utility>

#include "autograd/functions/arithmetic.h"
#include "autograd/functions/array.h"
#include "autograd/functions/reduction.h"
#include "comm/spatial/halo_exchange.h"
#include "core/error.h"
#include "core/ops.h"

namespace tandem {

namespace {

// Every rank's tile of every sample.
std::vector<Box> tiles(const SpatialLayout& layout, std::int64_t samples) {
  std::vector<Box> boxes;
  for (int r = 0; r < layout.ranks(); ++r) boxes.push_back({0, samples, layout.tile(r)});
  return boxes;
}

// Whole images of samples [N r / R, N (r + 1) / R) on rank r.
std::vector<Box> sample_split(std::int64_t samples, std::int64_t height, std::int64_t width, int ranks) {
  std::vector<Box> boxes;
  for (int r = 0; r < ranks; ++r)
    boxes.push_back({samples * r / ranks, samples * (r + 1) / ranks, {0, height, 0, width}});
  return boxes;
}

void check_group(const SpatialLayout& layout, const Communicator& comm, const char* op) {
  TANDEM_CHECK(layout.ranks() == comm.size(), op, ": the layout ", layout.describe(), " has ", layout.ranks(),
               " tiles but the group ", comm.size(), " ranks");
}

}  // namespace

void SpatialMap::check(const char* op) const {
  TANDEM_CHECK(comm != nullptr, op, ": the spatial map has no communicator");
  check_group(layout, *comm, op);
  const Rect t = tile();
  TANDEM_CHECK(local.defined() && local.dim() == 4 && local.shape()[2] == t.rows() && local.shape()[3] == t.cols(), op,
               ": rank ", comm->rank(), " holds ", t.str(), " of ", layout.describe(), ", so its tile must be [N, C, ",
               t.rows(), ", ", t.cols(), "], got ", local.defined() ? local.description() : std::string("nothing"));
}

namespace functions {

SpatialMap relayout(const SpatialMap& x, const SpatialLayout& layout) {
  x.check("relayout");
  TANDEM_CHECK(layout.height() == x.layout.height() && layout.width() == x.layout.width(), "relayout: the new layout ",
               layout.describe(), " is not of the map's size, ", x.layout.describe());
  check_group(layout, *x.comm, "relayout");
  if (layout == x.layout) return x;
  const std::int64_t n = x.local.shape()[0];
  ExchangePlan plan{tiles(x.layout, n), tiles(layout, n), "relayout"};
  return {exchange_boxes(*x.comm, plan, x.local), layout, x.comm};
}

Variable gather_image(const SpatialMap& x, int root) {
  x.check("gather_image");
  return relayout(x, SpatialLayout::whole(x.layout.height(), x.layout.width(), x.comm->size(), root)).local;
}

SpatialMap scatter_image(const CommunicatorPtr& comm, const Variable& x, const SpatialLayout& layout, int root) {
  check_group(layout, *comm, "scatter_image");
  std::int64_t n = 0, c = 0;
  DType dtype = DType::f32;
  if (comm->rank() == root) {
    TANDEM_CHECK(x.defined() && x.dim() == 4 && x.shape()[2] == layout.height() && x.shape()[3] == layout.width(),
                 "scatter_image: the root (rank ", root, ") must pass [N, C, ", layout.height(), ", ", layout.width(),
                 "] for ", layout.describe(), ", got ", x.defined() ? x.description() : "nothing");
    n = x.shape()[0];
    c = x.shape()[1];
    dtype = x.dtype();
  }
  std::ostringstream what;
  what << n << " " << c << " " << static_cast<int>(dtype);
  std::istringstream got(comm->bcast_obj(what.str(), root));
  int code = 0;
  got >> n >> c >> code;
  dtype = static_cast<DType>(code);
  const SpatialLayout whole = SpatialLayout::whole(layout.height(), layout.width(), comm->size(), root);
  const Variable held = comm->rank() == root || x.defined() ? x : Variable(zeros({n, c, 0, layout.width()}, dtype));
  const SpatialMap from{held, whole, comm};
  from.check("scatter_image");
  ExchangePlan plan{tiles(whole, n), tiles(layout, n), "scatter_image"};
  // Recorded on every rank, whether or not its x takes a gradient (only the root's may).
  return {exchange_boxes(*comm, plan, held, 0, true), layout, comm};
}

Variable to_samples(const SpatialMap& x) {
  x.check("to_samples");
  const std::int64_t n = x.local.shape()[0];
  ExchangePlan plan{tiles(x.layout, n), sample_split(n, x.layout.height(), x.layout.width(), x.comm->size()),
                    "to_samples"};
  return exchange_boxes(*x.comm, plan, x.local);
}

SpatialMap from_samples(const CommunicatorPtr& comm, const Variable& x, std::int64_t samples,
                        const SpatialLayout& layout) {
  check_group(layout, *comm, "from_samples");
  ExchangePlan plan{sample_split(samples, layout.height(), layout.width(), comm->size()), tiles(layout, samples),
                    "from_samples"};
  return {exchange_boxes(*comm, plan, x), layout, comm};
}

SpatialMap spatial_concat(const std::vector<SpatialMap>& xs) {
  TANDEM_CHECK(!xs.empty(), "spatial_concat: nothing to concatenate");
  Variables locals;
  for (const SpatialMap& x : xs) {
    x.check("spatial_concat");
    TANDEM_CHECK(x.layout == xs[0].layout && x.comm == xs[0].comm,
                 "spatial_concat: the maps must share one layout and "
                 "group; got ",
                 xs[0].layout.describe(), " and ", x.layout.describe(), " (relayout one of them)");
    locals.push_back(x.local);
  }
  return xs[0].with(concat(locals, 1));
}

Variable spatial_mean(const SpatialMap& x) {
  TANDEM_CHECK(x.local.defined() && x.local.dim() >= 2, "spatial_mean: needs a tile of at least 2 axes, got ",
               x.local.defined() ? x.local.description() : std::string("nothing"));
  std::int64_t per_pixel = 1;
  for (std::int64_t a = 0; a + 2 < static_cast<std::int64_t>(x.local.dim()); ++a) per_pixel *= x.local.shape()[a];
  const double count =
      static_cast<double>(per_pixel) * static_cast<double>(x.layout.height()) * static_cast<double>(x.layout.width());
  TANDEM_CHECK(count > 0, "spatial_mean: the batch ", x.layout.describe(), " has no element");
  return mul(sum(x.local), 1.0 / count);
}

double group_sum(Communicator& comm, const Variable& x) {
  return comm.allreduce(x.data().to(Device::cpu()).to(DType::f64)).item();
}

}  // namespace functions

}  // namespace tandem
