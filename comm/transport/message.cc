#include "comm/transport/message.h"

#include <cstring>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace tandem::comm_detail {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::tensor_send: return "send";
    case OpKind::layer_message: return "a layer's message";
    case OpKind::object_send: return "send_obj";
    case OpKind::barrier: return "barrier";
    case OpKind::bcast: return "bcast";
    case OpKind::gather: return "gather";
    case OpKind::scatter: return "scatter";
    case OpKind::allgather: return "allgather";
    case OpKind::alltoall: return "alltoall";
    case OpKind::allreduce: return "allreduce";
    case OpKind::reduce: return "reduce";
    case OpKind::reduce_scatter: return "reduce_scatter";
    case OpKind::object_bcast: return "bcast_obj";
    case OpKind::object_gather: return "gather_obj";
    case OpKind::split: return "split";
    case OpKind::alltoallv: return "alltoallv";
  }
  return "unknown";
}

bool is_collective(OpKind kind) { return static_cast<int>(kind) >= static_cast<int>(OpKind::barrier); }

namespace {

bool valid_kind(std::uint8_t value) {
  return value == static_cast<std::uint8_t>(OpKind::tensor_send) ||
         value == static_cast<std::uint8_t>(OpKind::layer_message) ||
         value == static_cast<std::uint8_t>(OpKind::object_send) ||
         (value >= static_cast<std::uint8_t>(OpKind::barrier) && value <= static_cast<std::uint8_t>(OpKind::last));
}

// Fixed part of the wire format, little-endian as the machines it runs on.
#pragma pack(push, 1)
struct WireHeader {
  std::uint32_t magic;
  std::uint8_t version;
  std::uint8_t kind;
  std::uint8_t flags;
  std::uint8_t dtype;
  std::int32_t tag;
  std::int32_t root;
  std::int64_t sequence;
  std::uint32_t list_index;
  std::uint32_t list_size;
  std::int32_t reduce_op;
  std::uint64_t digest;
  std::int64_t aux;
  std::uint8_t ndim;
  std::uint8_t data_flags;
  std::uint16_t site_bytes;  // the call-site text that follows the shape
  std::uint8_t label_bytes;  // the label that follows the call site
  std::uint8_t layer_flags;
  std::uint64_t payload_bytes;
  std::uint64_t address;
};
#pragma pack(pop)

}  // namespace

std::string MessageHeader::describe() const {
  std::ostringstream out;
  if (kind == OpKind::layer_message) {
    out << (label.empty() ? op_kind_name(kind) : label.c_str());
  } else {
    out << op_kind_name(kind);
    if (!label.empty()) out << " (" << label << ")";
  }
  if (is_collective(kind) ? has_flag(kFlagTyped)
                           : kind != OpKind::object_send) {
    out << " " << dtype_name(dtype) << shape_str(shape);
    if (has_flag(kFlagOnDevice)) out << " (CUDA)";
  } else if (kind == OpKind::object_send || kind == OpKind::object_bcast || kind == OpKind::object_gather) {
    out << " of " << payload_bytes << " bytes";
  }
  if (list_size > 1) out << " (tensor " << list_index + 1 << " of " << list_size << ")";
  if (root >= 0) out << " root " << root;
  if (is_collective(kind)) {
    out << " (collective #" << sequence << ")";
    if (!site.empty()) out << " at " << site;
  } else {
    out << " (tag " << tag << ", message #" << sequence << ")";
  }
  return out.str();
}

std::size_t encoded_header_size(const MessageHeader& header) {
  return sizeof(WireHeader) + header.shape.size() * sizeof(std::int64_t) + header.site.size() + header.label.size();
}

void encode_header(const MessageHeader& header, std::vector<char>& out) {
  TANDEM_CHECK(header.shape.size() <= static_cast<std::size_t>(kMaxDims), "comm: a tensor of ", header.shape.size(),
               " dimensions cannot be sent (at most ", kMaxDims, ")");
  WireHeader wire{};
  wire.magic = kMessageMagic;
  wire.version = kMessageVersion;
  wire.kind = static_cast<std::uint8_t>(header.kind);
  wire.flags = header.flags;
  wire.dtype = static_cast<std::uint8_t>(header.dtype);
  wire.tag = header.tag;
  wire.root = header.root;
  wire.sequence = header.sequence;
  wire.list_index = header.list_index;
  wire.list_size = header.list_size;
  wire.reduce_op = header.reduce_op;
  wire.digest = header.digest;
  wire.aux = header.aux;
  TANDEM_CHECK(header.site.size() <= kMaxSiteBytes, "comm: a call site of ", header.site.size(),
               " bytes (at most ", kMaxSiteBytes, ")");
  TANDEM_CHECK(header.label.size() <= kMaxLabelBytes, "comm: a message label of ", header.label.size(),
               " bytes (at most ", kMaxLabelBytes, ")");
  wire.ndim = static_cast<std::uint8_t>(header.shape.size());
  wire.site_bytes = static_cast<std::uint16_t>(header.site.size());
  wire.label_bytes = static_cast<std::uint8_t>(header.label.size());
  wire.layer_flags = header.layer_flags;
  wire.data_flags = header.data_flags;
  wire.payload_bytes = header.payload_bytes;
  wire.address = header.address;
  const std::size_t start = out.size();
  out.resize(start + encoded_header_size(header));
  std::memcpy(out.data() + start, &wire, sizeof(wire));
  if (!header.shape.empty())
    std::memcpy(out.data() + start + sizeof(wire), header.shape.data(), header.shape.size() * sizeof(std::int64_t));
  char* text = out.data() + start + sizeof(wire) + header.shape.size() * sizeof(std::int64_t);
  if (!header.site.empty()) std::memcpy(text, header.site.data(), header.site.size());
  if (!header.label.empty()) std::memcpy(text + header.site.size(), header.label.data(), header.label.size());
}

DecodedMessage decode_header(const char* data, std::size_t size, int source) {
  auto bad = [&](const std::string& why) {
    return Error(detail::concat("comm: malformed message from rank ", source, " (", size, " bytes): ", why,
                                "; is another program sending on this communicator?"));
  };
  if (size < sizeof(WireHeader)) throw bad("shorter than a message header");
  WireHeader wire;
  std::memcpy(&wire, data, sizeof(wire));
  if (wire.magic != kMessageMagic) throw bad("wrong magic number");
  if (wire.version != kMessageVersion)
    throw bad(detail::concat("protocol version ", int(wire.version), ", this build speaks ", int(kMessageVersion)));
  if (!valid_kind(wire.kind)) throw bad(detail::concat("unknown operation kind ", int(wire.kind)));
  if (wire.dtype > static_cast<std::uint8_t>(kLastDType))
    throw bad(detail::concat("unknown dtype ", int(wire.dtype)));
  if (wire.ndim > kMaxDims) throw bad(detail::concat(int(wire.ndim), " dimensions"));
  if (wire.list_size == 0 || wire.list_index >= wire.list_size)
    throw bad(detail::concat("list position ", wire.list_index, " of ", wire.list_size));
  if (wire.sequence < 0) throw bad("negative sequence number");
  if (wire.reduce_op < 0 || wire.reduce_op > 1) throw bad(detail::concat("unknown reduction ", wire.reduce_op));
  if (wire.site_bytes > kMaxSiteBytes) throw bad(detail::concat("a call site of ", wire.site_bytes, " bytes"));
  if (wire.site_bytes > 0 && !is_collective(static_cast<OpKind>(wire.kind)))
    throw bad("a call site on a point-to-point message");
  const std::size_t shape_end = sizeof(WireHeader) + wire.ndim * sizeof(std::int64_t);
  const std::size_t label_start = shape_end + wire.site_bytes;
  const std::size_t header_bytes = label_start + wire.label_bytes;
  if (size < shape_end) throw bad("shape cut short");
  if (size < label_start) throw bad("call site cut short");
  if (size < header_bytes) throw bad("label cut short");
  if (wire.kind == static_cast<std::uint8_t>(OpKind::layer_message) && wire.label_bytes == 0)
    throw bad("a layer's message without a label");
  if (wire.layer_flags != 0 && wire.kind != static_cast<std::uint8_t>(OpKind::layer_message))
    throw bad(detail::concat("layer flags ", int(wire.layer_flags), " on a message no layer sent"));

  DecodedMessage message;
  message.header_bytes = header_bytes;
  MessageHeader& header = message.header;
  header.kind = static_cast<OpKind>(wire.kind);
  header.flags = wire.flags;
  header.dtype = static_cast<DType>(wire.dtype);
  header.tag = wire.tag;
  header.root = wire.root;
  header.sequence = wire.sequence;
  header.list_index = wire.list_index;
  header.list_size = wire.list_size;
  header.reduce_op = wire.reduce_op;
  header.digest = wire.digest;
  header.aux = wire.aux;
  header.payload_bytes = wire.payload_bytes;
  header.data_flags = wire.data_flags;
  header.address = wire.address;
  header.shape.resize(wire.ndim);
  if (wire.ndim > 0) std::memcpy(header.shape.data(), data + sizeof(WireHeader), wire.ndim * sizeof(std::int64_t));
  header.site.assign(data + shape_end, wire.site_bytes);
  header.label.assign(data + label_start, wire.label_bytes);
  header.layer_flags = wire.layer_flags;

  // Collective headers describe a tensor only when typed; object messages carry bytes.
  const bool carries_tensor = is_collective(header.kind) ? header.has_flag(kFlagTyped)
                                                          : header.kind != OpKind::object_send;
  if (carries_tensor) {
    // The element count must not overflow, and must match the payload size exactly.
    std::uint64_t numel = 1;
    for (std::int64_t extent : header.shape) {
      if (extent < 0) throw bad(detail::concat("negative extent in shape ", shape_str(header.shape)));
      if (extent != 0 && numel > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(extent))
        throw bad(detail::concat("shape ", shape_str(header.shape), " overflows"));
      numel *= static_cast<std::uint64_t>(extent);
    }
    const std::uint64_t element = dtype_size(header.dtype);
    if (numel > std::numeric_limits<std::uint64_t>::max() / element) throw bad("payload size overflows");
    if (numel * element != header.payload_bytes)
      throw bad(detail::concat("payload of ", header.payload_bytes, " bytes for ", dtype_name(header.dtype),
                               shape_str(header.shape)));
  }
  if (header.has_flag(kFlagDevicePayload) &&
      (!carries_tensor || is_collective(header.kind) || header.has_flag(kFlagInlinePayload)))
    throw bad("a device payload on a message that cannot carry one");
  if (header.data_flags & ~(kDataEager | kDataInMemory))
    throw bad(detail::concat("unknown data flags ", int(header.data_flags)));
  if (header.has_data_flag(kDataEager) &&
      !((header.kind == OpKind::alltoall || header.kind == OpKind::alltoallv || header.kind == OpKind::bcast ||
         header.kind == OpKind::allgather || header.kind == OpKind::allreduce) &&
        carries_tensor))
    throw bad("eager data on a message that cannot carry it");
  if (header.has_data_flag(kDataInMemory) &&
      (!header.has_data_flag(kDataEager) || header.has_flag(kFlagInlinePayload) || header.payload_bytes == 0 ||
       header.address == 0))
    throw bad(detail::concat("data in the sender's memory (", header.payload_bytes, " bytes at ", header.address,
                             ") on a message that cannot offer it"));
  if (!header.has_data_flag(kDataInMemory) && header.address != 0)
    throw bad("an address on a message whose data is not in the sender's memory");
  if (header.has_flag(kFlagInlinePayload)) {
    if (size - header_bytes != header.payload_bytes)
      throw bad(detail::concat("inline payload of ", size - header_bytes, " bytes, header says ", header.payload_bytes));
  } else if (size != header_bytes) {
    throw bad(detail::concat(size - header_bytes, " stray bytes after the header"));
  }
  return message;
}

}  // namespace tandem::comm_detail
