// Fuzz target: the communication message header decoder, comm/transport/message.h (decode_header, the
// first thing a receiver does with bytes from another process).
//
// The input is one received message: the header, the shape, and an inline payload when its
// flag is set. A header that decodes must also describe itself (error texts), fit in the
// message, and survive encode_header + decode_header unchanged. The only acceptable outcomes
// are a decoded header or a tandem::Error. No MPI is involved.
#include <cstdint>
#include <vector>

#include "comm/transport/message.h"
#include "core/error.h"
#include "tests/fuzz/fuzz_util.h"

using namespace tandem;
using namespace tandem::comm_detail;

namespace {

bool same(const MessageHeader& a, const MessageHeader& b) {
  return a.kind == b.kind && a.flags == b.flags && a.dtype == b.dtype && a.tag == b.tag && a.root == b.root &&
         a.sequence == b.sequence && a.list_index == b.list_index && a.list_size == b.list_size &&
         a.reduce_op == b.reduce_op && a.digest == b.digest && a.aux == b.aux && a.shape == b.shape &&
         a.payload_bytes == b.payload_bytes;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);
  DecodedMessage message;
  try {
    message = decode_header(bytes, size, 1);
  } catch (const Error&) {
    return 0;
  }
  const MessageHeader& header = message.header;
  FUZZ_REQUIRE(message.header_bytes <= size, "message_fuzzer: the header ends past the message");
  FUZZ_REQUIRE(message.header_bytes == encoded_header_size(header), "message_fuzzer: header size mismatch");
  FUZZ_REQUIRE(!header.describe().empty(), "message_fuzzer: empty description");

  std::vector<char> again;
  encode_header(header, again);
  again.insert(again.end(), bytes + message.header_bytes, bytes + size);  // the inline payload, if any
  const DecodedMessage redecoded = decode_header(again.data(), again.size(), 1);
  FUZZ_REQUIRE(redecoded.header_bytes == message.header_bytes && same(redecoded.header, header),
                "message_fuzzer: encode_header + decode_header changed the header");
  return 0;
}
