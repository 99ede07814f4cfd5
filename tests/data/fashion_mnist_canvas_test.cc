// Fashion-MNIST segmentation canvases (data/fashion_mnist_canvas.h) on the real Fashion-MNIST
// (Debian's dataset-fashion-mnist): determinism, tiles equal to slices of the whole canvas,
// ranges, the foreground fraction, labels and pixels against get_mnist read independently, and
// errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "data/fashion_mnist_canvas.h"
#include "data/mnist.h"

using namespace tandem;

namespace {

const std::string kRealDir = "/usr/share/datasets/fashion-mnist";

CanvasOptions real_options() {
  CanvasOptions options;
  options.dir = kRealDir;
  return options;
}

// A canvas (or tile) as plain vectors, checking the shapes and dtypes on the way.
struct Plain {
  std::int64_t h = 0, w = 0;
  std::vector<float> image;
  std::vector<std::int32_t> target;
  float pixel(std::int64_t y, std::int64_t x) const { return image[static_cast<std::size_t>(y * w + x)]; }
  std::int32_t cls(std::int64_t y, std::int64_t x) const { return target[static_cast<std::size_t>(y * w + x)]; }
};

Plain plain(const Example& e, std::int64_t h, std::int64_t w) {
  REQUIRE(e.size() == 2);
  REQUIRE(e[0].shape() == Shape{1, h, w});
  REQUIRE(e[0].dtype() == DType::f32);
  REQUIRE(e[1].shape() == Shape{h, w});
  REQUIRE(e[1].dtype() == DType::i32);
  return Plain{h, w, e[0].to_vector<float>(), e[1].to_vector<std::int32_t>()};
}

// Requires tile == rows [y0, y1) x columns [x0, x1) of canvas, exactly.
void require_tile_equals(const Plain& canvas, const CanvasOptions& options, std::int64_t index, std::int64_t y0,
                         std::int64_t y1, std::int64_t x0, std::int64_t x1) {
  INFO("tile rows [" << y0 << ", " << y1 << ") x columns [" << x0 << ", " << x1 << ")");
  const Plain tile = plain(canvas_tile(options, index, y0, y1, x0, x1), y1 - y0, x1 - x0);
  std::int64_t mismatches = 0;
  for (std::int64_t y = y0; y < y1; ++y) {
    for (std::int64_t x = x0; x < x1; ++x) {
      if (tile.pixel(y - y0, x - x0) != canvas.pixel(y, x) || tile.cls(y - y0, x - x0) != canvas.cls(y, x)) {
        ++mismatches;
      }
    }
  }
  REQUIRE(mismatches == 0);
}

// The real splits, read by get_mnist ([N, 28, 28] f32 and [N] i32), once per test binary.
const std::pair<std::shared_ptr<TupleDataset>, std::shared_ptr<TupleDataset>>& real_mnist() {
  static const auto data = [] {
    MnistOptions options;
    options.dir = kRealDir;
    options.ndim = 2;
    return get_mnist(options);
  }();
  return data;
}

// An independent renderer of the documented rule, pixel by pixel from canvas_items and
// get_mnist's images: foreground overwrites (image and target), background takes the maximum.
Plain reference_canvas(const CanvasOptions& options, std::int64_t index) {
  const TupleDataset& split = options.train ? *real_mnist().first : *real_mnist().second;
  const Tensor& images = split.fields()[0];
  const std::int64_t rows = images.shape()[1], cols = images.shape()[2];
  const float* pixels = images.data<float>();
  Plain out{options.height, options.width,
            std::vector<float>(static_cast<std::size_t>(options.height * options.width), 0.0f),
            std::vector<std::int32_t>(static_cast<std::size_t>(options.height * options.width), 0)};
  for (const CanvasItem& item : canvas_items(options, index)) {
    for (std::int64_t y = 0; y < options.height; ++y) {
      for (std::int64_t x = 0; x < options.width; ++x) {
        const std::int64_t dy = y - item.top, dx = x - item.left;
        if (dy < 0 || dx < 0 || dy >= item.height || dx >= item.width) continue;
        const float v = pixels[item.image * rows * cols + (dy / item.scale) * cols + dx / item.scale];
        const auto p = static_cast<std::size_t>(y * options.width + x);
        if (v > options.threshold) {
          out.image[p] = v;
          out.target[p] = item.label + 1;
        } else {
          out.image[p] = std::max(out.image[p], v);
        }
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("make_canvas: shapes, dtypes, ranges, and target != 0 exactly where image > threshold") {
  for (bool train : {true, false}) {
    CanvasOptions options = real_options();
    options.train = train;
    REQUIRE(canvas_item_count(options) == 28);  // 256 * 256 / 2304 = 28.4
    double total_fraction = 0.0;
    const int n = 20;
    for (int index = 0; index < n; ++index) {
      INFO("train " << train << ", canvas " << index);
      const Plain c = plain(make_canvas(options, index), 256, 256);
      std::int64_t foreground = 0, out_of_range = 0, inconsistent = 0;
      for (std::size_t p = 0; p < c.image.size(); ++p) {
        out_of_range += !(c.image[p] >= 0.0f && c.image[p] <= 1.0f && c.target[p] >= 0 && c.target[p] <= 10);
        inconsistent += (c.target[p] != 0) != (c.image[p] > options.threshold);
        foreground += c.target[p] != 0;
      }
      REQUIRE(out_of_range == 0);
      REQUIRE(inconsistent == 0);
      const double fraction = static_cast<double>(foreground) / static_cast<double>(c.image.size());
      REQUIRE(fraction >= 0.05);
      REQUIRE(fraction <= 0.60);
      total_fraction += fraction;
    }
    const double mean = total_fraction / n;
    WARN("mean foreground fraction (" << (train ? "train" : "test") << ", default options): " << mean);
    REQUIRE(mean >= 0.15);
    REQUIRE(mean <= 0.50);
  }
}

TEST_CASE("make_canvas is a function of (seed, index): same inputs, same canvas; others differ") {
  CanvasOptions options = real_options();
  options.height = 96;
  options.width = 160;
  const Example a = make_canvas(options, 7);
  // Other canvases built in between change nothing.
  make_canvas(options, 3);
  canvas_tile(options, 8, 10, 20, 30, 40);
  const Example b = make_canvas(options, 7);
  REQUIRE(a[0].to_vector<float>() == b[0].to_vector<float>());
  REQUIRE(a[1].to_vector<std::int32_t>() == b[1].to_vector<std::int32_t>());

  const Example other_index = make_canvas(options, 8);
  REQUIRE(a[1].to_vector<std::int32_t>() != other_index[1].to_vector<std::int32_t>());
  CanvasOptions other_seed = options;
  other_seed.seed = 1;
  REQUIRE(a[1].to_vector<std::int32_t>() != make_canvas(other_seed, 7)[1].to_vector<std::int32_t>());
  CanvasOptions test_split = options;
  test_split.train = false;
  REQUIRE(a[0].to_vector<float>() != make_canvas(test_split, 7)[0].to_vector<float>());

  // Placement is the same whatever the canvas's item count: item k of a canvas depends on (seed,
  // index, k) only.
  CanvasOptions fewer = options;
  fewer.items = 3;
  CanvasOptions more = options;
  more.items = 10;
  const std::vector<CanvasItem> few = canvas_items(fewer, 5), many = canvas_items(more, 5);
  REQUIRE(few.size() == 3);
  REQUIRE(many.size() == 10);
  for (std::size_t k = 0; k < few.size(); ++k) {
    REQUIRE(few[k].image == many[k].image);
    REQUIRE(few[k].top == many[k].top);
    REQUIRE(few[k].left == many[k].left);
    REQUIRE(few[k].scale == many[k].scale);
  }

  // The dataset gives the same canvases.
  const FashionMnistCanvasDataset dataset(options, 10);
  REQUIRE(dataset.size() == 10);
  REQUIRE(dataset.num_classes() == 11);
  const Example c = dataset.get(7);
  REQUIRE(c[0].to_vector<float>() == a[0].to_vector<float>());
  REQUIRE(c[1].to_vector<std::int32_t>() == a[1].to_vector<std::int32_t>());
}

TEST_CASE("make_canvas equals an independent pixel-by-pixel rendering of its items") {
  for (std::int64_t items : {0, 1, 2, 40}) {
    CanvasOptions options = real_options();
    options.height = 90;
    options.width = 130;
    options.items = items;
    options.seed = 12345;
    options.train = items != 2;
    for (std::int64_t index : {0, 1, 1000000007}) {
      INFO("items " << items << ", index " << index);
      const Plain got = plain(make_canvas(options, index), 90, 130);
      const Plain want = reference_canvas(options, index);
      REQUIRE(got.image == want.image);
      REQUIRE(got.target == want.target);
    }
  }
}

TEST_CASE("canvas_tile equals the same rectangle of the whole canvas") {
  CanvasOptions options = real_options();
  options.seed = 99;
  for (auto [h, w] : {std::pair<std::int64_t, std::int64_t>{256, 256}, {101, 77}, {600, 520}}) {
    options.height = h;
    options.width = w;
    const std::int64_t index = h;  // a different canvas each time
    INFO("canvas " << h << " x " << w);
    const Plain canvas = plain(make_canvas(options, index), h, w);
    // The whole canvas as a tile.
    require_tile_equals(canvas, options, index, 0, h, 0, w);
    // Three uneven bands of rows, and of columns.
    const std::int64_t a = h / 3 - 1, b = 2 * h / 3 + 2;
    require_tile_equals(canvas, options, index, 0, a, 0, w);
    require_tile_equals(canvas, options, index, a, b, 0, w);
    require_tile_equals(canvas, options, index, b, h, 0, w);
    const std::int64_t c = w / 3 + 1, d = 2 * w / 3 - 1;
    require_tile_equals(canvas, options, index, 0, h, 0, c);
    require_tile_equals(canvas, options, index, 0, h, c, d);
    require_tile_equals(canvas, options, index, 0, h, d, w);
    // A 2 x 2 grid, split off-centre.
    const std::int64_t ym = h / 2 + 3, xm = w / 2 - 5;
    require_tile_equals(canvas, options, index, 0, ym, 0, xm);
    require_tile_equals(canvas, options, index, 0, ym, xm, w);
    require_tile_equals(canvas, options, index, ym, h, 0, xm);
    require_tile_equals(canvas, options, index, ym, h, xm, w);
    // One-pixel tiles at the corners and the middles of the edges, and one-pixel rows and columns
    // along the edges.
    for (std::int64_t y : {std::int64_t{0}, h / 2, h - 1}) {
      for (std::int64_t x : {std::int64_t{0}, w / 2, w - 1})
        require_tile_equals(canvas, options, index, y, y + 1, x, x + 1);
    }
    require_tile_equals(canvas, options, index, 0, 1, 0, w);
    require_tile_equals(canvas, options, index, h - 1, h, 0, w);
    require_tile_equals(canvas, options, index, 0, h, 0, 1);
    require_tile_equals(canvas, options, index, 0, h, w - 1, w);
    // Random rectangles.
    std::mt19937_64 rng(static_cast<std::uint64_t>(h));
    for (int t = 0; t < 40; ++t) {
      std::int64_t y0 = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(h));
      std::int64_t y1 = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(h));
      std::int64_t x0 = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(w));
      std::int64_t x1 = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(w));
      if (y0 > y1) std::swap(y0, y1);
      if (x0 > x1) std::swap(x0, x1);
      require_tile_equals(canvas, options, index, y0, y1 + 1, x0, x1 + 1);
    }
  }
}

TEST_CASE("canvas_tile: every pixel of a small canvas as its own 1 x 1 tile, and the dataset's tile") {
  CanvasOptions options = real_options();
  options.height = 37;
  options.width = 41;
  options.items = 3;
  const Plain canvas = plain(make_canvas(options, 4), 37, 41);
  for (std::int64_t y = 0; y < 37; ++y) {
    for (std::int64_t x = 0; x < 41; ++x) {
      const Plain t = plain(canvas_tile(options, 4, y, y + 1, x, x + 1), 1, 1);
      if (t.image[0] != canvas.pixel(y, x) || t.target[0] != canvas.cls(y, x)) FAIL("pixel " << y << ", " << x);
    }
  }
  const FashionMnistCanvasDataset dataset(options, 5);
  const Plain t = plain(dataset.tile(4, 5, 30, 2, 40), 25, 38);
  for (std::int64_t y = 5; y < 30; ++y) {
    for (std::int64_t x = 2; x < 40; ++x) {
      REQUIRE(t.pixel(y - 5, x - 2) == canvas.pixel(y, x));
      REQUIRE(t.cls(y - 5, x - 2) == canvas.cls(y, x));
    }
  }
  // An empty rectangle gives empty tensors.
  const Example empty = canvas_tile(options, 4, 3, 3, 0, 41);
  REQUIRE(empty[0].shape() == Shape{1, 0, 41});
  REQUIRE(empty[1].shape() == Shape{0, 41});
}

TEST_CASE("one item: its foreground has the class of its Fashion-MNIST label, its pixels are the image's") {
  for (bool train : {true, false}) {
    CanvasOptions options = real_options();
    options.items = 1;
    options.height = 160;
    options.width = 140;
    options.train = train;
    const TupleDataset& split = train ? *real_mnist().first : *real_mnist().second;
    const float* pixels = split.fields()[0].data<float>();
    const std::vector<std::int32_t> labels = split.fields()[1].to_vector<std::int32_t>();
    std::vector<int> seen_scales(5, 0);
    for (std::int64_t index = 0; index < 60; ++index) {
      INFO("train " << train << ", canvas " << index);
      const std::vector<CanvasItem> items = canvas_items(options, index);
      REQUIRE(items.size() == 1);
      const CanvasItem& item = items[0];
      REQUIRE(item.image >= 0);
      REQUIRE(item.image < split.size());
      REQUIRE(item.label == labels[static_cast<std::size_t>(item.image)]);
      REQUIRE(item.scale >= 1);
      REQUIRE(item.scale <= 4);
      REQUIRE(item.height == 28 * item.scale);
      REQUIRE(item.width == 28 * item.scale);
      ++seen_scales[static_cast<std::size_t>(item.scale)];
      // The item is centred on a pixel of the canvas.
      REQUIRE(item.top + item.height / 2 >= 0);
      REQUIRE(item.top + item.height / 2 < options.height);
      REQUIRE(item.left + item.width / 2 >= 0);
      REQUIRE(item.left + item.width / 2 < options.width);

      const Plain c = plain(make_canvas(options, index), options.height, options.width);
      std::int64_t foreground = 0;
      for (std::int64_t y = 0; y < options.height; ++y) {
        for (std::int64_t x = 0; x < options.width; ++x) {
          const std::int64_t dy = y - item.top, dx = x - item.left;
          const bool inside = dy >= 0 && dx >= 0 && dy < item.height && dx < item.width;
          const float want = inside ? pixels[item.image * 784 + dy / item.scale * 28 + dx / item.scale] : 0.0f;
          if (c.pixel(y, x) != want) FAIL("pixel " << y << ", " << x << ": " << c.pixel(y, x) << " != " << want);
          if (c.cls(y, x) != 0) {
            ++foreground;
            if (c.cls(y, x) != labels[static_cast<std::size_t>(item.image)] + 1) FAIL("class at " << y << ", " << x);
          }
        }
      }
      // Every Fashion-MNIST image has foreground; at least part of it is on the canvas.
      REQUIRE(foreground > 0);
    }
    // Scales are drawn with probability proportional to 1 / s^2 (0.70, 0.18, 0.08, 0.04). The
    // draws are fixed by the seed, so this is a property of these 60 canvases, not a flaky check.
    REQUIRE(seen_scales[1] > seen_scales[2]);
    REQUIRE(seen_scales[2] > 0);
    REQUIRE(seen_scales[3] + seen_scales[4] > 0);
  }
}

TEST_CASE("FashionMnistCanvasDataset: size, batches and index errors") {
  CanvasOptions options = real_options();
  options.height = 48;
  options.width = 64;
  const FashionMnistCanvasDataset dataset(options, 3);
  const Example batch = dataset.get_batch({2, 0});
  REQUIRE(batch[0].shape() == Shape{2, 1, 48, 64});
  REQUIRE(batch[1].shape() == Shape{2, 48, 64});
  const std::vector<std::int32_t> targets = batch[1].to_vector<std::int32_t>();
  const std::vector<std::int32_t> first(targets.begin(), targets.begin() + 48 * 64);
  REQUIRE(first == dataset.get(2)[1].to_vector<std::int32_t>());
  REQUIRE_THROWS_WITH(dataset.get(3), Catch::Contains("index 3 is out of range for a dataset of size 3"));
  REQUIRE_THROWS_WITH(dataset.tile(-1, 0, 1, 0, 1), Catch::Contains("out of range"));
  REQUIRE_THROWS_WITH(dataset.tile(0, 0, 49, 0, 1), Catch::Contains("must lie within the canvas"));
  REQUIRE(FashionMnistCanvasDataset(options, 0).size() == 0);
  REQUIRE_THROWS_WITH(FashionMnistCanvasDataset(options, -1), Catch::Contains("length must be >= 0, got -1"));
}

TEST_CASE("bad options and rectangles are errors naming the field and value") {
  auto with = [](auto change) {
    CanvasOptions options = real_options();
    change(options);
    return options;
  };
  REQUIRE_THROWS_WITH(make_canvas(with([](CanvasOptions& o) { o.height = 0; }), 0),
                      Catch::Contains("make_canvas: height must be in [1, ") && Catch::Contains("got 0"));
  REQUIRE_THROWS_WITH(canvas_tile(with([](CanvasOptions& o) { o.width = -5; }), 0, 0, 1, 0, 1),
                      Catch::Contains("canvas_tile: width") && Catch::Contains("got -5"));
  REQUIRE_THROWS_WITH(make_canvas(with([](CanvasOptions& o) { o.items = -1; }), 0),
                      Catch::Contains("items must be >= 0") && Catch::Contains("got -1"));
  REQUIRE_THROWS_WITH(make_canvas(with([](CanvasOptions& o) { o.threshold = 1.0; }), 0),
                      Catch::Contains("threshold must be in [0, 1), got 1"));
  REQUIRE_THROWS_WITH(make_canvas(with([](CanvasOptions& o) { o.threshold = std::nan(""); }), 0),
                      Catch::Contains("threshold must be in [0, 1)"));
  REQUIRE_THROWS_WITH(FashionMnistCanvasDataset(with([](CanvasOptions& o) { o.height = 0; }), 4),
                      Catch::Contains("FashionMnistCanvasDataset: height"));
  REQUIRE_THROWS_WITH(make_canvas(real_options(), -1), Catch::Contains("make_canvas: index must be >= 0, got -1"));
  const CanvasOptions options = real_options();
  REQUIRE_THROWS_WITH(canvas_tile(options, 0, 0, 257, 0, 1),
                      Catch::Contains("canvas_tile: the rectangle rows [0, 257) x columns [0, 1)") &&
                          Catch::Contains("rows [0, 256) x columns [0, 256)"));
  REQUIRE_THROWS_WITH(canvas_tile(options, 0, 5, 4, 0, 1), Catch::Contains("must lie within the canvas"));
  REQUIRE_THROWS_WITH(canvas_tile(options, 0, 0, 1, -1, 1), Catch::Contains("must lie within the canvas"));
  // A missing directory: get_mnist's error, naming the directory and how to get the data.
  CanvasOptions missing = real_options();
  missing.dir = "/nonexistent/fashion-mnist";
  REQUIRE_THROWS_WITH(make_canvas(missing, 0), Catch::Contains("/nonexistent/fashion-mnist") &&
                                                   Catch::Contains("no such directory") &&
                                                   Catch::Contains("dataset-fashion-mnist"));
  REQUIRE_THROWS_WITH(FashionMnistCanvasDataset(missing, 1), Catch::Contains("dataset-fashion-mnist"));
}
