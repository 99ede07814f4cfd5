#include "comm/checkpoint/checkpoint_manifest.h"

#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/hash.h"

namespace tandem {

namespace {

using Json = nlohmann::json;

std::int64_t product(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t e : shape) n *= e;
  return n;
}

// Reads a manifest's JSON with every type and range checked; errors name the source.
class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  CheckpointManifest parse(const std::string& text) const {
    Json root;
    try {
      root = Json::parse(text);
    } catch (const Json::exception& e) { fail(e.what()); }
    if (!root.is_object()) fail("the manifest is not a JSON object");
    if (string(root, "format") != kCheckpointFormat)
      fail(std::string("\"format\" is not \"") + kCheckpointFormat + "\"");
    CheckpointManifest m;
    m.step = integer(root, "step");
    m.ranks = static_cast<int>(integer(root, "ranks", 1, 1 << 24));
    const Json& info = member(root, "info");
    if (!info.is_object()) fail("\"info\" is not an object");
    for (auto it = info.begin(); it != info.end(); ++it) {
      if (!it->is_string()) fail("\"info\": \"" + it.key() + "\" is not a string");
      m.info[it.key()] = it->get<std::string>();
    }
    for (const Json& f : array(root, "files")) {
      CheckpointFile file;
      file.path = string(f, "path");
      if (file.path.empty() || file.path.find('/') != std::string::npos || file.path[0] == '.')
        fail("a file's path must be a plain file name, got \"" + file.path + "\"");
      file.bytes = integer(f, "bytes");
      file.block_bytes = integer(f, "block_bytes", 8, std::int64_t(1) << 40);
      if (file.block_bytes % 8 != 0) fail("\"block_bytes\" must be a multiple of 8");
      for (const Json& d : array(f, "digests")) file.digests.push_back(hex(d));
      const std::int64_t blocks = (file.bytes + file.block_bytes - 1) / file.block_bytes;
      if (static_cast<std::int64_t>(file.digests.size()) != blocks)
        fail(file.path + " has " + std::to_string(file.digests.size()) + " digests for " + std::to_string(blocks) +
             " blocks");
      m.files.push_back(file);
    }
    const Json& tensors = member(root, "tensors");
    if (!tensors.is_object()) fail("\"tensors\" is not an object");
    for (auto it = tensors.begin(); it != tensors.end(); ++it) m.tensors[it.key()] = tensor(it.key(), *it, m);
    return m;
  }

 private:
  CheckpointTensor tensor(const std::string& name, const Json& t, const CheckpointManifest& m) const {
    const std::string what = "tensor '" + name + "'";
    if (!t.is_object()) fail(what + " is not an object");
    CheckpointTensor out;
    try {
      out.dtype = dtype_by_name(string(t, "dtype"), "checkpoint manifest");
    } catch (const Error& e) { fail(what + ": " + e.what()); }
    out.shape = shape(member(t, "shape"), what + " \"shape\"");
    std::int64_t held = 0;
    for (const Json& c : array(t, "chunks")) {
      CheckpointChunk chunk;
      chunk.file = static_cast<int>(integer(c, "file", 0, static_cast<std::int64_t>(m.files.size()) - 1));
      chunk.at = integer(c, "at");
      chunk.placement.global = out.shape;
      chunk.placement.offsets = shape(member(c, "offsets"), what + " \"offsets\"");
      chunk.placement.box = shape(member(c, "box"), what + " \"box\"");
      chunk.placement.begin = integer(c, "begin");
      chunk.placement.end = integer(c, "end");
      try {
        chunk.placement.check(what);
      } catch (const Error& e) { fail(e.what()); }
      const std::int64_t bytes = chunk.placement.numel() * static_cast<std::int64_t>(dtype_size(out.dtype));
      if (chunk.at + bytes > m.files[chunk.file].bytes)
        fail(what + ": a chunk at byte " + std::to_string(chunk.at) + " of " + std::to_string(bytes) +
             " bytes is past the end of " + m.files[chunk.file].path);
      held += chunk.placement.numel();
      out.chunks.push_back(chunk);
    }
    if (held != product(out.shape))
      fail(what + "'s chunks hold " + std::to_string(held) + " elements of its " + std::to_string(product(out.shape)));
    // Every element once: the writer's chunks of a tensor have the same box (then their ranges do
    // not meet) or boxes that do not meet.
    for (std::size_t i = 0; i < out.chunks.size(); ++i)
      for (std::size_t j = 0; j < i; ++j) {
        const ShardPlacement &a = out.chunks[i].placement, &b = out.chunks[j].placement;
        const bool same_box = a.offsets == b.offsets && a.box == b.box;
        bool boxes_meet = true;
        for (std::size_t d = 0; d < a.box.size(); ++d)
          boxes_meet = boxes_meet && a.offsets[d] < b.offsets[d] + b.box[d] && b.offsets[d] < a.offsets[d] + a.box[d];
        if (same_box ? a.begin < b.end && b.begin < a.end && a.numel() > 0 && b.numel() > 0
                     : boxes_meet && a.numel() > 0 && b.numel() > 0)
          fail(what + ": chunks " + a.str() + " and " + b.str() + " overlap");
      }
    return out;
  }

  [[noreturn]] void fail(const std::string& why) const {
    TANDEM_FAIL("checkpoint manifest ", source_, " is malformed: ", why);
  }
  const Json& member(const Json& object, const std::string& key) const {
    if (!object.is_object()) fail("an entry that should hold \"" + key + "\" is not an object");
    const auto it = object.find(key);
    if (it == object.end()) fail("no \"" + key + "\"");
    return *it;
  }
  std::string string(const Json& object, const std::string& key) const {
    const Json& v = member(object, key);
    if (!v.is_string()) fail("\"" + key + "\" is not a string");
    return v.get<std::string>();
  }
  const Json& array(const Json& object, const std::string& key) const {
    const Json& v = member(object, key);
    if (!v.is_array()) fail("\"" + key + "\" is not an array");
    return v;
  }
  std::int64_t number(const Json& v, const std::string& what, std::int64_t low, std::int64_t high) const {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX))
      fail(what + " is not an integer");
    const auto value = v.get<std::int64_t>();
    if (value < low || value > high)
      fail(what + " is " + std::to_string(value) + ", outside [" + std::to_string(low) + ", " + std::to_string(high) +
           "]");
    return value;
  }
  std::int64_t integer(const Json& object, const std::string& key, std::int64_t low = 0,
                       std::int64_t high = std::int64_t(1) << 53) const {
    return number(member(object, key), "\"" + key + "\"", low, high);
  }
  Shape shape(const Json& v, const std::string& what) const {
    if (!v.is_array() || v.size() > 16) fail(what + " is not an array of at most 16 extents");
    Shape out;
    std::int64_t elements = 1;
    for (const Json& e : v) {
      out.push_back(number(e, what, 0, std::int64_t(1) << 48));
      if (out.back() > 0 &&
          (__builtin_mul_overflow(elements, out.back(), &elements) || elements > (std::int64_t(1) << 53)))
        fail(what + " has more than 2^53 elements");
    }
    return out;
  }
  std::uint64_t hex(const Json& v) const {
    if (!v.is_string() || v.get<std::string>().size() != 16) fail("a digest is not 16 hex digits");
    const std::string text = v.get<std::string>();
    std::uint64_t out = 0;
    for (char c : text) {
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) fail("a digest is not 16 hex digits: \"" + text + "\"");
      out = out * 16 + static_cast<std::uint64_t>(d);
    }
    return out;
  }

  std::string source_;
};

}  // namespace

std::int64_t CheckpointManifest::total_bytes() const {
  std::int64_t bytes = 0;
  for (const CheckpointFile& f : files) bytes += f.bytes;
  return bytes;
}

std::string digest_hex(std::uint64_t digest) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(digest));
  return text;
}

std::uint64_t checkpoint_block_digest(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  Fnv1a64 h;
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t word = 0;
    for (int b = 0; b < 8; ++b) word |= static_cast<std::uint64_t>(p[i + b]) << (8 * b);
    h.mix(word);
  }
  for (; i < bytes; ++i) h.mix(p[i]);
  return h.digest();
}

// One line per file and per tensor, so that the manifest reads (and diffs) line by line.
std::string format_checkpoint_manifest(const CheckpointManifest& m) {
  Json info = Json::object();
  for (const auto& [key, value] : m.info) info[key] = value;
  std::string out = "{\"format\": " + Json(kCheckpointFormat).dump() + ", \"step\": " + std::to_string(m.step) +
                    ", \"ranks\": " + std::to_string(m.ranks) + ",\n \"info\": " + info.dump() + ",\n \"files\": [";
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    const CheckpointFile& f = m.files[i];
    Json digests = Json::array();
    for (std::uint64_t d : f.digests) digests.push_back(digest_hex(d));
    const Json file = {{"path", f.path}, {"bytes", f.bytes}, {"block_bytes", f.block_bytes}, {"digests", digests}};
    out += (i ? ",\n  " : "\n  ") + file.dump();
  }
  out += "],\n \"tensors\": {";
  bool first = true;
  for (const auto& [name, t] : m.tensors) {
    Json chunks = Json::array();
    for (const CheckpointChunk& c : t.chunks)
      chunks.push_back({{"file", c.file},
                        {"at", c.at},
                        {"offsets", c.placement.offsets},
                        {"box", std::vector<std::int64_t>(c.placement.box)},
                        {"begin", c.placement.begin},
                        {"end", c.placement.end}});
    const Json tensor = {
        {"dtype", dtype_name(t.dtype)}, {"shape", std::vector<std::int64_t>(t.shape)}, {"chunks", chunks}};
    out += (first ? "\n  " : ",\n  ") + Json(name).dump() + ": " + tensor.dump();
    first = false;
  }
  return out + "}}\n";
}

CheckpointManifest parse_checkpoint_manifest(const std::string& text, const std::string& source) {
  return Parser(source).parse(text);
}

}  // namespace tandem
