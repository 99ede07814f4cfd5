#include "layers/serializers/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"

namespace tandem {

namespace {

// The reference reader's limit on the header (safetensors' MAX_HEADER_SIZE).
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return "F64";
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::i64:
      return "I64";
    case DType::i32:
      return "I32";
    case DType::boolean:
      return "BOOL";
  }
  return nullptr;
}

bool tandem_dtype(const std::string& name, DType* out) {
  for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i64, DType::i32, DType::boolean}) {
    if (name == safetensors_dtype(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

}  // namespace

std::string encode_safetensors(const NamedTensors& tensors, const SafetensorsMetadata& metadata) {
  nlohmann::json header = nlohmann::json::object();
  std::set<std::string> names;
  std::uint64_t offset = 0;
  std::vector<Tensor> hosts;
  for (const auto& [name, tensor] : tensors) {
    TANDEM_CHECK(name != "__metadata__", "safetensors: '__metadata__' is reserved, not a tensor name");
    TANDEM_CHECK(names.insert(name).second, "safetensors: tensor '", name, "' given twice");
    TANDEM_CHECK(tensor.defined(), "safetensors: tensor '", name, "' is undefined");
    hosts.push_back(tensor.to(Device::cpu()));
    const std::uint64_t bytes = hosts.back().nbytes();
    header[name] = {{"dtype", safetensors_dtype(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((std::uint64_t(text.size()) >> (8 * i)) & 0xff);
  out += text;
  out.reserve(out.size() + offset);
  for (const Tensor& host : hosts)
    if (host.nbytes() > 0) out.append(static_cast<const char*>(host.raw_data()), host.nbytes());
  return out;
}

NamedTensors decode_safetensors(const std::string& bytes, const std::string& source, SafetensorsMetadata* metadata) {
  const std::string where = "safetensors: " + source;
  TANDEM_CHECK(bytes.size() >= 8, where, ": ", bytes.size(), " bytes, too short for the 8-byte header length");
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  TANDEM_CHECK(n <= kMaxHeaderBytes && n <= bytes.size() - 8, where, ": the header claims ", n,
               " bytes but the file has ", bytes.size() - 8, " after its length (and at most ", kMaxHeaderBytes,
               " are allowed)");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  } catch (const nlohmann::json::exception& e) { TANDEM_FAIL(where, ": the header is not valid JSON: ", e.what()); }
  TANDEM_CHECK(header.is_object(), where, ": the header is not a JSON object");
  const std::uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;

  struct Entry {
    std::uint64_t begin, end;
    std::string name;
    DType dtype;
    Shape shape;
  };
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      TANDEM_CHECK(info.is_object(), where, ": __metadata__ is not an object");
      for (const auto& [key, value] : info.items()) {
        TANDEM_CHECK(value.is_string(), where, ": __metadata__ '", key, "' is not a string");
        if (metadata) (*metadata)[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string what = where + ": tensor '" + name + "'";
    TANDEM_CHECK(info.is_object() && info.contains("dtype") && info.contains("shape") && info.contains("data_offsets"),
                 what, ": needs dtype, shape and data_offsets, got ", info.dump());
    Entry e{0, 0, name, DType::f32, {}};
    TANDEM_CHECK(info["dtype"].is_string(), what, ": dtype is not a string");
    const std::string dtype = info["dtype"].get<std::string>();
    TANDEM_CHECK(tandem_dtype(dtype, &e.dtype), what, ": dtype ", dtype,
                 " has no tandem type (F64, F32, BF16, F16, I64, I32 and BOOL do)");
    TANDEM_CHECK(info["shape"].is_array(), what, ": shape is not an array");
    std::uint64_t numel = 1;
    for (const auto& extent : info["shape"]) {
      TANDEM_CHECK(extent.is_number_unsigned(), what, ": shape ", info["shape"].dump(), " has a non-natural extent");
      e.shape.push_back(extent.get<std::int64_t>());
      numel *= extent.get<std::uint64_t>();
    }
    const auto& offsets = info["data_offsets"];
    TANDEM_CHECK(
        offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
        what, ": data_offsets must be two natural numbers, got ", offsets.dump());
    e.begin = offsets[0].get<std::uint64_t>();
    e.end = offsets[1].get<std::uint64_t>();
    TANDEM_CHECK(e.begin <= e.end && e.end <= data_size, what, ": data_offsets [", e.begin, ", ", e.end,
                 "] lie outside the ", data_size, " bytes of data");
    TANDEM_CHECK(e.end - e.begin == numel * dtype_size(e.dtype), what, ": ", e.end - e.begin, " bytes for shape ",
                 e.shape, " of ", dtype, " (", numel * dtype_size(e.dtype), " expected)");
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  std::uint64_t expected = 0;  // the data, tensor after tensor, without gaps or overlaps
  for (const Entry& e : entries) {
    TANDEM_CHECK(e.begin == expected, where, ": tensor '", e.name, "' starts at byte ", e.begin, " of the data, where ",
                 expected, " was expected (", e.begin < expected ? "it overlaps the one before" : "a gap before it",
                 ")");
    expected = e.end;
  }
  TANDEM_CHECK(expected == data_size, where, ": the tensors cover ", expected, " of the ", data_size, " bytes of data");
  NamedTensors out;
  for (const Entry& e : entries) {
    if (e.dtype == DType::boolean) {  // a bool is the byte 0 or 1; anything else is no bool
      for (std::uint64_t i = e.begin; i < e.end; ++i) {
        const auto byte = static_cast<unsigned char>(data[i]);
        TANDEM_CHECK(byte <= 1, where, ": tensor '", e.name, "' (BOOL) holds the byte ", int(byte), " at element ",
                     i - e.begin, " (only 0 and 1 are bools)");
      }
    }
    out.emplace_back(e.name, from_buffer(data + e.begin, e.shape, e.dtype));
  }
  return out;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors, const SafetensorsMetadata& metadata) {
  write_file_atomically(path, encode_safetensors(tensors, metadata));
}

NamedTensors read_safetensors(const std::string& path, SafetensorsMetadata* metadata) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in.good(), "safetensors: cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return decode_safetensors(buffer.str(), path, metadata);
}

}  // namespace tandem
