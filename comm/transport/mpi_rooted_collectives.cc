// The MPI communicator's collectives with a root: bcast (and bcast_checked), gather, scatter,
// reduce, and the object forms bcast_obj and gather_obj. Each exchanges headers
// (mpi_collective_headers.cc), then moves the tensors' bytes.
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

Tensor MpiCommunicator::bcast_checked(const Tensor& x, int root, std::uint64_t digest, const char* operation, CallSite site) {
  FlightCall flight(*this, site);
  check_root(root, operation);
  const bool is_root = rank_ == root;
  if (is_root) check_defined(x, operation);
  Header mine = collective_header(OpKind::bcast, root, is_root ? &x : nullptr);
  mine.digest = digest;
  // A small tensor travels inside the root's headers; every receiver keeps what they carry.
  const bool small = is_root && inlines(x);
  if (small) mine.flags |= comm_detail::kFlagInlinePayload;
  Tensor host_copy;
  const Tensor& host = small ? comm_detail::host_view_for_mpi(x, host_copy) : host_copy;
  InlineData carried;
  carried.to_all = &host;
  // Device transport: the root's copy before the exchange, the others' buffers (sized by the
  // root's header) inside the device phase (see run_device_phase).
  Tensor buffer = is_root ? transport_copy(x) : Tensor();
  // A small communicator's root sends the payload now, beside its header (kEagerBcastRanks);
  // the root's header tells the others (kDataEager), so every rank takes the same path.
  std::vector<MPI_Request> eager_sends;
  KeepAlive eager_keep, offered;
  std::vector<bool> in_memory;  // per peer, where the payload stays in memory for it
  if (is_root && !small && eager_data_ && size_ <= kEagerBcastRanks && !hierarchy_ && !moves_on_device(x) &&
      x.nbytes() > 0 && x.nbytes() <= static_cast<std::size_t>(INT_MAX)) {
    const Tensor send = comm_detail::host_for_mpi(x);
    eager_keep.push_back(send.storage());
    // One header goes to every peer: the payload stays in memory when every peer reads it there.
    bool all_read = true;
    for (int peer = 0; peer < size_; ++peer) all_read = all_read && (peer == rank_ || offers_memory_to(peer, send.nbytes()));
    if (all_read) {
      in_memory.assign(size_, true);
      in_memory[rank_] = false;
      offered.push_back(send.storage());
      mine.data_flags = comm_detail::kDataEager | comm_detail::kDataInMemory;
      mine.address = reinterpret_cast<std::uint64_t>(send.raw_data());
    } else {
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_) continue;
        eager_sends.emplace_back();
        check_mpi(MPI_Isend(send.raw_data(), static_cast<int>(send.nbytes()), MPI_BYTE, peer, kEagerDataTag, comm_,
                            &eager_sends.back()),
                  "MPI_Isend");
      }
      mine.data_flags = comm_detail::kDataEager;
    }
  }
  std::vector<Header> all;
  try {
    all = exchange_headers(mine, false, &carried);
  } catch (...) {
    // On a disagreement the peers discard the payload (the same verdict everywhere); otherwise
    // the job is ending. Either way the sends complete later, their buffer kept until then.
    if (!eager_sends.empty()) orphans_.push_back(Orphan{eager_sends, eager_keep});
    leave_offered(offered);
    throw;
  }
  const Header& from_root = all[root];
  if (from_root.has_flag(comm_detail::kFlagInlinePayload)) {
    collective_open_ = false;  // no data phase: the tensor came with the root's header
    if (is_root) return x;
    Tensor y = comm_detail::host_buffer(from_root.shape, from_root.dtype, landing(from_root));
    if (y.nbytes() > 0) std::memcpy(y.raw_data(), carried.payload(root), y.nbytes());
    return moved_to(std::move(y), landing(from_root));
  }
  if (from_root.has_data_flag(comm_detail::kDataInMemory)) {
    auto reads = std::make_shared<DirectReads>();
    KeepAlive keep{reads};
    std::vector<MPI_Request> requests;
    if (is_root) {
      keep.insert(keep.end(), offered.begin(), offered.end());
      await_reads(in_memory, from_root.sequence, *reads, requests);
      finish_collective(requests, operation, keep);
      settle_reads(*reads, operation, std::move(keep));
      return x;
    }
    Tensor y = comm_detail::host_buffer(from_root.shape, from_root.dtype, landing(from_root));
    keep.push_back(y.storage());
    read_memory_of(root, from_root, y.raw_data(), *reads, requests, operation);
    finish_collective(requests, operation, keep);
    settle_reads(*reads, operation, std::move(keep));
    return moved_to(std::move(y), landing(from_root));
  }
  if (from_root.has_data_flag(comm_detail::kDataEager)) {
    if (is_root) {
      finish_collective(eager_sends, operation, std::move(eager_keep));
      return x;
    }
    Tensor y = comm_detail::host_buffer(from_root.shape, from_root.dtype, landing(from_root));
    std::vector<MPI_Request> requests(1);
    check_mpi(MPI_Irecv(y.raw_data(), checked_int(from_root.payload_bytes, operation), MPI_BYTE, root, kEagerDataTag,
                        comm_, &requests[0]),
              "MPI_Irecv");
    finish_collective(requests, operation, {y.storage()});
    return moved_to(std::move(y), landing(from_root));
  }
  if (on_device(all)) {
    run_device_phase(operation, [&] {
      if (!is_root) buffer = Tensor(from_root.shape, from_root.dtype, transport_device());
      if (buffer.nbytes() > 0) device_bcast(buffer, root);
    });
    return is_root ? x : buffer.to(landing(from_root));
  }
  Tensor y = is_root ? comm_detail::host_for_mpi(x)
                      : comm_detail::host_buffer(from_root.shape, from_root.dtype, landing(from_root));
  char* bytes = static_cast<char*>(y.raw_data());
  std::vector<MPI_Request> requests;
  for (std::size_t offset = 0; offset < y.nbytes(); offset += kChunkBytes) {
    const int count = static_cast<int>(std::min(kChunkBytes, y.nbytes() - offset));
    requests.emplace_back();
    check_mpi(MPI_Ibcast(bytes + offset, count, MPI_BYTE, root, comm_, &requests.back()), "MPI_Ibcast");
  }
  finish_collective(requests, operation, {y.storage()});
  if (is_root) return x;
  return moved_to(std::move(y), landing(from_root));
}

Tensor MpiCommunicator::bcast(const Tensor& x, int root, CallSite site) { return bcast_checked(x, root, 0, "bcast", site); }

std::vector<Tensor> MpiCommunicator::gather(const Tensor& x, int root, CallSite site) {
  FlightCall flight(*this, site);
  check_root(root, "gather");
  check_defined(x, "gather");
  const Header mine = collective_header(OpKind::gather, root, &x);
  const Tensor staged = transport_copy(x);  // before the exchange (see run_device_phase)
  const std::vector<Header> all = exchange_headers(mine, false);
  const bool is_root = rank_ == root;
  std::vector<Shape> shapes(size_);
  std::int64_t numel = 0;
  for (int r = 0; r < size_; ++r) {
    shapes[r] = all[r].shape;
    numel += shape_numel(shapes[r]);
  }
  if (on_device(all)) {
    Tensor flat;
    std::vector<Tensor> pieces;
    run_device_phase("gather", [&] {
      if (is_root) {  // sized by the peers' headers
        flat = Tensor({numel}, x.dtype(), transport_device());
        pieces = split_flat(flat, shapes);
      }
      device_gather(staged, pieces, root);
    });
    if (!is_root) return {};
    return split_flat(moved_to(std::move(flat), x.device()), std::move(shapes));
  }
  const Tensor send = comm_detail::host_for_mpi(x);
  const int send_count = checked_int(send.nbytes(), "gather");
  std::vector<MPI_Request> requests(1);
  if (!is_root) {
    check_mpi(MPI_Igatherv(send.raw_data(), send_count, MPI_BYTE, nullptr, nullptr, nullptr, MPI_BYTE, root, comm_,
                           &requests[0]),
              "MPI_Igatherv");
    finish_collective(requests, "gather", {send.storage()});
    return {};
  }
  std::vector<int> counts(size_), displacements(size_);
  std::size_t total = 0;
  for (int r = 0; r < size_; ++r) {
    counts[r] = checked_int(all[r].payload_bytes, "gather");
    displacements[r] = checked_int(total, "gather");
    total += all[r].payload_bytes;
  }
  checked_int(total, "gather");
  Tensor flat({numel}, x.dtype());
  check_mpi(MPI_Igatherv(send.raw_data(), send_count, MPI_BYTE, flat.raw_data(), counts.data(), displacements.data(),
                         MPI_BYTE, root, comm_, &requests[0]),
            "MPI_Igatherv");
  finish_collective(requests, "gather", {send.storage(), flat.storage()});
  return split_flat(moved_to(std::move(flat), x.device()), std::move(shapes));
}

Tensor MpiCommunicator::scatter(const std::vector<Tensor>& xs, int root, CallSite site) {
  FlightCall flight(*this, site);
  check_root(root, "scatter");
  const bool is_root = rank_ == root;
  if (is_root) {
    TANDEM_CHECK(static_cast<int>(xs.size()) == size_, "scatter: the root (rank ", rank_, ") passed ", xs.size(),
                 " tensors for ", size_, " ranks");
    for (const Tensor& x : xs) {
      check_defined(x, "scatter");
      TANDEM_CHECK(x.dtype() == xs[0].dtype(), "scatter: the root's tensors mix dtypes (", xs[0].description(), " and ",
                   x.description(), ")");
    }
    check_one_kind(xs, "scatter");
  }
  std::vector<Tensor> sends;  // the root's transport copies, before the exchange (see run_device_phase)
  if (is_root && moves_on_device(xs[0]))
    for (const Tensor& x : xs) sends.push_back(transport_copy(x));
  const std::vector<Header> all = exchange_headers(
      [&](int peer) {
        return collective_header(OpKind::scatter, root, is_root ? &xs[peer] : nullptr);
      },
      false);
  const Header& mine = all[root];  // what the root sent this rank
  if (on_device(all)) {
    Tensor y;
    run_device_phase("scatter", [&] {
      if (!is_root) y = Tensor(mine.shape, mine.dtype, transport_device());  // sized by the root's header
      device_scatter(sends, y, root);
    });
    return is_root ? xs[root] : y.to(landing(mine));
  }
  if (is_root) {
    std::vector<int> counts(size_), displacements(size_);
    std::size_t total = 0;
    for (int r = 0; r < size_; ++r) {
      counts[r] = checked_int(xs[r].nbytes(), "scatter");
      displacements[r] = checked_int(total, "scatter");
      total += xs[r].nbytes();
    }
    const Packed flat = pack(on_host(xs), xs[0].dtype());
    std::vector<MPI_Request> requests(1);
    check_mpi(MPI_Iscatterv(flat.data, counts.data(), displacements.data(), MPI_BYTE, MPI_IN_PLACE, 0, MPI_BYTE, root,
                            comm_, &requests[0]),
              "MPI_Iscatterv");
    finish_collective(requests, "scatter", {flat.owner});
    return xs[root];
  }
  Tensor y = comm_detail::host_buffer(mine.shape, mine.dtype, landing(mine));
  std::vector<MPI_Request> requests(1);
  check_mpi(MPI_Iscatterv(nullptr, nullptr, nullptr, MPI_BYTE, y.raw_data(), checked_int(y.nbytes(), "scatter"),
                          MPI_BYTE, root, comm_, &requests[0]),
            "MPI_Iscatterv");
  finish_collective(requests, "scatter", {y.storage()});
  return y.to(landing(mine));
}

Tensor MpiCommunicator::reduce(const Tensor& x, int root, CallSite site) {
  FlightCall flight(*this, site);
  check_root(root, "reduce");
  check_defined(x, "reduce");
  const MPI_Datatype type = mpi_type(x.dtype(), "reduce");
  const Header mine = collective_header(OpKind::reduce, root, &x);
  const bool is_root = rank_ == root;
  // Device transport: the copy and the root's output (of x's shape) before the exchange (see
  // run_device_phase).
  const Tensor staged = transport_copy(x);
  Tensor device_y = staged.defined() && is_root ? Tensor(x.shape(), x.dtype(), transport_device()) : Tensor();
  const std::vector<Header> all = exchange_headers(mine, true);
  if (on_device(all)) {
    run_device_phase("reduce", [&] {
      if (x.numel() > 0) device_reduce(staged, device_y, root);
    });
    return is_root ? device_y.to(x.device()) : Tensor();
  }
  const Tensor send = comm_detail::host_for_mpi(x);
  Tensor y = is_root ? Tensor(x.shape(), x.dtype()) : Tensor();
  const std::size_t element = dtype_size(x.dtype());
  const std::size_t chunk = kChunkBytes / element;
  std::vector<MPI_Request> requests;
  for (std::size_t offset = 0; offset < static_cast<std::size_t>(x.numel()); offset += chunk) {
    const int count = static_cast<int>(std::min(chunk, static_cast<std::size_t>(x.numel()) - offset));
    requests.emplace_back();
    check_mpi(MPI_Ireduce(static_cast<const char*>(send.raw_data()) + offset * element,
                          is_root ? static_cast<char*>(y.raw_data()) + offset * element : nullptr, count, type,
                          mpi_sum(x.dtype()), root, comm_, &requests.back()),
              "MPI_Ireduce");
  }
  finish_collective(requests, "reduce", {send.storage(), is_root ? y.storage() : nullptr});
  return is_root ? y.to(x.device()) : Tensor();
}

std::string MpiCommunicator::bcast_obj(const std::string& bytes, int root, CallSite site) {
  FlightCall flight(*this, site);
  check_root(root, "bcast_obj");
  Header mine;
  mine.kind = OpKind::object_bcast;
  mine.root = root;
  if (rank_ == root) mine.payload_bytes = bytes.size();
  const std::vector<Header> all = exchange_headers(mine, false);
  auto result = std::make_shared<std::string>(rank_ == root ? bytes : std::string(all[root].payload_bytes, '\0'));
  std::vector<MPI_Request> requests;
  for (std::size_t offset = 0; offset < result->size(); offset += kChunkBytes) {
    const int count = static_cast<int>(std::min(kChunkBytes, result->size() - offset));
    requests.emplace_back();
    check_mpi(MPI_Ibcast(result->data() + offset, count, MPI_BYTE, root, comm_, &requests.back()), "MPI_Ibcast");
  }
  finish_collective(requests, "bcast_obj", {result});
  return *result;
}

std::vector<std::string> MpiCommunicator::gather_obj(const std::string& bytes, int root, CallSite site) {
  FlightCall flight(*this, site);
  check_root(root, "gather_obj");
  Header mine;
  mine.kind = OpKind::object_gather;
  mine.root = root;
  mine.payload_bytes = bytes.size();
  const std::vector<Header> all = exchange_headers(mine, false);
  const int send_count = checked_int(bytes.size(), "gather_obj");
  auto mine_bytes = std::make_shared<const std::string>(bytes);
  std::vector<MPI_Request> requests(1);
  if (rank_ != root) {
    check_mpi(MPI_Igatherv(mine_bytes->data(), send_count, MPI_BYTE, nullptr, nullptr, nullptr, MPI_BYTE, root, comm_,
                           &requests[0]),
              "MPI_Igatherv");
    finish_collective(requests, "gather_obj", {mine_bytes});
    return {};
  }
  std::vector<int> counts(size_), displacements(size_);
  std::size_t total = 0;
  for (int r = 0; r < size_; ++r) {
    counts[r] = checked_int(all[r].payload_bytes, "gather_obj");
    displacements[r] = checked_int(total, "gather_obj");
    total += all[r].payload_bytes;
  }
  auto flat = std::make_shared<std::string>(checked_int(total, "gather_obj"), '\0');
  check_mpi(MPI_Igatherv(mine_bytes->data(), send_count, MPI_BYTE, flat->data(), counts.data(), displacements.data(),
                         MPI_BYTE, root, comm_, &requests[0]),
            "MPI_Igatherv");
  finish_collective(requests, "gather_obj", {mine_bytes, flat});
  std::vector<std::string> result(size_);
  for (int r = 0; r < size_; ++r) result[r] = flat->substr(displacements[r], counts[r]);
  return result;
}

}  // namespace tandem
