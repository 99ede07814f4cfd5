#include "data/mnist.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/memory_stats.h"

namespace tandem {

namespace {

constexpr std::uint32_t kImagesMagic = 2051;  // 0x00000803: u8, 3 axes
constexpr std::uint32_t kLabelsMagic = 2049;  // 0x00000801: u8, 1 axis

std::uint32_t load_be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}

std::uint64_t load_be64(const std::uint8_t* p) {
  return (std::uint64_t{load_be32(p)} << 32) | load_be32(p + 4);
}

std::size_t idx_element_bytes(std::uint8_t type_code) {
  switch (type_code) {
    case 0x08: return 1;
    case 0x09: return 1;
    case 0x0B: return 2;
    case 0x0C: return 4;
    case 0x0D: return 4;
    case 0x0E: return 8;
    default: return 0;
  }
}

const char* idx_type_name(std::uint8_t type_code) {
  switch (type_code) {
    case 0x08: return "u8";
    case 0x09: return "i8";
    case 0x0B: return "i16";
    case 0x0C: return "i32";
    case 0x0D: return "f32";
    case 0x0E: return "f64";
    default: return "unknown";
  }
}

std::string hex(std::uint64_t value, int digits) {
  std::ostringstream out;
  out << "0x" << std::hex << std::setw(digits) << std::setfill('0') << value;
  return out.str();
}

// Element i of the payload as T. The caller has checked that floating data only goes to a
// floating T, so no float-to-integer conversion (undefined for NaN or out-of-range values)
// ever happens.
template <typename T>
void decode_idx(const std::uint8_t* payload, std::int64_t count, std::uint8_t type_code, T* out) {
  switch (type_code) {
    case 0x08:
      for (std::int64_t i = 0; i < count; ++i) out[i] = static_cast<T>(payload[i]);
      break;
    case 0x09:
      for (std::int64_t i = 0; i < count; ++i) out[i] = static_cast<T>(static_cast<std::int8_t>(payload[i]));
      break;
    case 0x0B:
      for (std::int64_t i = 0; i < count; ++i) {
        const std::uint16_t bits = static_cast<std::uint16_t>((payload[2 * i] << 8) | payload[2 * i + 1]);
        out[i] = static_cast<T>(static_cast<std::int16_t>(bits));
      }
      break;
    case 0x0C:
      for (std::int64_t i = 0; i < count; ++i)
        out[i] = static_cast<T>(static_cast<std::int32_t>(load_be32(payload + 4 * i)));
      break;
    case 0x0D:
      for (std::int64_t i = 0; i < count; ++i) {
        const std::uint32_t bits = load_be32(payload + 4 * i);
        float value;
        std::memcpy(&value, &bits, sizeof value);
        out[i] = static_cast<T>(value);
      }
      break;
    case 0x0E:
      for (std::int64_t i = 0; i < count; ++i) {
        const std::uint64_t bits = load_be64(payload + 8 * i);
        double value;
        std::memcpy(&value, &bits, sizeof value);
        out[i] = static_cast<T>(value);
      }
      break;
    default:
      TANDEM_FAIL("parse_idx: unknown IDX element type ", hex(type_code, 2));
  }
}

// Tensors count elements (and compute strides) in int64, so a shape whose non-zero extents
// multiply past 2^63 cannot become one, even when another extent is 0 and there is no data.
void check_tensor_shape(const Shape& shape, const std::string& context) {
  std::int64_t product = 1;
  for (std::int64_t extent : shape) {
    if (extent == 0) continue;
    TANDEM_CHECK(product <= std::numeric_limits<std::int64_t>::max() / extent, context, ": the shape ", shape,
                 " is too large for a tensor (its non-zero extents multiply past 2^63)");
    product *= extent;
  }
}

struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};

}  // namespace

// ---- IDX ------------------------------------------------------------------------------------

IdxHeader parse_idx_header(const std::uint8_t* data, std::size_t size, const std::string& context) {
  TANDEM_CHECK(data != nullptr || size == 0, context, ": null data");
  TANDEM_CHECK(size >= 4, context, ": too short for an IDX file: ", size,
               " bytes, but the magic number alone takes 4");
  IdxHeader header;
  header.magic = load_be32(data);
  TANDEM_CHECK(data[0] == 0 && data[1] == 0, context, ": not an IDX file: its magic number ", header.magic, " (",
               hex(header.magic, 8), ") does not start with two zero bytes");
  header.type_code = data[2];
  header.element_bytes = idx_element_bytes(header.type_code);
  TANDEM_CHECK(header.element_bytes != 0, context, ": unknown IDX element type ", hex(header.type_code, 2),
               " in magic number ", header.magic,
               " (known: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64)");
  const std::size_t ndim = data[3];
  header.header_bytes = 4 + 4 * ndim;
  TANDEM_CHECK(size >= header.header_bytes, context, ": truncated header: ", ndim, " axes need a ",
               header.header_bytes, "-byte header, but there are only ", size, " bytes");

  bool any_zero = false;
  for (std::size_t d = 0; d < ndim; ++d) {
    const std::uint32_t extent = load_be32(data + 4 + 4 * d);
    header.shape.push_back(static_cast<std::int64_t>(extent));
    any_zero = any_zero || extent == 0;
  }
  // The payload size, with every multiplication checked for overflow.
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t count = 1;
  bool overflow = false;
  if (any_zero) {
    count = 0;
  } else {
    for (std::int64_t extent : header.shape) {
      const auto e = static_cast<std::uint64_t>(extent);
      if (count > kMax / e) {
        overflow = true;
        break;
      }
      count *= e;
    }
  }
  overflow = overflow || count > (kMax - header.header_bytes) / header.element_bytes;
  TANDEM_CHECK(!overflow, context, ": the header declares ", idx_type_name(header.type_code), " data of shape ",
               header.shape, ", which is too large (over 2^64 bytes); the file has ", size, " bytes");
  const std::uint64_t expected = header.header_bytes + count * header.element_bytes;
  TANDEM_CHECK(expected == size, context, ": expected ", expected, " bytes, got ", size,
               size < expected ? " (truncated" : " (longer than the header says", "; the header declares ",
               idx_type_name(header.type_code), " data of shape ", header.shape, ")");
  return header;
}

Tensor parse_idx(const std::uint8_t* data, std::size_t size, DType dtype, const std::string& context) {
  const IdxHeader header = parse_idx_header(data, size, context);
  const bool floating_data = header.type_code == 0x0D || header.type_code == 0x0E;
  TANDEM_CHECK(dtype != DType::boolean && (!floating_data || is_floating(dtype)), context, ": cannot decode ",
               idx_type_name(header.type_code), " IDX data to ", dtype_name(dtype),
               floating_data ? " (floating data decodes to f32 or f64)" : " (decode to a numeric dtype)");
  check_tensor_shape(header.shape, context);
  Tensor out(header.shape, dtype);
  const std::uint8_t* payload = data + header.header_bytes;
  TANDEM_DISPATCH_NUMERIC(dtype, "parse_idx", [&] {
    decode_idx(payload, out.numel(), header.type_code, out.data<scalar_t>());
  });
  return out;
}

namespace {

// The bytes a file will read as: a gzip file's trailer gives its data's length modulo 2^32 (one
// member, as the MNIST files are; otherwise only a first guess), bounded by what deflate can
// expand the file to; a plain file its own size; 0 when unknown.
std::size_t announced_size(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return 0;
  const std::streamoff file_size = in.tellg();
  unsigned char head[2] = {0, 0}, tail[4] = {0, 0, 0, 0};
  in.seekg(0);
  in.read(reinterpret_cast<char*>(head), 2);
  if (!in || file_size < 18 || head[0] != 0x1f || head[1] != 0x8b) return file_size > 0 ? std::size_t(file_size) : 0;
  in.seekg(file_size - 4);
  in.read(reinterpret_cast<char*>(tail), 4);
  if (!in) return 0;
  const std::size_t announced =
      std::size_t(tail[0]) | std::size_t(tail[1]) << 8 | std::size_t(tail[2]) << 16 | std::size_t(tail[3]) << 24;
  // Deflate expands at most about 1032 to 1: a corrupt trailer must not reserve more than that.
  return std::min(announced, std::size_t(file_size) * 1032);
}

}  // namespace

std::vector<std::uint8_t> read_file_maybe_gzip(const std::string& path, const std::string& op) {
  errno = 0;
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  TANDEM_CHECK(file != nullptr, op, ": ", path, ": cannot open: ", errno ? std::strerror(errno) : "out of memory");
  gzbuffer(file.get(), 1 << 20);
  // Reserved at the size the file announces, so that the bytes are read in place: growing the
  // vector as it filled held up to three times the data at once (old buffer, new one, and the
  // copy of shrink_to_fit), pages the allocator then kept.
  std::vector<std::uint8_t> bytes;
  bytes.reserve(announced_size(path) + 1);  // one byte more: the read that finds the end
  constexpr std::size_t kChunk = std::size_t(1) << 22;
  for (;;) {
    const std::size_t old_size = bytes.size();
    const std::size_t room = bytes.capacity() - old_size;
    const std::size_t asked = std::min(room > 0 ? room : kChunk, kChunk);  // room 0: longer than announced
    bytes.resize(old_size + asked);
    errno = 0;
    const int got = gzread(file.get(), bytes.data() + old_size, static_cast<unsigned>(asked));
    if (got < 0) {
      int err = Z_OK;
      const std::string message = gzerror(file.get(), &err);
      TANDEM_FAIL(op, ": ", path, ": ",
                  err == Z_ERRNO ? "read error: " : "corrupt or truncated gzip data: ",
                  err == Z_ERRNO && errno ? std::strerror(errno) : message.c_str());
    }
    bytes.resize(old_size + static_cast<std::size_t>(got));
    if (static_cast<std::size_t>(got) < asked) break;
  }
  int err = Z_OK;
  const std::string message = gzerror(file.get(), &err);
  TANDEM_CHECK(err == Z_OK || err == Z_STREAM_END, op, ": ", path, ": corrupt or truncated gzip data: ", message);
  const int closed = gzclose(file.release());
  TANDEM_CHECK(closed == Z_OK, op, ": ", path, ": corrupt or truncated gzip data (gzclose returned ", closed, ")");
  if (bytes.capacity() > bytes.size() + kChunk) bytes.shrink_to_fit();  // it grew past the announced size
  return bytes;
}

Tensor read_idx(const std::string& path, DType dtype) {
  const std::vector<std::uint8_t> bytes = read_file_maybe_gzip(path, "read_idx");
  return parse_idx(bytes.data(), bytes.size(), dtype, "read_idx: " + path);
}

// ---- MNIST ------------------------------------------------------------------------------------

std::string default_mnist_dir() {
  const char* dir = std::getenv("TANDEM_MNIST_DIR");
  if (dir != nullptr && dir[0] != '\0') return dir;
  return "/usr/share/datasets/fashion-mnist";
}

namespace {

// dir/name, or dir/name.gz when only that exists.
std::string find_mnist_file(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path plain = fs::path(dir) / name;
  if (fs::exists(plain, ec)) return plain.string();
  const fs::path gz = fs::path(dir) / (name + ".gz");
  if (fs::exists(gz, ec)) return gz.string();
  const bool dir_exists = fs::is_directory(dir, ec);
  TANDEM_FAIL("get_mnist: cannot find ", name, " or ", name, ".gz in ", dir,
              dir_exists ? "" : " (no such directory)",
              ". Install the data (apt-get install dataset-fashion-mnist puts Fashion-MNIST in "
              "/usr/share/datasets/fashion-mnist), or set TANDEM_MNIST_DIR (or MnistOptions::dir) to a "
              "directory with the MNIST IDX files");
}

// The bytes of an MNIST file whose magic number must be `magic`, and its validated header.
IdxHeader read_mnist_file(const std::string& path, std::uint32_t magic, const char* what,
                          std::vector<std::uint8_t>& bytes) {
  bytes = read_file_maybe_gzip(path, "get_mnist");
  const std::string context = "get_mnist: " + path;
  if (bytes.size() >= 4) {
    const std::uint32_t found = load_be32(bytes.data());
    TANDEM_CHECK(found == magic, context, ": bad magic number ", found, " (", hex(found, 8), "); expected ", magic,
                 " (", hex(magic, 8), ") for an IDX ", what, " file");
  }
  return parse_idx_header(bytes.data(), bytes.size(), context);
}

Tensor load_images(const std::string& path, const MnistOptions& options) {
  std::vector<std::uint8_t> bytes;
  const IdxHeader header = read_mnist_file(path, kImagesMagic, "image", bytes);
  // The magic number fixes u8 data of 3 axes: [count, rows, cols].
  check_tensor_shape(header.shape, "get_mnist: " + path);
  const std::int64_t n = header.shape[0], rows = header.shape[1], cols = header.shape[2];
  Shape shape;
  switch (options.ndim) {
    case 1: shape = {n, rows * cols}; break;
    case 2: shape = {n, rows, cols}; break;
    default: shape = {n, 1, rows, cols}; break;
  }
  Tensor images(shape, options.dtype);
  const std::uint8_t* pixels = bytes.data() + header.header_bytes;
  TANDEM_DISPATCH_FLOAT(options.dtype, "get_mnist", [&] {
    std::array<scalar_t, 256> table;
    for (int v = 0; v < 256; ++v) table[v] = static_cast<scalar_t>(v * options.scale / 255.0);
    scalar_t* out = images.data<scalar_t>();
    const std::int64_t count = images.numel();
    for (std::int64_t i = 0; i < count; ++i) out[i] = table[pixels[i]];
  });
  return images;
}

Tensor load_labels(const std::string& path, const MnistOptions& options) {
  std::vector<std::uint8_t> bytes;
  const IdxHeader header = read_mnist_file(path, kLabelsMagic, "label", bytes);
  return parse_idx(bytes.data(), bytes.size(), options.label_dtype, "get_mnist: " + path);
}

std::shared_ptr<TupleDataset> load_split(const std::string& dir, const std::string& prefix,
                                         const MnistOptions& options) {
  const std::string images_path = find_mnist_file(dir, prefix + "-images-idx3-ubyte");
  std::string labels_path;
  if (options.withlabel) labels_path = find_mnist_file(dir, prefix + "-labels-idx1-ubyte");
  Tensor images = load_images(images_path, options);
  if (!options.withlabel) return std::make_shared<TupleDataset>(std::vector<Tensor>{images});
  Tensor labels = load_labels(labels_path, options);
  TANDEM_CHECK(images.shape()[0] == labels.shape()[0], "get_mnist: ", images_path, " holds ", images.shape()[0],
               " images but ", labels_path, " holds ", labels.shape()[0], " labels");
  return std::make_shared<TupleDataset>(std::vector<Tensor>{images, labels});
}

}  // namespace

std::pair<std::shared_ptr<TupleDataset>, std::shared_ptr<TupleDataset>> get_mnist(const MnistOptions& options) {
  TANDEM_CHECK(options.ndim >= 1 && options.ndim <= 3, "get_mnist: ndim must be 1 ([784]), 2 ([28, 28]) or 3 "
               "([1, 28, 28]), got ", options.ndim);
  TANDEM_CHECK(is_floating(options.dtype), "get_mnist: dtype must be f32 or f64, got ", options.dtype,
               " (read_idx gives the raw pixel values as integers)");
  TANDEM_CHECK(options.label_dtype == DType::i32 || options.label_dtype == DType::i64,
               "get_mnist: label_dtype must be i32 or i64, got ", options.label_dtype);
  TANDEM_CHECK(std::isfinite(options.scale), "get_mnist: scale must be finite, got ", options.scale);
  const std::string dir = options.dir.empty() ? default_mnist_dir() : options.dir;
  auto train = load_split(dir, "train", options);
  auto test = load_split(dir, "t10k", options);
  release_free_malloc_memory();  // the files' bytes, freed: nothing reuses them soon
  return {std::move(train), std::move(test)};
}

}  // namespace tandem
