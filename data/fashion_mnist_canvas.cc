#include "data/fashion_mnist_canvas.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "core/philox.h"
#include "core/threads.h"
#include "data/mnist.h"

namespace tandem {

// One split as bytes, v in 0..255 (the value get_mnist gives is v / 255 in f32): a quarter of
// get_mnist's f32 images, which matters when every rank of a node keeps its own copy.
struct CanvasSource {
  std::int64_t count = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;  // [count, rows, cols]
  std::vector<std::int32_t> labels;  // [count], 0..9
};

namespace {

// Extents stay below 2^31 so that a 32-bit draw times an extent fits in 64 bits (the
// multiply-shift below) and item corners never overflow.
constexpr std::int64_t kMaxExtent = (std::int64_t{1} << 31) - 1;
// Items scaled by 1..4 drawn with weights 144, 36, 16, 9 (proportional to 1 / s^2, out of 205).
constexpr std::array<std::uint32_t, 4> kScaleCumulative = {144, 180, 196, 205};
// Canvases built in bands of this many rows, one band per OpenMP task, when larger than
// kParallelArea pixels.
constexpr std::int64_t kBandRows = 128;
constexpr std::int64_t kParallelArea = std::int64_t{1} << 18;

void check_options(const CanvasOptions& options, const char* op) {
  TANDEM_CHECK(options.height >= 1 && options.height <= kMaxExtent, op, ": height must be in [1, ", kMaxExtent,
               "], got ", options.height);
  TANDEM_CHECK(options.width >= 1 && options.width <= kMaxExtent, op, ": width must be in [1, ", kMaxExtent, "], got ",
               options.width);
  TANDEM_CHECK(options.items >= 0, op, ": items must be >= 0 (0: one per 48 x 48 area), got ", options.items);
  TANDEM_CHECK(std::isfinite(options.threshold) && options.threshold >= 0.0 && options.threshold < 1.0, op,
               ": threshold must be in [0, 1), got ", options.threshold);
}

// The split's bytes, from get_mnist's tensors (whose values v / 255 in f32 round back to v).
std::shared_ptr<CanvasSource> to_source(const TupleDataset& split, const std::string& dir) {
  const Tensor& images = split.fields()[0];
  const Tensor& labels = split.fields()[1];
  auto source = std::make_shared<CanvasSource>();
  source->count = images.shape()[0];
  source->rows = images.shape()[1];
  source->cols = images.shape()[2];
  TANDEM_CHECK(source->count > 0 && source->rows > 0 && source->cols > 0, "make_canvas: the images in ", dir, " are ",
               images.shape(), "; need at least one non-empty image");
  const float* in = images.data<float>();
  source->pixels.resize(static_cast<std::size_t>(images.numel()));
  for (std::size_t p = 0; p < source->pixels.size(); ++p) {
    source->pixels[p] = static_cast<std::uint8_t>(std::lround(in[p] * 255.0f));
  }
  source->labels = labels.to_vector<std::int32_t>();
  for (std::size_t i = 0; i < source->labels.size(); ++i) {
    TANDEM_CHECK(source->labels[i] >= 0 && source->labels[i] < kCanvasNumClasses - 1, "make_canvas: label ", i, " in ",
                 dir, " is ", source->labels[i], "; Fashion-MNIST labels are 0..", kCanvasNumClasses - 2);
  }
  return source;
}

// Both splits of a directory, read once per process: a canvas_tile call per step must not read
// 30 MB of gzip again.
std::shared_ptr<const CanvasSource> load_source(const CanvasOptions& options) {
  static std::mutex mutex;
  static std::map<std::string, std::pair<std::shared_ptr<const CanvasSource>, std::shared_ptr<const CanvasSource>>>
      cache;
  const std::string dir = options.dir.empty() ? default_mnist_dir() : options.dir;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = cache.find(dir);
  if (found == cache.end()) {
    MnistOptions mnist;
    mnist.dir = dir;
    mnist.ndim = 2;
    auto splits = get_mnist(mnist);  // its errors name the directory and how to get the data
    found = cache.emplace(dir, std::make_pair(to_source(*splits.first, dir), to_source(*splits.second, dir))).first;
  }
  return options.train ? found->second.first : found->second.second;
}

std::int64_t item_count(const CanvasOptions& options) {
  if (options.items > 0) return options.items;
  const double area = static_cast<double>(options.height) * static_cast<double>(options.width);
  return std::max<std::int64_t>(1, std::llround(area / 2304.0));
}

// A uniform integer in [0, n) from 32 random bits (n < 2^32; the bias is below n / 2^32).
std::int64_t below(std::uint32_t bits, std::int64_t n) {
  return static_cast<std::int64_t>((static_cast<std::uint64_t>(bits) * static_cast<std::uint64_t>(n)) >> 32);
}

// Item k of canvas `index`: one Philox block, counter (k, index), key the seed; its four lanes
// give the image, the scale, and the centre's row and column.
CanvasItem place_item(const CanvasOptions& options, const CanvasSource& source, std::int64_t index, std::int64_t k) {
  const auto uk = static_cast<std::uint64_t>(k), ui = static_cast<std::uint64_t>(index);
  const philox::Block b =
      philox::philox4x32_10(philox::Block{{static_cast<std::uint32_t>(uk), static_cast<std::uint32_t>(uk >> 32),
                                           static_cast<std::uint32_t>(ui), static_cast<std::uint32_t>(ui >> 32)}},
                            static_cast<std::uint32_t>(options.seed), static_cast<std::uint32_t>(options.seed >> 32));
  CanvasItem item;
  item.image = below(b.v[0], source.count);
  item.label = source.labels[static_cast<std::size_t>(item.image)];
  const std::int64_t weight = below(b.v[1], kScaleCumulative.back());
  item.scale = 1;
  while (weight >= kScaleCumulative[static_cast<std::size_t>(item.scale - 1)]) ++item.scale;
  item.height = source.rows * item.scale;
  item.width = source.cols * item.scale;
  item.top = below(b.v[2], options.height) - item.height / 2;
  item.left = below(b.v[3], options.width) - item.width / 2;
  return item;
}

struct PixelTables {
  std::array<float, 256> value;      // v / 255 in f32, as get_mnist gives it
  std::array<bool, 256> foreground;  // value > threshold
};

PixelTables pixel_tables(double threshold) {
  PixelTables tables;
  for (int v = 0; v < 256; ++v) {
    tables.value[v] = static_cast<float>(v * 1.0 / 255.0);
    tables.foreground[v] = static_cast<double>(tables.value[v]) > threshold;
  }
  return tables;
}

// Draws rows [y0, y1) x columns [x0, x1) of the canvas into image/target (row stride `stride`,
// element (y0, x0) first), which must start as background (0). Per pixel, items are applied in
// order, so any rectangle gets what the whole canvas has there. Throws nothing (it runs inside
// OpenMP regions).
void draw(const std::vector<CanvasItem>& items, const CanvasSource& source, const PixelTables& tables, std::int64_t y0,
          std::int64_t y1, std::int64_t x0, std::int64_t x1, float* image, std::int32_t* target, std::int64_t stride) {
  for (const CanvasItem& item : items) {
    const std::int64_t top = std::max(item.top, y0), bottom = std::min(item.top + item.height, y1);
    const std::int64_t left = std::max(item.left, x0), right = std::min(item.left + item.width, x1);
    if (top >= bottom || left >= right) continue;
    const std::uint8_t* pixels = source.pixels.data() + item.image * source.rows * source.cols;
    const std::int32_t cls = item.label + 1;
    for (std::int64_t y = top; y < bottom; ++y) {
      const std::uint8_t* row = pixels + (y - item.top) / item.scale * source.cols;
      float* image_row = image + (y - y0) * stride - x0;
      std::int32_t* target_row = target + (y - y0) * stride - x0;
      for (std::int64_t x = left; x < right; ++x) {
        const std::uint8_t v = row[(x - item.left) / item.scale];
        if (tables.foreground[v]) {
          image_row[x] = tables.value[v];
          target_row[x] = cls;
        } else {
          image_row[x] = std::max(image_row[x], tables.value[v]);
        }
      }
    }
  }
}

std::vector<CanvasItem> items_of(const CanvasOptions& options, const CanvasSource& source, std::int64_t index) {
  const std::int64_t n = item_count(options);
  std::vector<CanvasItem> items;
  items.reserve(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) items.push_back(place_item(options, source, index, k));
  return items;
}

void check_index(std::int64_t index, const char* op) {
  TANDEM_CHECK(index >= 0, op, ": index must be >= 0, got ", index);
}

Example build_tile(const CanvasOptions& options, const CanvasSource& source, std::int64_t index, std::int64_t y0,
                   std::int64_t y1, std::int64_t x0, std::int64_t x1) {
  const std::int64_t h = y1 - y0, w = x1 - x0;
  Tensor image({1, h, w}, DType::f32);
  Tensor target({h, w}, DType::i32);
  float* image_data = image.data<float>();
  std::int32_t* target_data = target.data<std::int32_t>();
  std::fill(image_data, image_data + h * w, 0.0f);
  std::fill(target_data, target_data + h * w, 0);
  if (h == 0 || w == 0) return {image, target};
  const std::vector<CanvasItem> items = items_of(options, source, index);
  const PixelTables tables = pixel_tables(options.threshold);
  // Large rectangles in bands of rows, in parallel: each band is itself exact, so the result does
  // not depend on the number of threads.
  const std::int64_t bands = h * w >= kParallelArea ? (h + kBandRows - 1) / kBandRows : 1;
  const std::int64_t band_rows = bands == 1 ? h : kBandRows;
#pragma omp parallel for schedule(dynamic) num_threads(max_threads()) if (bands > 1)
  for (std::int64_t band = 0; band < bands; ++band) {
    const std::int64_t top = y0 + band * band_rows, bottom = std::min(top + band_rows, y1);
    draw(items, source, tables, top, bottom, x0, x1, image_data + (top - y0) * w, target_data + (top - y0) * w, w);
  }
  return {image, target};
}

Example checked_tile(const CanvasOptions& options, const CanvasSource& source, std::int64_t index, std::int64_t y0,
                     std::int64_t y1, std::int64_t x0, std::int64_t x1, const char* op) {
  check_index(index, op);
  TANDEM_CHECK(0 <= y0 && y0 <= y1 && y1 <= options.height && 0 <= x0 && x0 <= x1 && x1 <= options.width, op,
               ": the rectangle rows [", y0, ", ", y1, ") x columns [", x0, ", ", x1,
               ") must lie within the canvas, rows [0, ", options.height, ") x columns [0, ", options.width, ")");
  return build_tile(options, source, index, y0, y1, x0, x1);
}

}  // namespace

std::int64_t canvas_item_count(const CanvasOptions& options) {
  check_options(options, "canvas_item_count");
  return item_count(options);
}

std::vector<CanvasItem> canvas_items(const CanvasOptions& options, std::int64_t index) {
  check_options(options, "canvas_items");
  check_index(index, "canvas_items");
  return items_of(options, *load_source(options), index);
}

Example make_canvas(const CanvasOptions& options, std::int64_t index) {
  check_options(options, "make_canvas");
  check_index(index, "make_canvas");
  return build_tile(options, *load_source(options), index, 0, options.height, 0, options.width);
}

Example canvas_tile(const CanvasOptions& options, std::int64_t index, std::int64_t y0, std::int64_t y1, std::int64_t x0,
                    std::int64_t x1) {
  check_options(options, "canvas_tile");
  return checked_tile(options, *load_source(options), index, y0, y1, x0, x1, "canvas_tile");
}

FashionMnistCanvasDataset::FashionMnistCanvasDataset(const CanvasOptions& options, std::int64_t length)
    : options_(options), length_(length) {
  check_options(options, "FashionMnistCanvasDataset");
  TANDEM_CHECK(length >= 0, "FashionMnistCanvasDataset: length must be >= 0, got ", length);
  source_ = load_source(options);
}

Example FashionMnistCanvasDataset::get(std::int64_t i) const {
  check_index(i, "FashionMnistCanvasDataset::get");
  return build_tile(options_, *source_, i, 0, options_.height, 0, options_.width);
}

Example FashionMnistCanvasDataset::tile(std::int64_t i, std::int64_t y0, std::int64_t y1, std::int64_t x0,
                                        std::int64_t x1) const {
  check_index(i, "FashionMnistCanvasDataset::tile");
  return checked_tile(options_, *source_, i, y0, y1, x0, x1, "FashionMnistCanvasDataset::tile");
}

std::vector<CanvasItem> FashionMnistCanvasDataset::items(std::int64_t i) const {
  check_index(i, "FashionMnistCanvasDataset::items");
  return items_of(options_, *source_, i);
}

}  // namespace tandem
