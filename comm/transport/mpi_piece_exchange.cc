// Exchanges of pieces, one per rank (alltoall, alltoallv, and allgather and allreduce among few
// ranks): after the headers, or beside them (eagerly), into one flat buffer; the alltoallv
// verdict on the rows.
#include <algorithm>
#include <climits>
#include <cstring>
#include <sstream>

#include "comm/transport/mpi_collective_util.h"
#include "comm/transport/mpi_communicator.h"
#include "comm/transport/mpi_env.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/ops.h"

namespace tandem {

using comm_detail::check_mpi;
using comm_detail::OpKind;
using namespace comm_detail::collective_util;  // NOLINT: this file's helpers

bool MpiCommunicator::exchanges_directly(const Tensor& x) const {
  // The same on every rank whose header passes the check (exchange_pieces raises on every rank
  // when some tensor is too large to go beside its header).
  return eager_data_ && size_ <= kDirectRanks && !hierarchy_ && !moves_on_device(x);
}

MpiCommunicator::FlatExchange MpiCommunicator::exchange_pieces(const PieceList& xs, OpKind kind,
                                                               const char* operation, const Shape* row_shape,
                                                               const PieceOptions& options) {
  // Whether every piece of this rank has the same size: when all ranks say so (with the same
  // size), every rank can choose MPI_Alltoall, which beats the v-variant.
  bool eager = eager_data_ && !moves_on_device(xs[0]);
  for (std::size_t r = 0; r < xs.size(); ++r)
    eager = eager && xs[r].nbytes() <= static_cast<std::size_t>(INT_MAX) && xs[r].dim() <= comm_detail::kMaxDims;
  if (eager) return exchange_pieces_eagerly(xs, kind, operation, row_shape, options);
  std::int64_t uniform = static_cast<std::int64_t>(xs[0].nbytes());
  for (std::size_t r = 0; r < xs.size(); ++r)
    if (static_cast<std::int64_t>(xs[r].nbytes()) != uniform) uniform = -1;
  std::vector<Tensor> sends;  // transport copies, before the exchange (see run_device_phase)
  if (moves_on_device(xs[0]))
    for (std::size_t r = 0; r < xs.size(); ++r) sends.push_back(transport_copy(xs[r]));
  std::vector<Header> all = exchange_headers(
      [&](int peer) {
        Header header = collective_header(kind, -1, &xs[peer]);
        header.aux = uniform;
        header.reduce_op = options.reduce_op;
        header.digest = options.digest;
        return header;
      },
      options.same_shape);
  // Some peers sent their pieces with their headers and this rank could not (see the eager
  // path): every rank sees the same flags, so every rank raises this.
  for (int r = 0; r < size_; ++r) {
    if (!all[r].has_data_flag(comm_detail::kDataEager)) continue;
    discard_eager_data(all);
    TANDEM_FAIL(operation, ": rank ", rank_, " passes a piece of more than ", INT_MAX,
                " bytes (or of more than ", comm_detail::kMaxDims, " axes), which MPI cannot move in one message");
  }
  if (row_shape) check_rows(all, *row_shape, operation);
  const std::int64_t numel = pieces_numel(all);
  const Device device = xs[0].device();
  FlatExchange out;
  if (on_device(all)) {
    run_device_phase(operation, [&] {
      out.flat = Tensor({numel}, xs[0].dtype(), transport_device());  // sized by the peers' headers
      std::vector<Tensor> pieces = split_flat(out.flat, std::vector<Header>(all));
      device_alltoall(sends, pieces);
    });
    out.flat = out.flat.to(device);
    out.headers = std::move(all);
    return out;
  }
  bool equal = uniform >= 0 && uniform <= INT_MAX;
  for (const Header& header : all) equal = equal && header.aux == uniform;
  std::vector<int> send_counts(size_), send_displacements(size_), recv_counts(size_), recv_displacements(size_);
  std::size_t send_total = 0, recv_total = 0;
  for (int r = 0; r < size_; ++r) {
    send_counts[r] = checked_int(xs[r].nbytes(), operation);
    send_displacements[r] = checked_int(send_total, operation);
    send_total += xs[r].nbytes();
    recv_counts[r] = checked_int(all[r].payload_bytes, operation);
    recv_displacements[r] = checked_int(recv_total, operation);
    recv_total += all[r].payload_bytes;
  }
  checked_int(send_total, operation);
  checked_int(recv_total, operation);
  const Packed send = pack(on_host(xs.to_vector()), xs[0].dtype());
  Tensor flat({numel}, xs[0].dtype());
  std::vector<MPI_Request> requests(1);
  if (equal) {  // every rank saw every count in the headers, so all choose the same call
    check_mpi(MPI_Ialltoall(send.data, send_counts[0], MPI_BYTE, flat.raw_data(), send_counts[0], MPI_BYTE, comm_,
                            &requests[0]),
              "MPI_Ialltoall");
  } else {
    check_mpi(MPI_Ialltoallv(send.data, send_counts.data(), send_displacements.data(), MPI_BYTE, flat.raw_data(),
                             recv_counts.data(), recv_displacements.data(), MPI_BYTE, comm_, &requests[0]),
              "MPI_Ialltoallv");
  }
  finish_collective(requests, operation, {send.owner, flat.storage()});
  out.flat = moved_to(std::move(flat), device);
  out.headers = std::move(all);
  return out;
}

void MpiCommunicator::check_rows(const std::vector<Header>& all, const Shape& row_shape, const char* operation) const {
  // Every rank sees every rank's rows (in the piece it sent here), so every rank reaches the
  // same verdict.
  for (int r = 0; r < size_; ++r) {
    const Shape& shape = all[r].shape;
    const bool same = !shape.empty() && Shape(shape.begin() + 1, shape.end()) == row_shape;
    if (same) continue;
    std::ostringstream text;
    text << operation << ": the ranks' rows differ (every rank must send rows of one shape):";
    for (int q = 0; q < size_; ++q) {
      const Shape& piece = all[q].shape;
      text << (q ? ";" : "") << " rank " << q << " sends rows of "
           << shape_str(piece.empty() ? piece : Shape(piece.begin() + 1, piece.end())) << " "
           << dtype_name(all[q].dtype);
    }
    TANDEM_FAIL(text.str());
  }
}

MpiCommunicator::FlatExchange MpiCommunicator::exchange_pieces_eagerly(const PieceList& xs, OpKind kind,
                                                                       const char* operation,
                                                                       const Shape* row_shape,
                                                                       const PieceOptions& options) {
  check_usable();
  // Each peer's piece goes now, before the headers; the header says it did (kDataEager) and how
  // long it is, so the receiver posts its receive as soon as it has the header.
  std::vector<Tensor> host_copies;
  const PieceList hosts = on_host(xs, host_copies);
  std::vector<MPI_Request> requests;  // (none when every piece goes inside its header)
  KeepAlive keep_alive;
  // Small pieces travel inside the headers instead (each receiver takes what each header
  // carries, so the choice is the sender's alone).
  RankSet inside(size_);
  std::size_t inside_total = 0;
  for (int peer = 0; peer < size_; ++peer) {
    const std::size_t bytes = hosts[static_cast<std::size_t>(peer)].nbytes();
    if (!inline_collectives_ || peer == rank_ || bytes == 0 || bytes > kInlineCollectiveBytes ||
        inside_total + bytes > kInlineCollectiveTotal)
      continue;
    inside.add(peer);
    inside_total += bytes;
  }
  InlineData carried;
  carried.per_peer = &hosts;
  // Large pieces for peers on this host stay here, for the peer to read (kDataInMemory); sized
  // at the first such piece (small exchanges never make one).
  std::vector<bool> in_memory;
  KeepAlive offered;
  for (int peer = 0; peer < size_; ++peer) {
    const Tensor& piece = hosts[static_cast<std::size_t>(peer)];
    if (peer == rank_ || piece.nbytes() == 0 || inside.has(peer)) continue;
    if (offers_memory_to(peer, piece.nbytes())) {
      if (in_memory.empty()) in_memory.assign(size_, false);
      in_memory[peer] = true;
      offered.push_back(piece.storage());
      continue;
    }
    requests.emplace_back();
    check_mpi(MPI_Isend(piece.raw_data(), static_cast<int>(piece.nbytes()), MPI_BYTE, peer, kEagerDataTag, comm_,
                        &requests.back()),
              "MPI_Isend");
    keep_alive.push_back(piece.storage());
  }
  std::vector<Header> all;
  try {
    all = exchange_headers(
        [&](int peer) {
          Header header = collective_header(kind, -1, &xs[peer]);
          header.data_flags = comm_detail::kDataEager;
          header.reduce_op = options.reduce_op;
          header.digest = options.digest;
          if (inside.has(peer)) header.flags |= comm_detail::kFlagInlinePayload;
          if (!in_memory.empty() && in_memory[peer]) {
            header.data_flags |= comm_detail::kDataInMemory;
            header.address = reinterpret_cast<std::uint64_t>(hosts[static_cast<std::size_t>(peer)].raw_data());
          }
          return header;
        },
        options.same_shape, &carried);
    for (int r = 0; r < size_; ++r) {
      if (all[r].has_data_flag(comm_detail::kDataEager)) continue;
      discard_eager_data(all);
      TANDEM_FAIL(operation, ": rank ", r, " passes a piece of more than ", INT_MAX, " bytes (or of more than ",
                  comm_detail::kMaxDims, " axes), which MPI cannot move in one message");
    }
    if (row_shape) {
      try {
        check_rows(all, *row_shape, operation);
      } catch (const Error&) {
        discard_eager_data(all);
        throw;
      }
    }
  } catch (...) {
    // On a disagreement the peers discard these pieces (the same verdict everywhere); otherwise
    // the job is ending. Either way the sends complete later, their buffers kept until then.
    orphans_.push_back(Orphan{requests, keep_alive});
    leave_offered(offered);
    throw;
  }
  // Data read from or left in memory: the read-done words (and nothing to set up without).
  bool reading = !offered.empty();
  for (int r = 0; r < size_ && !reading; ++r) reading = all[r].has_data_flag(comm_detail::kDataInMemory);
  std::shared_ptr<DirectReads> reads;
  if (reading) {
    reads = std::make_shared<DirectReads>();
    keep_alive.push_back(reads);
    for (const auto& piece : offered) keep_alive.push_back(piece);
    if (in_memory.empty()) in_memory.assign(size_, false);  // (only the peers offered theirs)
    await_reads(in_memory, all[rank_].sequence, *reads, requests);
  }
  FlatExchange out;
  const std::int64_t numel = pieces_numel(all);
  Tensor flat({numel}, xs[0].dtype());
  char* into = static_cast<char*>(flat.raw_data());
  char* own = nullptr;  // where this rank's piece for itself goes: copied once the receives are posted
  for (int r = 0; r < size_; ++r) {
    const std::uint64_t bytes = all[r].payload_bytes;
    if (r == rank_) {
      own = into;
    } else if (all[r].has_flag(comm_detail::kFlagInlinePayload)) {
      if (bytes > 0) std::memcpy(into, carried.payload(r), bytes);
    } else if (all[r].has_data_flag(comm_detail::kDataInMemory)) {
      read_memory_of(r, all[r], into, *reads, requests, operation);
    } else if (bytes > 0) {
      requests.emplace_back();
      check_mpi(MPI_Irecv(into, checked_int(bytes, operation), MPI_BYTE, r, kEagerDataTag, comm_, &requests.back()),
                "MPI_Irecv");
    }
    into += bytes;
  }
  // This rank's own piece last: the peers whose memory it read are told first.
  const Tensor& mine = hosts[static_cast<std::size_t>(rank_)];
  if (mine.nbytes() > 0) std::memcpy(own, mine.raw_data(), mine.nbytes());
  if (requests.empty()) {
    collective_open_ = false;  // every piece came inside its header: nothing to wait for
  } else {
    keep_alive.push_back(flat.storage());
    if (reads) {
      finish_collective(requests, operation, keep_alive);
      settle_reads(*reads, operation, std::move(keep_alive));
    } else {
      finish_collective(requests, operation, std::move(keep_alive));
    }
  }
  out.flat = moved_to(std::move(flat), xs[0].device());
  out.headers = std::move(all);
  return out;
}

}  // namespace tandem
