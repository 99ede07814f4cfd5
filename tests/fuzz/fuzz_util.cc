#include "tests/fuzz/fuzz_util.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace tandem::fuzz {

namespace {

std::string make_temp_dir() {
  const char* base = std::getenv("TEST_TMPDIR");
  if (base == nullptr || base[0] == '\0') base = std::getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr && base[0] != '\0' ? base : "/tmp") + "/tandem_fuzz.XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  FUZZ_REQUIRE(::mkdtemp(buffer.data()) != nullptr,
               std::string("tandem::fuzz::temp_dir: mkdtemp failed: ") + std::strerror(errno));
  return buffer.data();
}

void remove_temp_dir() {
  std::error_code ignored;
  std::filesystem::remove_all(temp_dir(), ignored);
}

std::uint32_t u16(const std::string& b, std::size_t at) {
  return static_cast<unsigned char>(b[at]) | static_cast<unsigned char>(b[at + 1]) << 8;
}

std::uint32_t u32(const std::string& b, std::size_t at) { return u16(b, at) | u16(b, at + 2) << 16; }

void put32(std::string& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<char>(v >> (8 * i));
}

std::uint32_t crc_of(const char* data, std::size_t size) {
  return static_cast<std::uint32_t>(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data), static_cast<uInt>(size)));
}

// The CRC of a raw-deflated entry's `expected` inflated bytes, or false when it does not inflate
// to exactly that many (then the parser rejects it before the CRC matters).
bool deflated_crc(const char* data, std::size_t size, std::size_t expected, std::uint32_t& crc) {
  constexpr std::size_t kMaxInflated = std::size_t{1} << 24;
  if (expected > kMaxInflated) return false;
  std::string out(expected, '\0');
  z_stream stream{};
  if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) return false;
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
  stream.avail_in = static_cast<uInt>(size);
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(expected);
  const int status = inflate(&stream, Z_FINISH);
  const std::size_t produced = stream.total_out;
  inflateEnd(&stream);
  if (status != Z_STREAM_END || produced != expected) return false;
  crc = crc_of(out.data(), out.size());
  return true;
}

}  // namespace

void init() { ::setenv("TANDEM_CPU_CACHE_MB", "0", 1); }

const std::string& temp_dir() {
  // Never destroyed: remove_temp_dir runs at exit, after the destructors of statics made later.
  static const std::string* dir = [] {
    auto* made = new std::string(make_temp_dir());
    std::atexit(remove_temp_dir);
    return made;
  }();
  return *dir;
}

void write_file(const std::string& path, const void* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  FUZZ_REQUIRE(out.good(), "tandem::fuzz::write_file: cannot write the input to a temporary file");
}

void consume(const Tensor& tensor) {
  if (!tensor.defined()) return;
  volatile double sink = 0;
  for (double v : tensor.to_vector<double>()) sink = sink + v;
  (void)sink;
}

void fail(const char* file, int line, const char* condition, const std::string& what) {
  std::fprintf(stderr, "%s:%d: fuzz invariant broken: %s (%s)\n", file, line, what.c_str(), condition);
  std::abort();
}

std::string with_zip_crcs_fixed(const std::string& bytes) {
  std::string out = bytes;
  const std::size_t n = bytes.size();
  // Every central directory record, wherever it is: the parser may be pointed at any of them.
  for (std::size_t at = 0; n >= 46 && at <= n - 46; ++at) {
    if (u32(bytes, at) != 0x02014b50) continue;
    const std::uint32_t method = u16(bytes, at + 10);
    const std::size_t compressed = u32(bytes, at + 20), size = u32(bytes, at + 24);
    const std::size_t local = u32(bytes, at + 42);
    if (local > n || n - local < 30 || u32(bytes, local) != 0x04034b50) continue;
    const std::size_t data_at = local + 30 + u16(bytes, local + 26) + u16(bytes, local + 28);
    if (data_at > n || compressed > n - data_at) continue;
    std::uint32_t crc = 0;
    if (method == 0) {
      crc = crc_of(bytes.data() + data_at, compressed);
    } else if (method != 8 || !deflated_crc(bytes.data() + data_at, compressed, size, crc)) {
      continue;
    }
    put32(out, at + 16, crc);  // (the local header's copy is not read by the parser)
  }
  return out;
}

}  // namespace tandem::fuzz
