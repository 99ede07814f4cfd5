// safetensors (layers/serializers/safetensors.h): a round trip of every dtype bit for bit; a file
// built by hand from the format's description (not by tandem's writer) loads; and every kind of
// malformed file is an error naming what is wrong.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/ops.h"
#include "layers/links/linear.h"
#include "layers/serializers/safetensors.h"
#include "layers/serializers/serializers.h"

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

// Little-endian length, then the header (padded by the caller or not), then the data.
std::string file_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((std::uint64_t(header.size()) >> (8 * i)) & 0xff);
  return out + header + data;
}

template <typename T>
std::string raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

std::vector<std::uint8_t> bits(const Tensor& t) {
  const auto* p = static_cast<const std::uint8_t*>(t.raw_data());
  return std::vector<std::uint8_t>(p, p + t.nbytes());
}

}  // namespace

TEST_CASE("safetensors: every dtype round-trips bit for bit, in order, with metadata") {
  Generator gen(3);
  const Tensor f32 = randn({3, 4}, gen);
  NamedTensors tensors = {{"model.w", f32},
                          {"f64", randn({2}, gen, 0, 1, DType::f64)},
                          {"bf16", f32.to(DType::bf16)},
                          {"f16", f32.to(DType::f16)},
                          {"i64", from_vector(std::vector<std::int64_t>{-1, 1LL << 40})},
                          {"i32", from_vector(std::vector<std::int32_t>{7, -7, 0})},
                          {"bool", greater(f32, 0.0)},
                          {"scalar", full({}, 2.5)},
                          {"empty", zeros({0, 5})}};
  const std::string bytes = encode_safetensors(tensors, {{"format", "pt"}, {"step", "12"}});
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);  // little-endian, as this machine
  REQUIRE(header_bytes % 8 == 0);               // padded: the data starts 8-byte aligned
  SafetensorsMetadata metadata;
  const NamedTensors back = decode_safetensors(bytes, "memory", &metadata);
  REQUIRE(metadata == SafetensorsMetadata{{"format", "pt"}, {"step", "12"}});
  REQUIRE(back.size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    INFO(tensors[i].first);
    REQUIRE(back[i].first == tensors[i].first);  // the data's order is the order given
    REQUIRE(back[i].second.dtype() == tensors[i].second.dtype());
    REQUIRE(back[i].second.shape() == tensors[i].second.shape());
    REQUIRE(bits(back[i].second) == bits(tensors[i].second));
  }
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/w.safetensors";
  write_safetensors(path, tensors);
  REQUIRE(bits(read_safetensors(path)[2].second) == bits(tensors[2].second));
}

TEST_CASE("safetensors: a file written from the format's description loads") {
  // Two tensors listed out of data order, unpadded header, a BF16 whose bits are written out:
  // 0x3FC0 is 1.5, 0xC000 is -2.
  const std::string header =
      R"({"b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},)"
      R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"__metadata__":{"format":"pt"}})";
  const std::string data = raw(std::vector<float>{1, 2, 3, 4, 5, 6}) + raw(std::vector<std::uint16_t>{0x3FC0, 0xC000});
  const NamedTensors t = decode_safetensors(file_bytes(header, data), "hand-made");
  REQUIRE(t.size() == 2);
  REQUIRE(t[0].first == "a");
  REQUIRE(t[0].second.shape() == Shape{2, 3});
  REQUIRE(t[0].second.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  REQUIRE(t[1].first == "b");
  REQUIRE(t[1].second.dtype() == DType::bf16);
  REQUIRE(t[1].second.to_vector<double>() == std::vector<double>{1.5, -2.0});
}

TEST_CASE("safetensors: malformed files are errors naming the problem") {
  const std::string data = raw(std::vector<float>{1, 2});
  auto fails = [&](const std::string& header, const std::string& d, const std::string& message) {
    INFO(header);
    REQUIRE_THROWS_WITH(decode_safetensors(file_bytes(header, d), "bad"), Contains(message));
  };
  REQUIRE_THROWS_WITH(decode_safetensors("1234", "bad"), Contains("too short"));
  std::string huge = file_bytes("{}", "");
  huge[5] = 1;  // a header length of 2^40 + 2
  REQUIRE_THROWS_WITH(decode_safetensors(huge, "bad"), Contains("the header claims"));
  fails("{not json", data, "not valid JSON");
  fails("[1,2]", data, "not a JSON object");
  fails(R"({"x":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", data, "dtype U8 has no tandem type");
  fails(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data, "8 bytes for shape [3] of F32");
  fails(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data, "lie outside the 8 bytes");
  fails(R"({"x":{"dtype":"F32","shape":[2]}})", data, "needs dtype, shape and data_offsets");
  fails(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data, "non-natural extent");
  fails(
      R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      data, "overlaps the one before");
  fails(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data, "a gap before it");
  fails(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", data, "cover 4 of the 8 bytes");
  fails(R"({"x":{"dtype":"BOOL","shape":[8],"data_offsets":[0,8]}})", data, "holds the byte 128 at element 2");
  fails(R"({"__metadata__":{"k":1},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data, "is not a string");
  REQUIRE_THROWS_WITH(encode_safetensors({{"a", zeros({1})}, {"a", zeros({1})}}), Contains("'a' given twice"));
  REQUIRE_THROWS_WITH(encode_safetensors({{"__metadata__", zeros({1})}}), Contains("reserved"));
}

TEST_CASE("safetensors: a link's state saved and loaded into a fresh lazy link") {
  Linear saved(3, 2);
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/linear.safetensors";
  write_safetensors(path, link_state(saved));
  Linear loaded(-1, 2);  // its W takes the file's shape
  load_link_state(loaded, read_safetensors(path), /*strict=*/true, path);
  REQUIRE(bits(loaded.W().data()) == bits(saved.W().data()));
  REQUIRE(bits(loaded.b().data()) == bits(saved.b().data()));
}
