// The header every tandem message carries, and its wire format.
//
// Each point-to-point message and each collective's metadata exchange starts with a
// MessageHeader: which operation sent it, the dtype and shape of the tensor (so a receiver
// never has to know them in advance), and a sequence number (per peer and tag for
// point-to-point traffic, per communicator for collectives). A receiver compares the header
// with what it expects and, on a mismatch, raises an error naming both operations instead of
// hanging or reading garbage.
//
// The header describes traffic, not its meaning. A layer that builds its own protocol on the
// transport (comm/protocol) sends its tensors as
// OpKind::layer_message, names them in `label` (which errors print) and keeps its own bits in
// `layer_flags`; the transport carries both and never reads them. A collective called inside a
// labelled scope (CommLabelScope, communicator.h) carries the scope's label the same way.
//
// decode_header() parses bytes that arrive from another process: it validates every field and
// every length before use, and is the entry point of the message fuzzer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace tandem::comm_detail {

// What sent a message. Point-to-point kinds travel on the user's tag; collective kinds travel
// on the reserved collective tag.
enum class OpKind : std::uint8_t {
  // point to point
  tensor_send = 1,     // Communicator::send
  layer_message = 2,   // a tensor of a protocol layered on the transport, named by its label
  object_send = 4,     // Communicator::send_obj
  // collectives (metadata exchange before the data moves)
  barrier = 16,
  bcast = 17,
  gather = 18,
  scatter = 19,
  allgather = 20,
  alltoall = 21,
  allreduce = 22,
  reduce = 23,          // backward of bcast
  reduce_scatter = 24,  // backward of allgather
  object_bcast = 25,
  object_gather = 26,
  split = 27,
  alltoallv = 28,
  last = alltoallv,
};

const char* op_kind_name(OpKind kind);
bool is_collective(OpKind kind);

inline constexpr std::uint32_t kMessageMagic = 0x4d444e54;  // "TNDM"
inline constexpr std::uint8_t kMessageVersion = 4;
inline constexpr int kMaxDims = 8;
// The longest call-site text a collective header carries (the call-site check, communicator.h).
inline constexpr std::size_t kMaxSiteBytes = 1024;
// The longest label a header carries (a layer's name for its message, or a scope's).
inline constexpr std::size_t kMaxLabelBytes = 255;

// Header flags.
inline constexpr std::uint8_t kFlagInlinePayload = 1;  // the payload follows the header in the same message
// Bits 2 and 4 are free.
inline constexpr std::uint8_t kFlagList = 8;           // one of a list of tensors sent together
inline constexpr std::uint8_t kFlagTyped = 16;         // collectives: dtype and shape describe this rank's tensor
inline constexpr std::uint8_t kFlagAbandoned = 32;     // collectives: the sender gave up its previous collective
// The tensor is on a CUDA device (a receiver that passed no tensor of its own places it on its
// communicator's device; see communicator.h).
inline constexpr std::uint8_t kFlagOnDevice = 64;
// Point to point: the payload follows on the communicator's device transport (NCCL) once the
// receiver has matched this header, not in MPI messages.
inline constexpr std::uint8_t kFlagDevicePayload = 128;

// Header data flags (a second set: the flags above are all taken).
// alltoall / alltoallv: the sender's piece for this receiver (payload_bytes of it, when any) was
// sent with the header, on the communicator's eager-data tag, so the data is moving before the
// headers are checked; a receiver that finds the headers disagree receives it and discards it.
// bcast: the root sent the whole tensor so to every peer (small communicators, see bcast_checked).
inline constexpr std::uint8_t kDataEager = 1;
// With kDataEager, for a piece or payload beside the header: no message carries it. It stays in
// the sender's memory at `address` (in the sender's process) until the receiver has read it
// there (direct_read.h) and said so on the communicator's read-done tag.
inline constexpr std::uint8_t kDataInMemory = 2;

struct MessageHeader {
  OpKind kind = OpKind::tensor_send;
  std::uint8_t flags = 0;
  DType dtype = DType::f32;
  std::int32_t tag = 0;
  std::int32_t root = -1;          // collectives with a root; -1 otherwise
  std::int64_t sequence = 0;       // per (peer, tag) for point-to-point, per communicator for collectives
  std::uint32_t list_index = 0;    // position in a list of tensors sent together
  std::uint32_t list_size = 1;
  std::int32_t reduce_op = 0;      // allreduce: 0 sum, 1 mean
  std::uint64_t digest = 0;        // collectives: what all ranks must agree on beyond dtype and shape
  std::int64_t aux = -1;           // collective-specific (alltoall: each piece's bytes when all are equal)
  Shape shape;                     // of the tensor this message describes (or carries)
  std::uint64_t payload_bytes = 0; // of the tensor's data, inline or in the next message
  std::uint8_t data_flags = 0;     // kDataEager, kDataInMemory
  std::uint64_t address = 0;       // kDataInMemory: where the data lies in the sender's memory
  // Collectives, with the call-site check on (communicator.h): where the user called it,
  // "file:line (function)"; empty otherwise. At most kMaxSiteBytes.
  std::string site;
  // What the sending layer calls this message (layer_message: required) or the scope a collective
  // was called in ("in backward"); empty otherwise. At most kMaxLabelBytes. Printed, never read.
  std::string label;
  std::uint8_t layer_flags = 0;    // layer_message: the sending layer's own bits, carried as they are

  bool has_data_flag(std::uint8_t flag) const { return (data_flags & flag) != 0; }

  bool has_flag(std::uint8_t flag) const { return (flags & flag) != 0; }
  // "send f32[3, 4] (tag 0, message #2)" for errors; a collective's call site after " at ".
  std::string describe() const;
};

// Bytes of the encoded header (without payload).
std::size_t encoded_header_size(const MessageHeader& header);
// Appends the encoded header to out.
void encode_header(const MessageHeader& header, std::vector<char>& out);

struct DecodedMessage {
  MessageHeader header;
  std::size_t header_bytes = 0;  // where an inline payload starts
};
// Parses and validates a message received from rank `source` (for the error text). Throws
// tandem::Error on anything malformed: wrong magic or version, unknown kind or dtype, too many
// dimensions, negative extents, a payload size that does not match dtype x shape, or an
// inline payload whose length does not match the message length, a layer message without a
// label.
DecodedMessage decode_header(const char* data, std::size_t size, int source);

}  // namespace tandem::comm_detail
