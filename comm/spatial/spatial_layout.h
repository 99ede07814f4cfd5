// How the height and width of a batch of feature maps [N, C, H, W] are split over the ranks of a
// spatially parallel group: a grid of grid_y x grid_x tiles, cut along rows at row_cuts and along
// columns at col_cuts. Rank r holds the tile at grid row r / grid_x and grid column r % grid_x
// (bands along the height are a grid_y x 1 grid), with every sample and channel. Cuts may be
// uneven and tiles may be empty, so any size splits over any number of ranks.
//
// A windowed operation (convolution, pooling) maps a layout of its input onto a layout of its
// output that keeps each output element with the rank holding the centre of its window, so that
// a rank needs only the borders ("halos") of its neighbours' tiles; a transposed one
// (deconvolution) does the same the other way round. Chains of layers therefore stay aligned:
// a 2x2 pooling halves every cut (rounding up) and a 2x2 deconvolution doubles it back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

// Rows [y0, y1) and columns [x0, x1) of a feature map (global coordinates; may reach outside).
struct Rect {
  std::int64_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;
  std::int64_t rows() const { return y1 > y0 ? y1 - y0 : 0; }
  std::int64_t cols() const { return x1 > x0 ? x1 - x0 : 0; }
  bool empty() const { return rows() == 0 || cols() == 0; }
  Rect intersect(const Rect& o) const;
  bool contains(const Rect& o) const { return o.empty() || (o.y0 >= y0 && o.y1 <= y1 && o.x0 >= x0 && o.x1 <= x1); }
  bool operator==(const Rect& o) const { return y0 == o.y0 && y1 == o.y1 && x0 == o.x0 && x1 == o.x1; }
  std::string str() const;  // "rows [0, 12) x cols [0, 64)"
};

// A window along one axis: kernel size, stride, padding, dilation and Chainer's cover_all.
struct WindowAxis {
  std::int64_t kernel = 1, stride = 1, pad = 0, dilate = 1;
  bool cover_all = false;
  std::int64_t extent() const { return dilate * (kernel - 1) + 1; }
  // The window's centre within its extent (rounded down).
  std::int64_t centre() const { return dilate * (kernel - 1) / 2; }
  // Output size for an input of `size` (conv_outsize); errors begin with `op`.
  std::int64_t output_size(std::int64_t size, const char* op) const;
  // The input range [begin, end) that outputs [o0, o1) read (before clipping to the map).
  std::int64_t first_input(std::int64_t o0) const { return o0 * stride - pad; }
  std::int64_t input_end(std::int64_t o1) const { return (o1 - 1) * stride - pad + extent(); }
};

class SpatialLayout {
 public:
  // The height split into `ranks` bands of rows: band r is [H r / R, H (r + 1) / R).
  static SpatialLayout bands(std::int64_t height, std::int64_t width, int ranks);
  // A grid_y x grid_x grid of tiles, each axis split as bands.
  static SpatialLayout grid(std::int64_t height, std::int64_t width, int grid_y, int grid_x);
  // Everything on rank `root` of `ranks` (a band layout whose other bands are empty): an image
  // held whole by one rank, in the same terms as a split one.
  static SpatialLayout whole(std::int64_t height, std::int64_t width, int ranks, int root = 0);
  // Explicit cuts: row_cuts holds grid_y + 1 non-decreasing positions from 0 to the height,
  // col_cuts grid_x + 1 from 0 to the width.
  SpatialLayout(std::vector<std::int64_t> row_cuts, std::vector<std::int64_t> col_cuts);
  SpatialLayout() = default;

  std::int64_t height() const { return row_cuts_.back(); }
  std::int64_t width() const { return col_cuts_.back(); }
  int grid_y() const { return static_cast<int>(row_cuts_.size()) - 1; }
  int grid_x() const { return static_cast<int>(col_cuts_.size()) - 1; }
  int ranks() const { return grid_y() * grid_x(); }
  const std::vector<std::int64_t>& row_cuts() const { return row_cuts_; }
  const std::vector<std::int64_t>& col_cuts() const { return col_cuts_; }
  // The tile of `rank` (an error names the rank and the grid when it is not in [0, ranks())).
  Rect tile(int rank) const;

  // The layout of a windowed operation's output: along each axis the cut at input position c
  // moves to the first output whose window centre lies at or after c, clamped to the output.
  SpatialLayout after_window(const WindowAxis& y, const WindowAxis& x, const char* op) const;
  // The layout of a transposed windowed operation's output (of out_h x out_w): input position c
  // maps to output c * stride - pad + centre, clamped to the output.
  SpatialLayout after_transposed_window(const WindowAxis& y, const WindowAxis& x, std::int64_t out_h,
                                        std::int64_t out_w) const;

  bool operator==(const SpatialLayout& o) const { return row_cuts_ == o.row_cuts_ && col_cuts_ == o.col_cuts_; }
  bool operator!=(const SpatialLayout& o) const { return !(*this == o); }
  // "2 x 1 tiles of 64 x 64 (rows 0|32|64, cols 0|64)"
  std::string describe() const;

 private:
  std::vector<std::int64_t> row_cuts_{0, 0}, col_cuts_{0, 0};
};

}  // namespace tandem
