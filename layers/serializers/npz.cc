#include "layers/serializers/npz.h"

#include "core/ops/shape_ops.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tandem {

namespace {

// ---- little-endian byte helpers ----

void put16(std::string& out, std::uint32_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>((v >> 8) & 0xff));
}

void put32(std::string& out, std::uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}

// Reads fixed-size little-endian fields with bounds checks.
class Reader {
 public:
  Reader(const std::string& bytes, const std::string& source) : bytes_(bytes), source_(source) {}
  std::uint32_t u16(std::size_t at) const { return byte(at) | byte(at + 1) << 8; }
  std::uint32_t u32(std::size_t at) const { return u16(at) | u16(at + 2) << 16; }
  std::string slice(std::size_t at, std::size_t length) const {
    TANDEM_CHECK(at <= bytes_.size() && length <= bytes_.size() - at, "npz: ", source_, " is truncated or corrupt (",
                 length, " bytes at offset ", at, " lie beyond its end, ", bytes_.size(), " bytes)");
    return bytes_.substr(at, length);
  }
  std::size_t size() const { return bytes_.size(); }

 private:
  std::uint32_t byte(std::size_t at) const {
    TANDEM_CHECK(at < bytes_.size(), "npz: ", source_, " is truncated or corrupt (read at offset ", at, " beyond its end, ",
                 bytes_.size(), " bytes)");
    return static_cast<unsigned char>(bytes_[at]);
  }
  const std::string& bytes_;
  const std::string& source_;
};

std::uint32_t crc32_of(const std::string& data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  std::size_t done = 0;
  while (done < data.size()) {  // zlib takes uInt lengths
    const uInt chunk = static_cast<uInt>(std::min<std::size_t>(data.size() - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + done), chunk);
    done += chunk;
  }
  return static_cast<std::uint32_t>(crc);
}

const char* npy_descr(DType dtype) {
  switch (dtype) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::boolean: return "|b1";
    case DType::f16: return "<f2";
    // NumPy has no bfloat16: its bits as a 2-byte void type, as ml_dtypes' bfloat16 arrays are
    // saved (np.load(...).view(ml_dtypes.bfloat16) reads them; docs/tensors-and-autograd.md).
    case DType::bf16: return "|V2";
  }
  return "";
}

DType dtype_from_descr(const std::string& descr, const std::string& source) {
  // '<' little-endian, '=' native (little on the machines tandem supports), '|' not applicable.
  const std::string code = descr.size() == 3 && (descr[0] == '<' || descr[0] == '=' || descr[0] == '|') ? descr.substr(1) : descr;
  if (code == "f4") return DType::f32;
  if (code == "f8") return DType::f64;
  if (code == "i4") return DType::i32;
  if (code == "i8") return DType::i64;
  if (code == "b1") return DType::boolean;
  if (code == "f2") return DType::f16;
  if (code == "V2") return DType::bf16;
  TANDEM_FAIL("npz: ", source, " holds an array of numpy dtype '", descr,
              "', which tandem does not support (f4, f8, f2, i4, i8, b1 little-endian, and V2 for bfloat16)");
}

// The value that follows 'key': in a .npy header dict.
std::string header_field(const std::string& header, const std::string& key, const std::string& source) {
  const std::string quoted = "'" + key + "'";
  std::size_t at = header.find(quoted);
  TANDEM_CHECK(at != std::string::npos, "npz: ", source, ": the .npy header has no ", quoted, " field: ", header);
  at = header.find(':', at + quoted.size());
  TANDEM_CHECK(at != std::string::npos, "npz: ", source, ": malformed .npy header: ", header);
  ++at;
  while (at < header.size() && header[at] == ' ') ++at;
  std::size_t end = at;
  if (at < header.size() && header[at] == '(') {
    end = header.find(')', at);
    TANDEM_CHECK(end != std::string::npos, "npz: ", source, ": malformed shape in .npy header: ", header);
    return header.substr(at + 1, end - at - 1);
  }
  if (at < header.size() && header[at] == '\'') {
    end = header.find('\'', at + 1);
    TANDEM_CHECK(end != std::string::npos, "npz: ", source, ": malformed .npy header: ", header);
    return header.substr(at + 1, end - at - 1);
  }
  while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  return header.substr(at, end - at);
}

Shape parse_shape(const std::string& text, const std::string& source) {
  Shape shape;
  std::size_t at = 0;
  while (at < text.size()) {
    while (at < text.size() && (text[at] == ' ' || text[at] == ',')) ++at;
    if (at >= text.size()) break;
    std::size_t end = at;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    TANDEM_CHECK(end > at && end - at <= 15, "npz: ", source, ": malformed shape (", text, ") in .npy header");
    shape.push_back(std::stoll(text.substr(at, end - at)));
    at = end;
    if (at < text.size() && text[at] == 'L') ++at;  // Python 2 long suffix
  }
  return shape;
}

std::string inflate_raw(const std::string& compressed, std::size_t expected, const std::string& source) {
  std::string out(expected, '\0');
  z_stream stream{};
  TANDEM_CHECK(inflateInit2(&stream, -MAX_WBITS) == Z_OK, "npz: ", source, ": zlib inflateInit2 failed");
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(expected);
  const int status = inflate(&stream, Z_FINISH);
  const std::size_t produced = stream.total_out;
  inflateEnd(&stream);
  TANDEM_CHECK(status == Z_STREAM_END && produced == expected, "npz: ", source,
               ": a deflated entry is corrupt (zlib status ", status, ", ", produced, " of ", expected, " bytes)");
  return out;
}

}  // namespace

std::string encode_npy(const Tensor& tensor) {
  TANDEM_CHECK(tensor.defined(), "npz: cannot save an undefined tensor");
  const Tensor host = tensor.to(Device::cpu());
  std::string shape;
  for (std::int64_t extent : host.shape()) shape += std::to_string(extent) + ", ";
  if (host.dim() == 1) shape.pop_back();  // "(3,)"
  else if (!shape.empty()) shape.erase(shape.size() - 2);
  std::string header = std::string("{'descr': '") + npy_descr(host.dtype()) + "', 'fortran_order': False, 'shape': (" +
                       shape + "), }";
  // NumPy pads the header with spaces so that the data starts at a multiple of 64 bytes.
  const std::size_t preamble = 10;
  const std::size_t total = (preamble + header.size() + 1 + 63) / 64 * 64;
  header.append(total - preamble - header.size() - 1, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  put16(out, static_cast<std::uint32_t>(header.size()));
  out += header;
  out.append(static_cast<const char*>(host.raw_data()), host.nbytes());
  return out;
}

Tensor decode_npy(const std::string& bytes, const std::string& source) {
  Reader reader(bytes, source);
  TANDEM_CHECK(bytes.size() >= 10 && bytes.compare(0, 6, "\x93NUMPY") == 0, "npz: ", source,
               " is not a .npy array (bad magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  TANDEM_CHECK(major >= 1 && major <= 3, "npz: ", source, ": unsupported .npy version ", major);
  const std::size_t header_length = major == 1 ? reader.u16(8) : reader.u32(8);
  const std::size_t data_start = (major == 1 ? 10 : 12) + header_length;
  const std::string header = reader.slice(major == 1 ? 10 : 12, header_length);
  const DType dtype = dtype_from_descr(header_field(header, "descr", source), source);
  const std::string fortran = header_field(header, "fortran_order", source);
  const Shape shape = parse_shape(header_field(header, "shape", source), source);
  // shape_numel and the byte count multiply the extents in int64: keep every partial product
  // (that of the non-zero extents bounds them all, even when a later extent is 0) below 2^59.
  std::int64_t nonzero_numel = 1;
  for (std::int64_t extent : shape) {
    TANDEM_CHECK(extent >= 0 && extent < (std::int64_t(1) << 40), "npz: ", source, ": bad extent in shape");
    if (extent == 0) continue;
    TANDEM_CHECK(nonzero_numel <= (std::int64_t(1) << 59) / extent, "npz: ", source, ": shape ", shape_str(shape),
                 " is too large");
    nonzero_numel *= extent;
  }
  const std::size_t nbytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  TANDEM_CHECK(data_start <= bytes.size() && bytes.size() - data_start == nbytes, "npz: ", source, ": expected ", nbytes,
               " bytes of ", dtype_name(dtype), shape_str(shape), " data, found ",
               bytes.size() >= data_start ? bytes.size() - data_start : 0);
  // Tensors hold booleans as C++ bool, for which any byte but 0 and 1 is undefined behaviour.
  if (dtype == DType::boolean) {
    const auto bad = std::find_if(bytes.begin() + static_cast<std::ptrdiff_t>(data_start), bytes.end(),
                                  [](char c) { return c != 0 && c != 1; });
    TANDEM_CHECK(bad == bytes.end(), "npz: ", source, ": a bool array holds the byte ",
                 int(static_cast<unsigned char>(*bad)), " (booleans are 0 or 1)");
  }
  if (fortran.rfind("True", 0) == 0 && shape.size() > 1) {
    // Column-major data is the row-major array of the reversed shape, transposed.
    const Shape reversed(shape.rbegin(), shape.rend());
    return transpose(from_buffer(bytes.data() + data_start, reversed, dtype));
  }
  Tensor out = from_buffer(bytes.data() + data_start, shape, dtype);
  return out;
}

void write_npz(const std::string& path, const NamedTensors& arrays) {
  std::string archive, directory;
  for (const auto& [name, tensor] : arrays) {
    TANDEM_CHECK(!name.empty() && name.size() < 60000, "npz: bad array name '", name, "' for ", path);
    const std::string entry = name + ".npy";
    const std::string data = encode_npy(tensor);
    TANDEM_CHECK(data.size() < 0xffffffffu && archive.size() < 0xffffffffu, "npz: ", path,
                 ": archives over 4 GiB (zip64) are not supported");
    const std::uint32_t crc = crc32_of(data);
    const auto offset = static_cast<std::uint32_t>(archive.size());
    // Local file header: stored (method 0), no timestamps.
    put32(archive, 0x04034b50); put16(archive, 20); put16(archive, 0); put16(archive, 0);
    put16(archive, 0); put16(archive, 0x21);  // time 00:00, date 1980-01-01
    put32(archive, crc); put32(archive, static_cast<std::uint32_t>(data.size()));
    put32(archive, static_cast<std::uint32_t>(data.size()));
    put16(archive, static_cast<std::uint32_t>(entry.size())); put16(archive, 0);
    archive += entry;
    archive += data;
    // Central directory record.
    put32(directory, 0x02014b50); put16(directory, 20); put16(directory, 20); put16(directory, 0);
    put16(directory, 0); put16(directory, 0); put16(directory, 0x21);
    put32(directory, crc); put32(directory, static_cast<std::uint32_t>(data.size()));
    put32(directory, static_cast<std::uint32_t>(data.size()));
    put16(directory, static_cast<std::uint32_t>(entry.size())); put16(directory, 0); put16(directory, 0);
    put16(directory, 0); put16(directory, 0); put32(directory, 0); put32(directory, offset);
    directory += entry;
  }
  TANDEM_CHECK(arrays.size() < 0xffff, "npz: ", path, ": too many arrays for a zip without zip64");
  const auto directory_offset = static_cast<std::uint32_t>(archive.size());
  archive += directory;
  put32(archive, 0x06054b50); put16(archive, 0); put16(archive, 0);
  put16(archive, static_cast<std::uint32_t>(arrays.size())); put16(archive, static_cast<std::uint32_t>(arrays.size()));
  put32(archive, static_cast<std::uint32_t>(directory.size())); put32(archive, directory_offset); put16(archive, 0);
  write_file_atomically(path, archive);
}

NamedTensors parse_npz(const std::string& bytes, const std::string& source) {
  Reader reader(bytes, source);
  // The end-of-central-directory record sits in the last 22 + 65535 (comment) bytes.
  TANDEM_CHECK(bytes.size() >= 22, "npz: ", source, " is not a zip archive (", bytes.size(), " bytes)");
  std::size_t eocd = std::string::npos;
  const std::size_t lowest = bytes.size() > 22 + 65535 ? bytes.size() - 22 - 65535 : 0;
  for (std::size_t at = bytes.size() - 22 + 1; at-- > lowest;) {
    if (reader.u32(at) == 0x06054b50) {
      eocd = at;
      break;
    }
  }
  TANDEM_CHECK(eocd != std::string::npos, "npz: ", source, " is not a zip archive (no end-of-directory record)");
  const std::size_t count = reader.u16(eocd + 10);
  std::size_t at = reader.u32(eocd + 16);
  NamedTensors out;
  for (std::size_t i = 0; i < count; ++i) {
    TANDEM_CHECK(reader.u32(at) == 0x02014b50, "npz: ", source, ": corrupt central directory (entry ", i, ")");
    const std::uint32_t method = reader.u16(at + 10);
    const std::uint32_t crc = reader.u32(at + 16);
    const std::size_t compressed = reader.u32(at + 20), size = reader.u32(at + 24);
    const std::size_t name_length = reader.u16(at + 28), extra = reader.u16(at + 30), comment = reader.u16(at + 32);
    const std::size_t local = reader.u32(at + 42);
    const std::string name = reader.slice(at + 46, name_length);
    at += 46 + name_length + extra + comment;
    TANDEM_CHECK(compressed != 0xffffffffu && size != 0xffffffffu, "npz: ", source, ": entry '", name,
                 "' needs zip64, which is not supported");
    TANDEM_CHECK(reader.u32(local) == 0x04034b50, "npz: ", source, ": corrupt local header for '", name, "'");
    const std::size_t data_at = local + 30 + reader.u16(local + 26) + reader.u16(local + 28);
    std::string data = reader.slice(data_at, compressed);
    if (method == 8) {
      // The output buffer is allocated before inflating, so the declared size must be one that
      // the compressed bytes can produce: deflate never expands more than 1032:1.
      TANDEM_CHECK(size < (std::size_t(1) << 36) && size / 1032 <= compressed, "npz: ", source, ": entry '", name,
                   "' is implausibly large (", size, " bytes from ", compressed, " deflated)");
      data = inflate_raw(data, size, source + ":" + name);
    } else {
      TANDEM_CHECK(method == 0, "npz: ", source, ": entry '", name, "' uses zip method ", method,
                   " (only stored and deflated are supported)");
      TANDEM_CHECK(size == compressed, "npz: ", source, ": entry '", name, "' has inconsistent sizes");
    }
    TANDEM_CHECK(crc32_of(data) == crc, "npz: ", source, ": entry '", name, "' fails its CRC check (corrupt file)");
    const std::string key = name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0
                                ? name.substr(0, name.size() - 4) : name;
    out.emplace_back(key, decode_npy(data, source + ":" + name));
  }
  return out;
}

NamedTensors read_npz(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in.good(), "npz: cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return parse_npz(buffer.str(), path);
}

Tensor string_to_tensor(const std::string& text) {
  std::vector<std::int32_t> bytes(text.begin(), text.end());
  return from_vector(bytes, {static_cast<std::int64_t>(bytes.size())});
}

std::string tensor_to_string(const Tensor& tensor) {
  // Only what string_to_tensor writes: converting another dtype (NaN, say) to int is undefined.
  TANDEM_CHECK(tensor.defined() && tensor.dtype() == DType::i32, "npz: text must be stored as an i32 array, got ",
               tensor.description());
  std::string text;
  for (std::int32_t c : tensor.to_vector<std::int32_t>()) text.push_back(static_cast<char>(c));
  return text;
}

}  // namespace tandem
