#include "comm/spatial/spatial_layout.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/ops/conv.h"

namespace tandem {

namespace {

const char* kLayout = "SpatialLayout";

// [size * i / pieces] for i in [0, pieces].
std::vector<std::int64_t> even_cuts(std::int64_t size, int pieces) {
  std::vector<std::int64_t> cuts;
  for (int i = 0; i <= pieces; ++i) cuts.push_back(size * i / pieces);
  return cuts;
}

void check_cuts(const std::vector<std::int64_t>& cuts, const char* axis) {
  TANDEM_CHECK(cuts.size() >= 2 && cuts.front() == 0, kLayout, ": the ", axis,
               " cuts must start at 0 and hold at least two positions");
  for (std::size_t i = 1; i < cuts.size(); ++i)
    TANDEM_CHECK(cuts[i] >= cuts[i - 1], kLayout, ": the ", axis, " cuts must not decrease, got ", cuts[i - 1],
                 " then ", cuts[i]);
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

std::vector<std::int64_t> window_cuts(const std::vector<std::int64_t>& cuts, const WindowAxis& w, std::int64_t out) {
  std::vector<std::int64_t> result;
  for (std::int64_t c : cuts)
    result.push_back(std::clamp<std::int64_t>(ceil_div(c + w.pad - w.centre(), w.stride), 0, out));
  result.front() = 0;
  result.back() = out;
  return result;
}

std::vector<std::int64_t> transposed_cuts(const std::vector<std::int64_t>& cuts, const WindowAxis& w,
                                          std::int64_t out) {
  std::vector<std::int64_t> result;
  for (std::int64_t c : cuts) result.push_back(std::clamp<std::int64_t>(c * w.stride - w.pad + w.centre(), 0, out));
  result.front() = 0;
  result.back() = out;
  return result;
}

std::string join(const std::vector<std::int64_t>& cuts) {
  std::ostringstream s;
  for (std::size_t i = 0; i < cuts.size(); ++i) s << (i ? "|" : "") << cuts[i];
  return s.str();
}

}  // namespace

Rect Rect::intersect(const Rect& o) const {
  Rect r{std::max(y0, o.y0), std::min(y1, o.y1), std::max(x0, o.x0), std::min(x1, o.x1)};
  if (r.y1 < r.y0) r.y1 = r.y0;
  if (r.x1 < r.x0) r.x1 = r.x0;
  return r;
}

std::string Rect::str() const {
  std::ostringstream s;
  s << "rows [" << y0 << ", " << y1 << ") x cols [" << x0 << ", " << x1 << ")";
  return s.str();
}

std::int64_t WindowAxis::output_size(std::int64_t size, const char* op) const {
  try {
    return conv_outsize(size, kernel, stride, pad, cover_all, dilate);
  } catch (const std::exception& e) { TANDEM_FAIL(op, ": ", e.what()); }
}

SpatialLayout SpatialLayout::bands(std::int64_t height, std::int64_t width, int ranks) {
  return grid(height, width, ranks, 1);
}

SpatialLayout SpatialLayout::grid(std::int64_t height, std::int64_t width, int grid_y, int grid_x) {
  TANDEM_CHECK(grid_y > 0 && grid_x > 0 && height >= 0 && width >= 0, kLayout,
               "::grid: needs a grid of at least 1 x 1 and sizes >= 0, got ", grid_y, " x ", grid_x, " over ", height,
               " x ", width);
  return SpatialLayout(even_cuts(height, grid_y), even_cuts(width, grid_x));
}

SpatialLayout SpatialLayout::whole(std::int64_t height, std::int64_t width, int ranks, int root) {
  TANDEM_CHECK(ranks > 0 && root >= 0 && root < ranks, kLayout, "::whole: root ", root, " is not in [0, ", ranks, ")");
  std::vector<std::int64_t> rows;
  for (int i = 0; i <= ranks; ++i) rows.push_back(i <= root ? 0 : height);
  return SpatialLayout(std::move(rows), {0, width});
}

SpatialLayout::SpatialLayout(std::vector<std::int64_t> row_cuts, std::vector<std::int64_t> col_cuts)
    : row_cuts_(std::move(row_cuts)), col_cuts_(std::move(col_cuts)) {
  check_cuts(row_cuts_, "row");
  check_cuts(col_cuts_, "column");
}

Rect SpatialLayout::tile(int rank) const {
  TANDEM_CHECK(rank >= 0 && rank < ranks(), kLayout, ": rank ", rank, " is not in [0, ", ranks(), ") of ", describe());
  const int gy = rank / grid_x(), gx = rank % grid_x();
  return {row_cuts_[gy], row_cuts_[gy + 1], col_cuts_[gx], col_cuts_[gx + 1]};
}

SpatialLayout SpatialLayout::after_window(const WindowAxis& y, const WindowAxis& x, const char* op) const {
  const std::int64_t out_h = y.output_size(height(), op), out_w = x.output_size(width(), op);
  return SpatialLayout(window_cuts(row_cuts_, y, out_h), window_cuts(col_cuts_, x, out_w));
}

SpatialLayout SpatialLayout::after_transposed_window(const WindowAxis& y, const WindowAxis& x, std::int64_t out_h,
                                                     std::int64_t out_w) const {
  return SpatialLayout(transposed_cuts(row_cuts_, y, out_h), transposed_cuts(col_cuts_, x, out_w));
}

std::string SpatialLayout::describe() const {
  std::ostringstream s;
  s << grid_y() << " x " << grid_x() << " tiles of " << height() << " x " << width() << " (rows " << join(row_cuts_)
    << ", cols " << join(col_cuts_) << ")";
  return s.str();
}

}  // namespace tandem
