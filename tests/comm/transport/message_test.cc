// The message header codec (comm/transport/message.h), single process: encode_header/decode_header
// round trips, and decode_header's rejection of every kind of malformed message.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "comm/transport/message.h"
#include "core/error.h"

using namespace tandem;
using namespace tandem::comm_detail;
using Catch::Matchers::Contains;

namespace {

constexpr int kSource = 7;  // the rank the bytes pretend to come from

// The message of the tandem::Error that f throws; "(no error)" when it throws nothing.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string decode_error(const std::vector<char>& bytes) {
  return error_of([&] { decode_header(bytes.data(), bytes.size(), kSource); });
}

// A valid tensor header: f32[2, 3], payload 24 bytes, sent separately (no inline flag).
MessageHeader tensor_header() {
  MessageHeader h;
  h.kind = OpKind::tensor_send;
  h.dtype = DType::f32;
  h.tag = 4;
  h.sequence = 2;
  h.shape = Shape{2, 3};
  h.payload_bytes = 24;
  return h;
}

std::vector<char> encode(const MessageHeader& h) {
  std::vector<char> out;
  encode_header(h, out);
  return out;
}

// Offset of the ndim byte in the fixed part, found without assuming the layout: the first
// byte that differs between headers that differ only in their number of dimensions.
std::size_t ndim_offset() {
  MessageHeader a, b;
  a.kind = b.kind = OpKind::barrier;  // untyped: the shape is not checked against a payload
  b.shape = Shape{5};
  const std::vector<char> ea = encode(a), eb = encode(b);
  for (std::size_t i = 0; i < ea.size(); ++i)
    if (ea[i] != eb[i]) return i;
  FAIL("no byte of the encoding depends on the number of dimensions");
  return 0;
}

void require_same(const MessageHeader& got, const MessageHeader& want) {
  CHECK(got.kind == want.kind);
  CHECK(got.flags == want.flags);
  CHECK(got.dtype == want.dtype);
  CHECK(got.tag == want.tag);
  CHECK(got.root == want.root);
  CHECK(got.sequence == want.sequence);
  CHECK(got.list_index == want.list_index);
  CHECK(got.list_size == want.list_size);
  CHECK(got.reduce_op == want.reduce_op);
  CHECK(got.digest == want.digest);
  CHECK(got.shape == want.shape);
  CHECK(got.payload_bytes == want.payload_bytes);
  CHECK(got.data_flags == want.data_flags);
  CHECK(got.address == want.address);
  CHECK(got.site == want.site);
  CHECK(got.label == want.label);
  CHECK(got.layer_flags == want.layer_flags);
}

}  // namespace

TEST_CASE("message: every field survives encode and decode") {
  MessageHeader h;
  h.kind = OpKind::layer_message;
  h.flags = kFlagList;
  h.label = "a layer's name for it";
  h.layer_flags = 0xa5;
  h.dtype = DType::i64;
  h.tag = 32766;
  h.root = 5;
  h.sequence = (std::int64_t(1) << 40) + 3;
  h.list_index = 2;
  h.list_size = 7;
  h.reduce_op = 1;
  h.digest = 0xfedcba9876543210ull;
  h.shape = Shape{2, 1, 3, 0, 4, 1, 1, 9};  // kMaxDims dimensions, zero-size
  h.payload_bytes = 0;

  std::vector<char> bytes = {'x', 'y'};  // encode_header appends
  encode_header(h, bytes);
  REQUIRE(bytes.size() == 2 + encoded_header_size(h));
  CHECK(bytes[0] == 'x');
  CHECK(bytes[1] == 'y');
  CHECK(encoded_header_size(h) == encoded_header_size(MessageHeader{}) + 8 * sizeof(std::int64_t) + h.label.size());

  const DecodedMessage m = decode_header(bytes.data() + 2, bytes.size() - 2, kSource);
  require_same(m.header, h);
  CHECK(m.header_bytes == encoded_header_size(h));
}

TEST_CASE("message: inline payload, scalar shape, every dtype and every kind round-trip") {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64, DType::boolean, DType::bf16, DType::f16}) {
    MessageHeader h;
    h.kind = OpKind::tensor_send;
    h.flags = kFlagInlinePayload;
    h.dtype = dtype;
    h.shape.clear();  // a scalar: one element
    h.payload_bytes = dtype_size(dtype);
    std::vector<char> bytes = encode(h);
    const std::size_t header_size = bytes.size();
    for (std::size_t i = 0; i < dtype_size(dtype); ++i) bytes.push_back(static_cast<char>(0xa0 + i));
    const DecodedMessage m = decode_header(bytes.data(), bytes.size(), kSource);
    INFO("dtype " << dtype_name(dtype));
    require_same(m.header, h);
    CHECK(m.header_bytes == header_size);
    CHECK(static_cast<unsigned char>(bytes[m.header_bytes]) == 0xa0);
  }
  const OpKind kinds[] = {OpKind::tensor_send, OpKind::layer_message, OpKind::object_send,
                          OpKind::barrier,     OpKind::bcast,     OpKind::gather,         OpKind::scatter,
                          OpKind::allgather,   OpKind::alltoall,  OpKind::allreduce,      OpKind::reduce,
                          OpKind::reduce_scatter, OpKind::object_bcast, OpKind::object_gather, OpKind::split,
                          OpKind::alltoallv};
  for (OpKind kind : kinds) {
    MessageHeader h;
    h.kind = kind;
    h.dtype = DType::f64;
    h.shape = Shape{4};
    h.payload_bytes = 32;
    if (is_collective(kind)) h.flags = kFlagTyped;
    if (kind == OpKind::layer_message) h.label = "activation";
    INFO("kind " << op_kind_name(kind));
    const std::vector<char> bytes = encode(h);
    require_same(decode_header(bytes.data(), bytes.size(), kSource).header, h);
  }
  CHECK(!is_collective(OpKind::object_send));
  CHECK(is_collective(OpKind::barrier));
  CHECK(std::string(op_kind_name(OpKind::object_gather)) == "gather_obj");
}

TEST_CASE("message: describe names the operation, tensor and position") {
  MessageHeader h = tensor_header();
  h.shape = Shape{3, 4};
  h.payload_bytes = 48;
  h.tag = 0;
  CHECK(h.describe() == "send f32[3, 4] (tag 0, message #2)");

  MessageHeader c;
  c.kind = OpKind::gather;
  c.flags = kFlagTyped;
  c.label = "in backward";
  c.dtype = DType::i32;
  c.shape = Shape{5};
  c.root = 1;
  c.sequence = 9;
  CHECK(c.describe() == "gather (in backward) i32[5] root 1 (collective #9)");

  MessageHeader o;
  o.kind = OpKind::object_send;
  o.payload_bytes = 11;
  o.tag = 3;
  CHECK(o.describe() == "send_obj of 11 bytes (tag 3, message #0)");

  MessageHeader l = tensor_header();
  l.kind = OpKind::layer_message;
  l.label = "gradient";
  l.shape = Shape{3};
  l.payload_bytes = 12;
  l.tag = 1;
  CHECK(l.describe() == "gradient f32[3] (tag 1, message #2)");
}

TEST_CASE("message: payloads are checked only where a tensor is carried") {
  // Objects carry bytes: any payload size.
  MessageHeader o;
  o.kind = OpKind::object_send;
  o.dtype = DType::boolean;
  o.payload_bytes = 5;
  o.flags = kFlagInlinePayload;
  std::vector<char> bytes = encode(o);
  bytes.insert(bytes.end(), {'a', '\0', 'b', '\0', 'c'});
  CHECK(decode_header(bytes.data(), bytes.size(), kSource).header.payload_bytes == 5);

  // Untyped collective headers carry no tensor.
  MessageHeader b;
  b.kind = OpKind::object_bcast;
  b.payload_bytes = 1000;
  bytes = encode(b);
  CHECK(decode_header(bytes.data(), bytes.size(), kSource).header.payload_bytes == 1000);

  // A zero extent makes any other extent harmless: zero elements, zero bytes.
  MessageHeader z = tensor_header();
  z.shape = Shape{0, std::int64_t(1) << 62, std::int64_t(1) << 62};
  z.payload_bytes = 0;
  bytes = encode(z);
  CHECK(decode_header(bytes.data(), bytes.size(), kSource).header.shape == z.shape);
}

TEST_CASE("message: encode refuses more than kMaxDims dimensions") {
  MessageHeader h = tensor_header();
  h.shape = Shape(kMaxDims + 1, 1);
  h.payload_bytes = 4;
  std::vector<char> out;
  CHECK_THAT(error_of([&] { encode_header(h, out); }), Contains("9 dimensions") && Contains("at most 8"));
}

TEST_CASE("message: a collective's call site survives encode and decode, and is checked on arrival") {
  MessageHeader h;
  h.kind = OpKind::allreduce;
  h.flags = kFlagTyped;
  h.shape = Shape{2, 3};
  h.payload_bytes = 24;
  h.sequence = 4;
  h.site = "tests/comm/message_test.cc:42 (main)";
  const std::vector<char> bytes = encode(h);
  CHECK(bytes.size() == encoded_header_size(h));
  CHECK(encoded_header_size(h) == encoded_header_size(MessageHeader{}) + 2 * sizeof(std::int64_t) + h.site.size());
  const DecodedMessage m = decode_header(bytes.data(), bytes.size(), kSource);
  require_same(m.header, h);
  CHECK(m.header.site == h.site);
  CHECK(m.header_bytes == bytes.size());
  CHECK(h.describe() == "allreduce f32[2, 3] (collective #4) at tests/comm/message_test.cc:42 (main)");
  // Cut inside the site; a site on a point-to-point message; a site longer than allowed.
  const std::vector<char> cut(bytes.begin(), bytes.end() - 1);
  CHECK_THAT(decode_error(cut), Contains("call site cut short"));
  MessageHeader p2p = tensor_header();
  std::vector<char> with_site = encode(p2p);
  const std::size_t site_field = sizeof(std::uint32_t) + 4 * sizeof(std::uint8_t) + 3 * sizeof(std::int32_t) +
                                 sizeof(std::int64_t) + 2 * sizeof(std::uint32_t) + sizeof(std::uint64_t) +
                                 sizeof(std::int64_t) + 2 * sizeof(std::uint8_t);
  const std::uint16_t one = 1;
  std::memcpy(with_site.data() + site_field, &one, sizeof(one));
  with_site.push_back('x');
  CHECK_THAT(decode_error(with_site), Contains("a call site on a point-to-point message"));
  h.site.assign(kMaxSiteBytes + 1, 'a');
  CHECK_THROWS_WITH(encode(h), Contains("a call site of 1025 bytes"));
}

TEST_CASE("message: a layer's label and flags travel as they are, and are checked on arrival") {
  MessageHeader h = tensor_header();
  h.kind = OpKind::layer_message;
  h.label = "activation";
  h.layer_flags = 0xff;
  const std::vector<char> bytes = encode(h);
  CHECK(bytes.size() == encoded_header_size(tensor_header()) + h.label.size());
  require_same(decode_header(bytes.data(), bytes.size(), kSource).header, h);
  // A collective in a labelled scope carries the label after its call site.
  MessageHeader c;
  c.kind = OpKind::allreduce;
  c.flags = kFlagTyped;
  c.shape = Shape{2};
  c.payload_bytes = 8;
  c.site = "x.cc:1 (f)";
  c.label = "in backward";
  const std::vector<char> collective = encode(c);
  require_same(decode_header(collective.data(), collective.size(), kSource).header, c);
  CHECK(c.describe() == "allreduce (in backward) f32[2] (collective #0) at x.cc:1 (f)");
  // Cut inside the label; a layer's message without a label; layer flags on a plain send; a label
  // longer than allowed.
  const std::vector<char> cut(bytes.begin(), bytes.end() - 1);
  CHECK_THAT(decode_error(cut), Contains("label cut short"));
  MessageHeader unnamed = h;
  unnamed.label.clear();
  CHECK_THAT(decode_error(encode(unnamed)), Contains("a layer's message without a label"));
  MessageHeader plain = tensor_header();
  plain.layer_flags = 4;
  CHECK_THAT(decode_error(encode(plain)), Contains("layer flags 4 on a message no layer sent"));
  h.label.assign(kMaxLabelBytes + 1, 'a');
  CHECK_THROWS_WITH(encode(h), Contains("a message label of 256 bytes"));
}

TEST_CASE("message: decode rejects malformed messages") {
  const std::string malformed = "malformed message from rank 7";
  const std::vector<char> valid = encode(tensor_header());
  REQUIRE(decode_error(valid) == "(no error)");

  SECTION("too short") {
    CHECK_THAT(decode_error({}), Contains(malformed) && Contains("shorter than a message header"));
    std::vector<char> cut(valid.begin(), valid.begin() + 20);
    CHECK_THAT(decode_error(cut), Contains(malformed) && Contains("shorter than a message header"));
    // The fixed part is whole but the shape is cut short.
    cut.assign(valid.begin(), valid.end() - 1);
    CHECK_THAT(decode_error(cut), Contains(malformed) && Contains("shape cut short"));
  }
  SECTION("bad magic") {
    std::vector<char> bytes = valid;
    std::uint32_t magic = 0;
    std::memcpy(&magic, bytes.data(), sizeof(magic));
    REQUIRE(magic == kMessageMagic);  // the wire format starts with the magic number
    bytes[0] ^= 0x01;
    CHECK_THAT(decode_error(bytes), Contains(malformed) && Contains("wrong magic number"));
  }
  SECTION("bad version") {
    std::vector<char> bytes = valid;
    REQUIRE(static_cast<std::uint8_t>(bytes[sizeof(kMessageMagic)]) == kMessageVersion);  // right after the magic
    bytes[sizeof(kMessageMagic)] = static_cast<char>(kMessageVersion + 1);
    CHECK_THAT(decode_error(bytes),
               Contains(malformed) && Contains("protocol version " + std::to_string(kMessageVersion + 1)));
  }
  SECTION("unknown kind") {
    for (int kind : {0, 6, 15, static_cast<int>(OpKind::last) + 1, 255}) {
      MessageHeader h = tensor_header();
      h.kind = static_cast<OpKind>(kind);
      INFO("kind " << kind);
      CHECK_THAT(decode_error(encode(h)),
                 Contains(malformed) && Contains("unknown operation kind " + std::to_string(kind)));
    }
  }
  SECTION("unknown dtype") {
    MessageHeader h = tensor_header();
    h.dtype = static_cast<DType>(static_cast<int>(kLastDType) + 1);
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("unknown dtype 7"));
    h.dtype = static_cast<DType>(200);
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("unknown dtype 200"));
  }
  SECTION("more than kMaxDims dimensions") {
    // encode_header refuses 9 dimensions: patch the count of an 8-dimensional header instead.
    MessageHeader h = tensor_header();
    h.shape = Shape(kMaxDims, 1);
    h.payload_bytes = 4;
    std::vector<char> bytes = encode(h);
    const std::size_t at = ndim_offset();
    REQUIRE(static_cast<int>(bytes[at]) == kMaxDims);
    bytes[at] = static_cast<char>(kMaxDims + 1);
    const std::int64_t one = 1;
    bytes.insert(bytes.end(), reinterpret_cast<const char*>(&one), reinterpret_cast<const char*>(&one) + sizeof(one));
    CHECK_THAT(decode_error(bytes), Contains(malformed) && Contains("9 dimensions"));
    bytes[at] = static_cast<char>(255);
    CHECK_THAT(decode_error(bytes), Contains(malformed) && Contains("255 dimensions"));
  }
  SECTION("negative extent") {
    MessageHeader h = tensor_header();
    h.shape = Shape{2, -3};
    h.payload_bytes = 0;
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("negative extent in shape [2, -3]"));
    h.shape = Shape{-1};
    h.payload_bytes = 4;
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("negative extent"));
    // Typed collective headers are checked too.
    h.kind = OpKind::allreduce;
    h.flags = kFlagTyped;
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("negative extent"));
  }
  SECTION("overflowing shape") {
    MessageHeader h = tensor_header();
    h.shape = Shape{std::int64_t(1) << 40, std::int64_t(1) << 40};  // 2^80 elements
    h.payload_bytes = 0;
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("overflows"));
    // The element count fits in 64 bits but the byte count does not: 2^62 f32 elements.
    h.shape = Shape{std::int64_t(1) << 62};
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("payload size overflows"));
    // Unchecked, the byte count would wrap to exactly the claimed payload: (2^62 + 6) x 4 bytes
    // is 2^64 + 24, which is 24 modulo 2^64.
    h.shape = Shape{(std::int64_t(1) << 62) + 6};
    h.payload_bytes = 24;
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("overflows"));
  }
  SECTION("payload size that does not match dtype x shape") {
    MessageHeader h = tensor_header();
    h.payload_bytes = 23;
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("payload of 23 bytes for f32[2, 3]"));
    h.payload_bytes = 48;  // f64's size for an f32 tensor
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("payload of 48 bytes"));
    h.kind = OpKind::scatter;
    h.flags = kFlagTyped;
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("payload of 48 bytes"));
    h.kind = OpKind::layer_message;  // a layer's message carries a tensor as well
    h.flags = 0;
    h.label = "activation";
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("payload of 48 bytes"));
  }
  SECTION("inline payload of the wrong length") {
    MessageHeader h = tensor_header();
    h.flags = kFlagInlinePayload;
    std::vector<char> bytes = encode(h);
    CHECK_THAT(decode_error(bytes), Contains(malformed) && Contains("inline payload of 0 bytes, header says 24"));
    bytes.resize(bytes.size() + 23, 'p');
    CHECK_THAT(decode_error(bytes), Contains(malformed) && Contains("inline payload of 23 bytes, header says 24"));
    bytes.resize(bytes.size() + 2, 'p');
    CHECK_THAT(decode_error(bytes), Contains(malformed) && Contains("inline payload of 25 bytes, header says 24"));
    bytes.pop_back();
    CHECK(decode_error(bytes) == "(no error)");
  }
  SECTION("list position outside the list") {
    MessageHeader h = tensor_header();
    h.list_index = 3;
    h.list_size = 3;
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("list position 3 of 3"));
    h.list_index = 0;
    h.list_size = 0;
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("list position 0 of 0"));
    h.list_index = 2;
    h.list_size = 3;
    CHECK(decode_error(encode(h)) == "(no error)");
  }
  SECTION("stray bytes after a header without inline payload") {
    std::vector<char> bytes = valid;
    bytes.push_back('!');
    CHECK_THAT(decode_error(bytes), Contains(malformed) && Contains("1 stray bytes after the header"));
    MessageHeader b;
    b.kind = OpKind::barrier;
    bytes = encode(b);
    bytes.resize(bytes.size() + 8, '\0');
    CHECK_THAT(decode_error(bytes), Contains(malformed) && Contains("8 stray bytes"));
  }
  SECTION("negative sequence and unknown reduction") {
    MessageHeader h = tensor_header();
    h.sequence = -1;
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("negative sequence number"));
    h.sequence = 0;
    h.reduce_op = 2;
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("unknown reduction 2"));
    h.reduce_op = -1;
    CHECK_THAT(decode_error(encode(h)), Contains(malformed) && Contains("unknown reduction -1"));
  }
  SECTION("data left in the sender's memory: only a collective's eager piece, with its address") {
    MessageHeader h = tensor_header();
    h.kind = OpKind::alltoall;
    h.flags = kFlagTyped;
    h.data_flags = kDataEager | kDataInMemory;
    h.address = 0x7f0012345000ull;
    REQUIRE(decode_error(encode(h)) == "(no error)");
    require_same(decode_header(encode(h).data(), encode(h).size(), kSource).header, h);
    MessageHeader bad = h;
    bad.address = 0;
    CHECK_THAT(decode_error(encode(bad)), Contains(malformed) && Contains("cannot offer it"));
    bad = h;
    bad.data_flags = kDataInMemory;  // without kDataEager
    CHECK_THAT(decode_error(encode(bad)), Contains(malformed) && Contains("cannot offer it"));
    bad = h;
    bad.shape = Shape{0};
    bad.payload_bytes = 0;  // nothing to read
    CHECK_THAT(decode_error(encode(bad)), Contains(malformed) && Contains("cannot offer it"));
    bad = h;
    bad.kind = OpKind::tensor_send;  // point to point has no eager pieces
    bad.flags = 0;
    CHECK_THAT(decode_error(encode(bad)), Contains(malformed) && Contains("eager data on a message that cannot"));
    bad = h;
    bad.data_flags = kDataEager;  // an address without its flag
    CHECK_THAT(decode_error(encode(bad)), Contains(malformed) && Contains("an address on a message"));
    bad = h;
    bad.data_flags = kDataEager | kDataInMemory | 4;
    CHECK_THAT(decode_error(encode(bad)), Contains(malformed) && Contains("unknown data flags 7"));
  }
}

TEST_CASE("message: corrupting any single byte is either accepted or a malformed-message error") {
  // A small fuzz: no corruption of a valid message may crash, or throw anything but a tandem::Error
  // naming the source rank.
  MessageHeader h = tensor_header();
  h.flags = kFlagInlinePayload;
  std::vector<char> valid = encode(h);
  valid.resize(valid.size() + 24, 'q');
  int rejected = 0;
  for (std::size_t i = 0; i < valid.size(); ++i) {
    for (int value : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
      std::vector<char> bytes = valid;
      bytes[i] = static_cast<char>(value);
      try {
        decode_header(bytes.data(), bytes.size(), kSource);
      } catch (const Error& e) {
        ++rejected;
        INFO("byte " << i << " set to " << value);
        CHECK_THAT(std::string(e.what()), Contains("malformed message from rank 7"));
      }
    }
  }
  CHECK(rejected > 0);
}
