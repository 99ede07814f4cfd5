// get_mnist on the real Fashion-MNIST (Debian's dataset-fashion-mnist) and on synthetic IDX
// files written to $TEST_TMPDIR; read_idx / parse_idx on well-formed and malformed bytes.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/ops.h"
#include "data/mnist.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

const std::string kRealDir = "/usr/share/datasets/fashion-mnist";

using Bytes = std::vector<std::uint8_t>;

// ---- independent helpers (zlib and byte-level, not data/) ----

Bytes gunzip_independently(const std::string& path, std::size_t limit = SIZE_MAX) {
  gzFile file = gzopen(path.c_str(), "rb");
  REQUIRE(file != nullptr);
  Bytes out;
  std::vector<std::uint8_t> chunk(1 << 16);
  while (out.size() < limit) {
    const int got = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    REQUIRE(got >= 0);
    if (got == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + got);
  }
  gzclose(file);
  if (out.size() > limit) out.resize(limit);
  return out;
}

void put_be32(Bytes& b, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<std::uint8_t>(v >> shift));
}

// An IDX file: magic (type code, ndim), extents, payload.
Bytes idx_bytes(std::uint8_t type_code, const std::vector<std::uint32_t>& dims, const Bytes& payload) {
  Bytes b{0, 0, type_code, static_cast<std::uint8_t>(dims.size())};
  for (std::uint32_t d : dims) put_be32(b, d);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

std::string tmp_root() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir ? dir : fs::temp_directory_path().string();
}

// A fresh empty directory under $TEST_TMPDIR.
std::string fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(tmp_root()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void write_plain(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

void write_gz(const std::string& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  if (!bytes.empty()) REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

// A small synthetic MNIST: n images of rows x cols with pixel (i, k) = (37 i + 11 k + seed) % 256,
// and labels (i * 3 + seed) % 10.
struct Synthetic {
  std::int64_t n, rows, cols;
  int seed;
  Bytes pixels, labels;
  Synthetic(std::int64_t n_, std::int64_t rows_, std::int64_t cols_, int seed_)
      : n(n_), rows(rows_), cols(cols_), seed(seed_) {
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t k = 0; k < rows * cols; ++k) pixels.push_back(static_cast<std::uint8_t>((37 * i + 11 * k + seed) % 256));
      labels.push_back(static_cast<std::uint8_t>((i * 3 + seed) % 10));
    }
    pixels[0] = 255;  // the extremes are present
    pixels[1] = 0;
  }
  Bytes image_file() const {
    return idx_bytes(0x08, {static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(rows), static_cast<std::uint32_t>(cols)}, pixels);
  }
  Bytes label_file() const { return idx_bytes(0x08, {static_cast<std::uint32_t>(n)}, labels); }
};

const Synthetic kTrain(6, 4, 3, 1);
const Synthetic kTest(3, 4, 3, 5);

// Writes the four files (gzipped or plain) into `dir`.
void write_synthetic(const std::string& dir, bool gz) {
  auto write = gz ? write_gz : write_plain;
  const std::string suffix = gz ? ".gz" : "";
  write(dir + "/train-images-idx3-ubyte" + suffix, kTrain.image_file());
  write(dir + "/train-labels-idx1-ubyte" + suffix, kTrain.label_file());
  write(dir + "/t10k-images-idx3-ubyte" + suffix, kTest.image_file());
  write(dir + "/t10k-labels-idx1-ubyte" + suffix, kTest.label_file());
}

void check_synthetic(const TupleDataset& ds, const Synthetic& s, const MnistOptions& options) {
  REQUIRE(ds.size() == s.n);
  REQUIRE(ds.num_fields() == (options.withlabel ? 2u : 1u));
  const Tensor& images = ds.fields()[0];
  Shape want_shape{s.n, s.rows * s.cols};
  if (options.ndim == 2) want_shape = {s.n, s.rows, s.cols};
  if (options.ndim == 3) want_shape = {s.n, 1, s.rows, s.cols};
  REQUIRE(images.shape() == want_shape);
  REQUIRE(images.dtype() == options.dtype);
  const std::vector<double> got = images.to_vector<double>();
  for (std::size_t k = 0; k < got.size(); ++k) {
    const double want = options.dtype == DType::f32 ? static_cast<double>(static_cast<float>(s.pixels[k] * options.scale / 255.0))
                                                    : s.pixels[k] * options.scale / 255.0;
    if (got[k] != want) FAIL("pixel " << k << ": got " << got[k] << ", want " << want);
  }
  if (options.withlabel) {
    const Tensor& labels = ds.fields()[1];
    REQUIRE(labels.shape() == Shape{s.n});
    REQUIRE(labels.dtype() == options.label_dtype);
    const std::vector<std::int64_t> l = labels.to_vector<std::int64_t>();
    for (std::int64_t i = 0; i < s.n; ++i) REQUIRE(l[i] == s.labels[i]);
  }
}

MnistOptions in_dir(const std::string& dir) {
  MnistOptions options;
  options.dir = dir;
  return options;
}

// The real data, loaded once per test binary (about a second).
const std::pair<std::shared_ptr<TupleDataset>, std::shared_ptr<TupleDataset>>& real_mnist() {
  static const auto data = get_mnist(in_dir(kRealDir));
  return data;
}

}  // namespace

// ---- the real Fashion-MNIST ----

TEST_CASE("get_mnist reads the real Fashion-MNIST: sizes, shapes, dtypes, ranges") {
  const auto& [train, test] = real_mnist();
  REQUIRE(train->size() == 60000);
  REQUIRE(test->size() == 10000);
  for (const auto& ds : {train, test}) {
    REQUIRE(ds->num_fields() == 2);
    const Tensor& images = ds->fields()[0];
    const Tensor& labels = ds->fields()[1];
    REQUIRE(images.shape() == Shape{ds->size(), 784});
    REQUIRE(images.dtype() == DType::f32);
    REQUIRE(labels.shape() == Shape{ds->size()});
    REQUIRE(labels.dtype() == DType::i32);
    REQUIRE(min(images).item() == 0.0);
    REQUIRE(max(images).item() == 1.0);
    REQUIRE(min(labels).item() == 0);
    REQUIRE(max(labels).item() == 9);
    const Example e = ds->get(0);
    REQUIRE(e[0].shape() == Shape{784});
    REQUIRE(e[1].shape() == Shape{});
  }
}

TEST_CASE("get_mnist on the real Fashion-MNIST: class balance and labels match an independent read") {
  const auto& [train, test] = real_mnist();
  // Fashion-MNIST is balanced: 6000 of each class in train, 1000 in test.
  for (const auto& [ds, per_class] : {std::pair{train, 6000}, std::pair{test, 1000}}) {
    std::vector<int> counts(10, 0);
    for (std::int32_t label : ds->fields()[1].to_vector<std::int32_t>()) ++counts.at(label);
    for (int c = 0; c < 10; ++c) REQUIRE(counts[c] == per_class);
  }
  // Labels and the first images, byte for byte, against zlib reading the .gz files directly.
  const Bytes labels = gunzip_independently(kRealDir + "/train-labels-idx1-ubyte.gz");
  REQUIRE(labels.size() == 8 + 60000);
  const std::vector<std::int32_t> got = train->fields()[1].to_vector<std::int32_t>();
  for (std::size_t i = 0; i < 60000; ++i)
    if (got[i] != labels[8 + i]) FAIL("train label " << i << ": got " << got[i] << ", want " << int(labels[8 + i]));
  const std::size_t n_images = 20;
  const Bytes images = gunzip_independently(kRealDir + "/t10k-images-idx3-ubyte.gz", 16 + 784 * n_images);
  const std::vector<float> pixels = test->fields()[0].slice_rows(0, n_images).to_vector<float>();
  for (std::size_t k = 0; k < 784 * n_images; ++k)
    if (pixels[k] != static_cast<float>(images[16 + k] / 255.0)) FAIL("test pixel " << k);
}

TEST_CASE("get_mnist on the real Fashion-MNIST with ndim 3, a scale and without labels") {
  MnistOptions options = in_dir(kRealDir);
  options.ndim = 3;
  options.withlabel = false;
  options.scale = 2.0;
  const auto [train, test] = get_mnist(options);
  REQUIRE(train->size() == 60000);
  REQUIRE(test->size() == 10000);
  REQUIRE(train->num_fields() == 1);
  REQUIRE(train->fields()[0].shape() == Shape{60000, 1, 28, 28});
  REQUIRE(test->get(3)[0].shape() == Shape{1, 28, 28});
  REQUIRE(max(test->fields()[0]).item() == 2.0);
  // Same pixels as the ndim-1 load, times the scale.
  const auto& flat = real_mnist().second->fields()[0];
  REQUIRE((test->fields()[0].reshape({10000, 784}).slice_rows(0, 50).to_vector<float>() ==
           (flat.slice_rows(0, 50) * 2.0).to_vector<float>()));
}

// ---- synthetic files ----

TEST_CASE("get_mnist reads small synthetic IDX files exactly, plain and gzipped") {
  const std::string plain = fresh_dir("mnist_plain");
  const std::string gz = fresh_dir("mnist_gz");
  write_synthetic(plain, false);
  write_synthetic(gz, true);
  for (const std::string& dir : {plain, gz}) {
    INFO(dir);
    for (int ndim : {1, 2, 3}) {
      MnistOptions options = in_dir(dir);
      options.ndim = ndim;
      const auto [train, test] = get_mnist(options);
      check_synthetic(*train, kTrain, options);
      check_synthetic(*test, kTest, options);
    }
    MnistOptions options = in_dir(dir);
    options.dtype = DType::f64;
    options.label_dtype = DType::i64;
    options.scale = 3.5;
    auto [train, test] = get_mnist(options);
    check_synthetic(*train, kTrain, options);
    options.withlabel = false;
    std::tie(train, test) = get_mnist(options);
    check_synthetic(*test, kTest, options);
  }
}

TEST_CASE("get_mnist prefers the plain file when both exist, and mixes plain and gzipped files") {
  const std::string dir = fresh_dir("mnist_both");
  write_synthetic(dir, false);
  // A different (but valid) gzipped train image file next to the plain one: ignored.
  write_gz(dir + "/train-images-idx3-ubyte.gz", Synthetic(6, 4, 3, 99).image_file());
  check_synthetic(*get_mnist(in_dir(dir)).first, kTrain, in_dir(dir));
  // Only the gzipped test labels.
  fs::remove(dir + "/t10k-labels-idx1-ubyte");
  write_gz(dir + "/t10k-labels-idx1-ubyte.gz", kTest.label_file());
  check_synthetic(*get_mnist(in_dir(dir)).second, kTest, in_dir(dir));
}

TEST_CASE("get_mnist uses $TANDEM_MNIST_DIR by default") {
  const std::string dir = fresh_dir("mnist_env");
  write_synthetic(dir, true);
  const char* old = std::getenv("TANDEM_MNIST_DIR");
  const std::string saved = old ? old : "";
  setenv("TANDEM_MNIST_DIR", dir.c_str(), 1);
  REQUIRE(default_mnist_dir() == dir);
  const auto [train, test] = get_mnist();
  REQUIRE(train->size() == kTrain.n);
  setenv("TANDEM_MNIST_DIR", "", 1);
  REQUIRE(default_mnist_dir() == kRealDir);
  unsetenv("TANDEM_MNIST_DIR");
  REQUIRE(default_mnist_dir() == kRealDir);
  if (old) setenv("TANDEM_MNIST_DIR", saved.c_str(), 1);
}

TEST_CASE("get_mnist errors name the file and what is wrong") {
  for (bool gz : {false, true}) {
    INFO((gz ? "gzipped" : "plain"));
    const std::string suffix = gz ? ".gz" : "";
    auto write = gz ? write_gz : write_plain;
    const std::string dir = fresh_dir(gz ? "mnist_bad_gz" : "mnist_bad_plain");
    write_synthetic(dir, gz);
    const std::string images = dir + "/train-images-idx3-ubyte" + suffix;
    const std::string labels = dir + "/train-labels-idx1-ubyte" + suffix;
    const Bytes good = kTrain.image_file();  // 16 + 6 * 12 = 88 bytes

    // Truncated.
    write(images, Bytes(good.begin(), good.begin() + 50));
    REQUIRE_THROWS_WITH(get_mnist(in_dir(dir)), Catch::Contains("get_mnist") && Catch::Contains(images) &&
                                                    Catch::Contains("expected 88 bytes, got 50") &&
                                                    Catch::Contains("truncated"));
    // Over-long.
    Bytes longer = good;
    longer.push_back(7);
    write(images, longer);
    REQUIRE_THROWS_WITH(get_mnist(in_dir(dir)), Catch::Contains(images) && Catch::Contains("expected 88 bytes, got 89") &&
                                                    Catch::Contains("longer"));
    // Truncated inside the header, and too short for a magic number.
    write(images, Bytes(good.begin(), good.begin() + 10));
    REQUIRE_THROWS_WITH(get_mnist(in_dir(dir)), Catch::Contains(images) && Catch::Contains("truncated header"));
    write(images, Bytes{0, 0});
    REQUIRE_THROWS_WITH(get_mnist(in_dir(dir)), Catch::Contains(images) && Catch::Contains("too short"));
    write(images, Bytes{});
    REQUIRE_THROWS_WITH(get_mnist(in_dir(dir)), Catch::Contains(images) && Catch::Contains("0 bytes"));
    // Bad magic: a label file where the images should be, and garbage.
    write(images, kTrain.label_file());
    REQUIRE_THROWS_WITH(get_mnist(in_dir(dir)), Catch::Contains(images) && Catch::Contains("bad magic number 2049") &&
                                                    Catch::Contains("expected 2051"));
    write(images, Bytes{'G', 'I', 'F', '8', '9', 'a'});
    REQUIRE_THROWS_WITH(get_mnist(in_dir(dir)), Catch::Contains(images) && Catch::Contains("bad magic number"));
    write(images, good);
    write(labels, kTrain.image_file());
    REQUIRE_THROWS_WITH(get_mnist(in_dir(dir)), Catch::Contains(labels) && Catch::Contains("bad magic number 2051") &&
                                                    Catch::Contains("expected 2049"));
    // Image and label counts disagree.
    write(labels, Synthetic(5, 4, 3, 1).label_file());
    REQUIRE_THROWS_WITH(get_mnist(in_dir(dir)), Catch::Contains(images) && Catch::Contains(labels) &&
                                                    Catch::Contains("6 images") && Catch::Contains("5 labels"));
    write(labels, kTrain.label_file());
    REQUIRE(get_mnist(in_dir(dir)).first->size() == 6);  // repaired
  }
}

TEST_CASE("get_mnist: a corrupt gzip stream, a missing file, bad options") {
  const std::string dir = fresh_dir("mnist_corrupt");
  write_synthetic(dir, true);
  // Cut the compressed stream in half.
  const std::string images = dir + "/train-images-idx3-ubyte.gz";
  std::ifstream in(images, std::ios::binary);
  Bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  gz.resize(gz.size() / 2);
  write_plain(images, gz);
  REQUIRE_THROWS_WITH(get_mnist(in_dir(dir)), Catch::Contains(images) && Catch::Contains("gzip"));

  const std::string empty = fresh_dir("mnist_missing");
  REQUIRE_THROWS_WITH(get_mnist(in_dir(empty)),
                      Catch::Contains("train-images-idx3-ubyte") && Catch::Contains(empty) &&
                          Catch::Contains("dataset-fashion-mnist") && Catch::Contains("TANDEM_MNIST_DIR"));
  REQUIRE_THROWS_WITH(get_mnist(in_dir(empty + "/nope")), Catch::Contains("no such directory"));
  write_synthetic(empty, false);
  fs::remove(empty + "/t10k-labels-idx1-ubyte");
  REQUIRE_THROWS_WITH(get_mnist(in_dir(empty)), Catch::Contains("t10k-labels-idx1-ubyte"));

  MnistOptions options = in_dir(dir);
  options.ndim = 4;
  REQUIRE_THROWS_WITH(get_mnist(options), Catch::Contains("ndim") && Catch::Contains("4"));
  options = in_dir(dir);
  options.dtype = DType::i32;
  REQUIRE_THROWS_WITH(get_mnist(options), Catch::Contains("dtype") && Catch::Contains("i32"));
  options = in_dir(dir);
  options.label_dtype = DType::f32;
  REQUIRE_THROWS_WITH(get_mnist(options), Catch::Contains("label_dtype") && Catch::Contains("f32"));
}

// ---- read_idx / parse_idx ----

TEST_CASE("read_idx decodes every IDX element type, plain and gzipped") {
  const std::string dir = fresh_dir("idx_types");
  // u8 [2, 2]
  write_plain(dir + "/u8", idx_bytes(0x08, {2, 2}, {0, 1, 128, 255}));
  Tensor u8 = read_idx(dir + "/u8");
  REQUIRE(u8.dtype() == DType::i32);
  REQUIRE(u8.shape() == Shape{2, 2});
  REQUIRE(u8.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 1, 128, 255});
  write_gz(dir + "/u8.gz", idx_bytes(0x08, {2, 2}, {0, 1, 128, 255}));
  REQUIRE(read_idx(dir + "/u8.gz", DType::f32).to_vector<float>() == std::vector<float>{0, 1, 128, 255});
  // i8 [3]
  write_plain(dir + "/i8", idx_bytes(0x09, {3}, {0x80, 0xFF, 0x7F}));
  REQUIRE(read_idx(dir + "/i8", DType::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>{-128, -1, 127});
  // i16 [2]: -2, 0x1234
  write_plain(dir + "/i16", idx_bytes(0x0B, {2}, {0xFF, 0xFE, 0x12, 0x34}));
  REQUIRE(read_idx(dir + "/i16").to_vector<std::int32_t>() == std::vector<std::int32_t>{-2, 0x1234});
  // i32 [1, 2]: -100000, 0x7FFFFFFF
  Bytes i32;
  put_be32(i32, static_cast<std::uint32_t>(-100000));
  put_be32(i32, 0x7FFFFFFF);
  write_plain(dir + "/i32", idx_bytes(0x0C, {1, 2}, i32));
  REQUIRE(read_idx(dir + "/i32", DType::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>{-100000, 0x7FFFFFFF});
  // f32 [2]: 1.5, -0.25
  Bytes f32;
  for (float v : {1.5f, -0.25f}) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    put_be32(f32, bits);
  }
  write_plain(dir + "/f32", idx_bytes(0x0D, {2}, f32));
  REQUIRE(read_idx(dir + "/f32", DType::f32).to_vector<float>() == std::vector<float>{1.5f, -0.25f});
  REQUIRE_THROWS_WITH(read_idx(dir + "/f32"), Catch::Contains("f32 IDX data to i32"));
  // f64 [] (a scalar): 0.1
  Bytes f64;
  const double tenth = 0.1;
  std::uint64_t bits;
  std::memcpy(&bits, &tenth, 8);
  put_be32(f64, static_cast<std::uint32_t>(bits >> 32));
  put_be32(f64, static_cast<std::uint32_t>(bits));
  write_plain(dir + "/f64", idx_bytes(0x0E, {}, f64));
  Tensor scalar = read_idx(dir + "/f64", DType::f64);
  REQUIRE(scalar.shape() == Shape{});
  REQUIRE(scalar.item() == 0.1);
  // Zero extents.
  write_plain(dir + "/empty", idx_bytes(0x08, {0, 28, 28}, {}));
  REQUIRE(read_idx(dir + "/empty").shape() == Shape{0, 28, 28});
  // Decoding to bool is refused; a missing file names its path.
  REQUIRE_THROWS_WITH(read_idx(dir + "/u8", DType::boolean), Catch::Contains("bool"));
  REQUIRE_THROWS_WITH(read_idx(dir + "/absent"), Catch::Contains("read_idx") && Catch::Contains(dir + "/absent") &&
                                                     Catch::Contains("No such file"));
}

TEST_CASE("parse_idx_header rejects malformed headers") {
  auto error_of = [](const Bytes& b) {
    try {
      parse_idx_header(b.data(), b.size(), "ctx");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  REQUIRE_THAT(error_of({}), Catch::StartsWith("ctx: too short"));
  REQUIRE_THAT(error_of({1, 0, 8, 1, 0, 0, 0, 0}), Catch::StartsWith("ctx: not an IDX file"));
  REQUIRE_THAT(error_of({0, 0, 0x0A, 1, 0, 0, 0, 0}), Catch::Contains("unknown IDX element type 0x0a"));
  REQUIRE_THAT(error_of({0, 0, 8, 2, 0, 0, 0, 1}), Catch::Contains("truncated header") && Catch::Contains("12-byte"));
  // Extents whose product overflows 64 bits, and a plausible but huge payload.
  Bytes huge{0, 0, 0x0E, 3};
  for (int d = 0; d < 3; ++d) put_be32(huge, 0xFFFFFFFF);
  REQUIRE_THAT(error_of(huge), Catch::Contains("too large"));
  Bytes big{0, 0, 0x08, 2};
  put_be32(big, 0xFFFFFFFF);
  put_be32(big, 0xFFFFFFFF);
  REQUIRE_THAT(error_of(big), Catch::Contains("expected 18446744065119617037 bytes, got 12"));
  // An overflowing product is fine when another extent is zero.
  Bytes zero{0, 0, 0x0E, 3};
  put_be32(zero, 0xFFFFFFFF);
  put_be32(zero, 0);
  put_be32(zero, 0xFFFFFFFF);
  REQUIRE(parse_idx_header(zero.data(), zero.size(), "ctx").shape == Shape{0xFFFFFFFFll, 0, 0xFFFFFFFFll});
  const IdxHeader h = parse_idx_header(kTrain.image_file().data(), 88, "ctx");
  REQUIRE(h.magic == 2051);
  REQUIRE(h.type_code == 0x08);
  REQUIRE(h.shape == Shape{6, 4, 3});
  REQUIRE(h.header_bytes == 16);
  REQUIRE(h.element_bytes == 1);
}

TEST_CASE("parse_idx never reads out of bounds: every prefix and random corruptions") {
  // Each input is copied into a buffer of exactly its size, so an overread would touch memory
  // outside the allocation (caught by sanitizers; here: must not crash, must throw Error).
  std::vector<Bytes> seeds{kTrain.image_file(), kTrain.label_file(), idx_bytes(0x0E, {2, 1}, Bytes(16, 0x3F)),
                           idx_bytes(0x0B, {3}, Bytes(6, 0x80))};
  std::mt19937_64 engine(123);
  int parsed = 0, rejected = 0;
  auto attempt = [&](const Bytes& b) {
    std::unique_ptr<std::uint8_t[]> exact(new std::uint8_t[b.size() ? b.size() : 1]);
    if (!b.empty()) std::memcpy(exact.get(), b.data(), b.size());
    try {
      const DType dtype = (b.size() > 2 && (b[2] == 0x0D || b[2] == 0x0E)) ? DType::f64 : DType::i64;
      Tensor t = parse_idx(exact.get(), b.size(), dtype);
      ++parsed;
    } catch (const Error&) {
      ++rejected;
    }
  };
  for (const Bytes& seed : seeds) {
    for (std::size_t len = 0; len <= seed.size() + 2; ++len) {
      Bytes b(seed.begin(), seed.begin() + std::min(len, seed.size()));
      b.resize(len, 0);
      attempt(b);
    }
    for (int k = 0; k < 2000; ++k) {
      Bytes b = seed;
      const int flips = 1 + static_cast<int>(engine() % 4);
      for (int f = 0; f < flips; ++f) b[engine() % std::min<std::size_t>(b.size(), 24)] = static_cast<std::uint8_t>(engine());
      attempt(b);
    }
  }
  REQUIRE(parsed > 0);
  REQUIRE(rejected > 0);
}

TEST_CASE("read_file_maybe_gzip reads every byte whatever the file announces: one member, several, plain") {
  const std::string dir = fresh_dir("announced");
  Bytes first, second;
  for (int i = 0; i < 5 * (1 << 20) + 3; ++i) first.push_back(static_cast<std::uint8_t>(i * 7 + i / 255));
  for (int i = 0; i < 3 * (1 << 20) + 1; ++i) second.push_back(static_cast<std::uint8_t>(i * 13));
  Bytes both = first;
  both.insert(both.end(), second.begin(), second.end());
  // One member: its trailer gives the exact length, read in place.
  write_gz(dir + "/one.gz", first);
  REQUIRE(read_file_maybe_gzip(dir + "/one.gz") == first);
  // Two members (gzopen "ab" appends one): the last trailer announces the second's length only,
  // so reading goes on past the announced size.
  write_gz(dir + "/two.gz", first);
  gzFile file = gzopen((dir + "/two.gz").c_str(), "ab");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, second.data(), static_cast<unsigned>(second.size())) == static_cast<int>(second.size()));
  REQUIRE(gzclose(file) == Z_OK);
  REQUIRE(read_file_maybe_gzip(dir + "/two.gz") == both);
  write_plain(dir + "/plain", both);
  REQUIRE(read_file_maybe_gzip(dir + "/plain") == both);
  write_plain(dir + "/empty", {});
  REQUIRE(read_file_maybe_gzip(dir + "/empty").empty());
}
