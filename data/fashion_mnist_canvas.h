// Segmentation canvases made of Fashion-MNIST items: a synthetic but real-data dataset for fully
// convolutional networks (a U-Net) on images of any size, up to far more than one device holds.
//
// Canvas `index` of a seed is a pure function of (seed, index): item k of it is placed by one
// Philox4x32-10 block (core/philox.h) whose counter is (k, index) and whose key is the seed. So
// any canvas is built independently, in any order, on any rank, and any rectangle of it
// (canvas_tile) is built from the items that overlap it alone, equal bit for bit to the same
// rectangle of the whole canvas: a rank that holds one band of a 4096 x 4096 image never
// allocates the whole image.
//
// Each item is one image of the split (train or test), chosen uniformly, scaled up by an integer
// factor s in {1, 2, 3, 4} (nearest neighbour, so it covers 28s x 28s pixels), and centred on a
// uniformly drawn pixel of the canvas (items near an edge are clipped). s is drawn with
// probability proportional to 1 / s^2 (about 0.70, 0.18, 0.08, 0.04), so that every size covers
// the same expected area: there are many small items and a few large ones, and the network sees
// each size over as many pixels.
//
// Compositing, items in order k = 0, 1, ...: where an item's pixel is foreground (its value, as
// get_mnist gives it, v / 255 in f32, is > threshold) it overwrites the image and sets the
// target to 1 + its class (later items occlude earlier ones); where it is background, the image
// takes the maximum of what is there and the item's pixel (a faint halo never erases what lies
// under it) and the target is unchanged. Hence target != 0 exactly where image > threshold, and
// there the image holds the pixel of the last item whose foreground covers it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace tandem {

struct CanvasOptions {
  std::int64_t height = 256, width = 256;  // each in [1, 2^31 - 1]
  // Items per canvas; 0: about one per 48 x 48 area, max(1, round(height * width / 2304)).
  std::int64_t items = 0;
  std::uint64_t seed = 0;
  // An item's pixel above this (after scaling to [0, 1]) is foreground. In [0, 1).
  double threshold = 0.2;
  bool train = true;  // items from the training split (60000 images), else the test split (10000)
  std::string dir;    // the MNIST-format files (MnistOptions::dir); empty: default_mnist_dir()
};

// 0 (background) and 1 + the ten Fashion-MNIST classes.
constexpr std::int64_t kCanvasNumClasses = 11;

// Where one item of a canvas lies: rows [top, top + height) and columns [left, left + width) of
// the canvas (possibly partly outside it), drawn from split image `image` (class `label`, 0..9)
// scaled by `scale`.
struct CanvasItem {
  std::int64_t image = 0;
  std::int32_t label = 0;
  std::int64_t scale = 1;
  std::int64_t top = 0, left = 0;
  std::int64_t height = 0, width = 0;
};

// The number of items of every canvas under `options` (options.items, or its default for 0).
// Errors as make_canvas for bad options.
std::int64_t canvas_item_count(const CanvasOptions& options);

// The items of canvas `index`, in drawing order.
std::vector<CanvasItem> canvas_items(const CanvasOptions& options, std::int64_t index);

// Canvas `index` (>= 0) of options.seed: {image f32[1, height, width] in [0, 1], target
// i32[height, width] in [0, 10]}. Bad options (a non-positive or too large size, items < 0, a
// threshold outside [0, 1)) are errors naming the field and its value; missing data is
// get_mnist's error (it names the directory and how to install the data).
//
// The split's images are read once per directory and process (get_mnist), kept as bytes (47 MB
// for the training split) and shared by every later call and dataset: files changed on disk
// afterwards are not seen.
Example make_canvas(const CanvasOptions& options, std::int64_t index);

// Rows [y0, y1) and columns [x0, x1) of canvas `index`: {image f32[1, y1 - y0, x1 - x0], target
// i32[y1 - y0, x1 - x0]}, exactly equal to that rectangle of make_canvas(options, index), built
// without the rest of the canvas (memory: the tile; time: the tile's area, the items overlapping
// it, and one Philox block per item of the canvas). Requires 0 <= y0 <= y1 <= height and
// 0 <= x0 <= x1 <= width (an empty rectangle gives empty tensors).
Example canvas_tile(const CanvasOptions& options, std::int64_t index, std::int64_t y0, std::int64_t y1, std::int64_t x0,
                    std::int64_t x1);

// A split's images and labels as bytes (defined in the .cc).
struct CanvasSource;

// `length` canvases: example i is make_canvas(options, i). Nothing is stored but the split's
// images (shared, see make_canvas); each example is built when asked for, so the dataset can be
// as long as one likes. The data are read (and options checked) by the constructor.
class FashionMnistCanvasDataset : public Dataset {
 public:
  FashionMnistCanvasDataset(const CanvasOptions& options, std::int64_t length);

  std::int64_t size() const override { return length_; }
  // {image f32[1, height, width], target i32[height, width]}.
  Example get(std::int64_t i) const override;
  // The rectangle [y0, y1) x [x0, x1) of example i, as canvas_tile.
  Example tile(std::int64_t i, std::int64_t y0, std::int64_t y1, std::int64_t x0, std::int64_t x1) const;
  // The items of example i, as canvas_items.
  std::vector<CanvasItem> items(std::int64_t i) const;

  const CanvasOptions& options() const { return options_; }
  std::int64_t num_classes() const { return kCanvasNumClasses; }

 private:
  CanvasOptions options_;
  std::int64_t length_ = 0;
  std::shared_ptr<const CanvasSource> source_;
};

}  // namespace tandem
