// Helpers shared by the MPI communicator's collectives (mpi_collective_headers.cc,
// mpi_collectives.cc, mpi_rooted_collectives.cc, mpi_piece_exchange.cc,
// mpi_started_collectives.cc): MPI's types and counts, flat buffers and their views, host
// copies, sums of received bytes, and the device data phase. Internal to comm/transport.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "comm/transport/mpi_communicator.h"
#include "core/error.h"
#include "core/hash.h"

namespace tandem {

namespace comm_detail::collective_util {

inline constexpr std::size_t kChunkBytes = std::size_t(1) << 30;

// The MPI type of a tensor that a collective sums; pair it with mpi_sum(dtype).
inline MPI_Datatype mpi_type(DType dtype, const char* operation) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;  // summed by mpi_sum's own operation
    case DType::boolean: break;
  }
  TANDEM_FAIL(operation, ": cannot sum ", dtype_name(dtype), " tensors (f32, f64, bf16, f16, i32 and i64 can be)");
}

// MPI_SUM, or for bf16 and f16 an operation that adds in f32 and rounds each sum once
// (mpi_half_sum.cc).
MPI_Op mpi_sum(DType dtype);

inline int checked_int(std::size_t value, const char* operation) {
  TANDEM_CHECK(value <= static_cast<std::size_t>(INT_MAX), operation, ": ", value,
               " bytes in one collective exceed what the \"naive\" communicator's MPI calls can count (2 GiB)");
  return static_cast<int>(value);
}

// Views of a flat buffer: one tensor per shape, consecutive.
inline std::vector<Tensor> split_flat(const Tensor& flat, const std::vector<Shape>& shapes) {
  std::vector<Tensor> pieces;
  pieces.reserve(shapes.size());
  std::int64_t begin = 0;
  for (const Shape& shape : shapes) {
    const std::int64_t n = shape_numel(shape);
    pieces.push_back(flat.slice_flat(begin, shape));
    begin += n;
  }
  return pieces;
}

// t on `device`: t itself, moved (no copy of its shape), when it lies there already.
inline Tensor moved_to(Tensor t, const Device& device) {
  if (t.device() == device) return t;  // (a conditional expression would copy it)
  return t.to(device);
}

// The same, the shapes moved into the views (no copy of each).
inline std::vector<Tensor> split_flat(const Tensor& flat, std::vector<Shape>&& shapes) {
  std::vector<Tensor> pieces;
  pieces.reserve(shapes.size());
  std::int64_t begin = 0;
  for (Shape& shape : shapes) {
    const std::int64_t n = shape_numel(shape);
    pieces.push_back(flat.slice_flat(begin, std::move(shape)));
    begin += n;
  }
  return pieces;
}

// The pieces as one buffer, in order: a view when they already lie back to back in one
// storage (slices of one tensor, as split produces), else a packed copy.
struct Packed {
  const void* data = nullptr;
  std::shared_ptr<const void> owner;
};

// The tensors on the host (copies of those elsewhere), for MPI.
inline std::vector<Tensor> on_host(const std::vector<Tensor>& xs) {
  std::vector<Tensor> hosts;
  hosts.reserve(xs.size());
  for (const Tensor& x : xs) hosts.push_back(comm_detail::host_for_mpi(x));
  return hosts;
}

// An exchange's pieces as they would be on the host, and there already (the same list, nothing
// copied) when every piece is on the CPU; else copies in `storage`.
inline comm_detail::PieceList on_host(const comm_detail::PieceList& xs, std::vector<Tensor>& storage) {
  bool all_cpu = true;
  for (std::size_t r = 0; r < xs.size() && all_cpu; ++r) all_cpu = xs[r].device().is_cpu();
  if (all_cpu) return xs;
  storage = on_host(xs.to_vector());
  return storage;
}

// A set of ranks: bits in place up to 64 ranks (a small exchange allocates nothing for it).
class RankSet {
 public:
  explicit RankSet(int size) {
    if (size > 64) more_.assign(static_cast<std::size_t>(size), false);
  }
  bool has(int rank) const { return more_.empty() ? (bits_ >> rank) & 1 : more_[static_cast<std::size_t>(rank)]; }
  void add(int rank) {
    if (more_.empty()) bits_ |= std::uint64_t(1) << rank;
    else more_[static_cast<std::size_t>(rank)] = true;
  }

 private:
  std::uint64_t bits_ = 0;
  std::vector<bool> more_;
};

// An exchange's pieces as views of `flat`, each with the shape of its header (moved out of it).
inline std::vector<Tensor> split_flat(const Tensor& flat, std::vector<comm_detail::MessageHeader>&& headers) {
  std::vector<Tensor> pieces;
  pieces.reserve(headers.size());
  std::int64_t begin = 0;
  for (comm_detail::MessageHeader& header : headers) {
    const std::int64_t n = shape_numel(header.shape);
    pieces.push_back(flat.slice_flat(begin, std::move(header.shape)));
    begin += n;
  }
  return pieces;
}

// The elements of an exchange's pieces for this rank, all together.
inline std::int64_t pieces_numel(const std::vector<comm_detail::MessageHeader>& all) {
  std::int64_t numel = 0;
  for (const comm_detail::MessageHeader& header : all) numel += shape_numel(header.shape);
  return numel;
}

inline Packed pack(const std::vector<Tensor>& pieces, DType dtype) {
  const char* next = nullptr;
  const Storage* storage = nullptr;
  bool consecutive = true;
  for (const Tensor& piece : pieces) {
    if (piece.nbytes() == 0) continue;
    const char* begin = static_cast<const char*>(piece.raw_data());
    if (storage && (piece.storage().get() != storage || begin != next)) consecutive = false;
    if (!storage) storage = piece.storage().get();
    next = begin + piece.nbytes();
  }
  if (consecutive) {
    for (const Tensor& piece : pieces)
      if (piece.nbytes() > 0) return Packed{piece.raw_data(), piece.storage()};
    return Packed{};
  }
  std::int64_t total = 0;
  for (const Tensor& piece : pieces) total += piece.numel();
  Tensor flat({total}, dtype);
  char* out = static_cast<char*>(flat.raw_data());
  for (const Tensor& piece : pieces) {
    if (piece.nbytes() > 0) std::memcpy(out, piece.raw_data(), piece.nbytes());
    out += piece.nbytes();
  }
  return Packed{flat.raw_data(), flat.storage()};
}

// bf16 and f16: as f32 does below, each quotient rounded once (mpi_half_sum.cc).
void divide_half(Tensor& y, int size);

inline void divide(Tensor& y, int size) {
  if (is_half(y.dtype())) return divide_half(y, size);
  if (y.dtype() == DType::f32) {
    float* p = y.data<float>();
    const float scale = 1.0f / static_cast<float>(size);
    for (std::int64_t i = 0; i < y.numel(); ++i) p[i] *= scale;
  } else {
    double* p = y.data<double>();
    for (std::int64_t i = 0; i < y.numel(); ++i) p[i] /= size;
  }
}

// Whether every header carries its sender's tensor (kFlagInlinePayload): then the collective's
// data has all arrived with the headers, and every rank, seeing the same headers, skips the
// data phase alike.
inline bool all_inline(const std::vector<comm_detail::MessageHeader>& all) {
  for (const comm_detail::MessageHeader& header : all)
    if (!header.has_flag(comm_detail::kFlagInlinePayload)) return false;
  return true;
}

template <typename T>
inline void add_elements(char* into, const char* from, std::int64_t n) {
  // from lies inside a received message, not necessarily aligned for T.
  for (std::int64_t i = 0; i < n; ++i) {
    T a, b;
    std::memcpy(&a, into + i * sizeof(T), sizeof(T));
    std::memcpy(&b, from + i * sizeof(T), sizeof(T));
    a += b;
    std::memcpy(into + i * sizeof(T), &a, sizeof(T));
  }
}

// The same for bf16 and f16 (mpi_half_sum.cc): added in f32, each sum rounded once, as mpi_sum's
// operation.
void add_half_into(char* into, const char* from, std::int64_t n, DType dtype);

// into += from, elementwise (the dtypes MPI sums: see mpi_type).
inline void add_into(void* into, const void* from, std::int64_t n, DType dtype) {
  char* out = static_cast<char*>(into);
  const char* in = static_cast<const char*>(from);
  switch (dtype) {
    case DType::f32: return add_elements<float>(out, in, n);
    case DType::f64: return add_elements<double>(out, in, n);
    case DType::i32: return add_elements<std::int32_t>(out, in, n);
    case DType::i64: return add_elements<std::int64_t>(out, in, n);
    case DType::bf16:
    case DType::f16: return add_half_into(out, in, n, dtype);
    case DType::boolean: break;
  }
  TANDEM_FAIL("comm: internal error: no sum of ", dtype_name(dtype), " tensors");
}

inline std::uint64_t shapes_digest(const std::vector<Tensor>& xs) {
  Fnv1a64 h;  // over ndim and extents
  for (const Tensor& x : xs) {
    h.mix(x.dim());
    for (std::int64_t e : x.shape()) h.mix(static_cast<std::uint64_t>(e));
  }
  return h.digest();
}

}  // namespace comm_detail::collective_util

// Once the headers agree, every peer has committed to the collective and queues its half on its
// GPU, where nothing can take it back: a failure on this rank from then on (an allocation out
// of memory included) leaves those halves waiting forever, so it must break the communicator.
// Hence every step after the exchange that can throw runs inside the phase, and what can be
// done before it (transport_copy, outputs of a locally known size) is done before it, when a
// failure is still this rank's alone and leaves the communicator usable. What follows the phase
// (copies back to the caller's device) may throw without harm: every rank's half is queued.
template <typename F>
void MpiCommunicator::run_device_phase(const char* operation, F&& phase) {
  const std::int64_t sequence = collective_sequence_ - 1;
  try {
    phase();
  } catch (const std::exception& e) {  // tandem::Error, and std::bad_alloc from host containers
    // The peers have queued their halves, which can now never complete.
    broken_ = detail::concat(operation, " (collective #", sequence, ") failed on the device (", e.what(), ")");
    throw;
  }
  collective_open_ = false;
}

}  // namespace tandem
