// The MPI communicator's collectives among equals: allgather, alltoall, alltoallv, allreduce
// (and allreduce_checked) and reduce_scatter. Each exchanges headers (mpi_collective_headers.cc),
// then moves the bytes with the MPI collective, directly between the ranks
// (mpi_piece_exchange.cc), or on the device transport.
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

std::vector<Tensor> MpiCommunicator::allgather(const Tensor& x, CallSite site) {
  FlightCall flight(*this, site);
  check_defined(x, "allgather");
  // A small communicator: every rank sends its tensor to every peer beside its header (inside it
  // when small) and receives theirs, the pieces of alltoall (MPICH's non-blocking allgather took
  // several times as long at 2 ranks: docs/performance.md, "Communication"). The choice is the same
  // on every rank.
  if (exchanges_directly(x)) {
    FlatExchange exchanged =
        exchange_pieces(PieceList::same_for_all(x, size_), OpKind::allgather, "allgather", nullptr, PieceOptions());
    return split_flat(exchanged.flat, std::move(exchanged.headers));
  }
  Header mine = collective_header(OpKind::allgather, -1, &x);
  const bool small = inlines(x);
  if (small) mine.flags |= comm_detail::kFlagInlinePayload;
  Tensor host_copy;
  const Tensor& host = small ? comm_detail::host_view_for_mpi(x, host_copy) : host_copy;
  InlineData carried;
  carried.to_all = &host;
  const Tensor staged = transport_copy(x);  // before the exchange (see run_device_phase)
  const std::vector<Header> all = exchange_headers(mine, false, &carried);
  std::vector<int> counts(size_), displacements(size_);
  std::vector<Shape> shapes(size_);
  std::size_t total = 0;
  std::int64_t numel = 0;
  bool equal = true;
  for (int r = 0; r < size_; ++r) {
    shapes[r] = all[r].shape;
    numel += shape_numel(shapes[r]);
    equal = equal && all[r].payload_bytes == all[0].payload_bytes;
  }
  if (all_inline(all)) {  // every rank's tensor came with its header
    collective_open_ = false;
    Tensor flat({numel}, x.dtype());
    char* into = static_cast<char*>(flat.raw_data());
    for (int r = 0; r < size_; ++r) {
      const std::size_t bytes = all[r].payload_bytes;
      if (bytes > 0) std::memcpy(into, r == rank_ ? host.raw_data() : carried.payload(r), bytes);
      into += bytes;
    }
    return split_flat(moved_to(std::move(flat), x.device()), std::move(shapes));
  }
  if (on_device(all)) {
    Tensor flat;
    std::vector<Tensor> pieces;
    run_device_phase("allgather", [&] {
      flat = Tensor({numel}, x.dtype(), transport_device());  // sized by the peers' headers
      pieces = split_flat(flat, shapes);
      device_allgather(staged, flat, pieces);
    });
    return split_flat(moved_to(std::move(flat), x.device()), std::move(shapes));
  }
  for (int r = 0; r < size_; ++r) {
    counts[r] = checked_int(all[r].payload_bytes, "allgather");
    displacements[r] = checked_int(total, "allgather");
    total += all[r].payload_bytes;
  }
  checked_int(total, "allgather");
  const Tensor send = comm_detail::host_for_mpi(x);
  Tensor flat({numel}, x.dtype());
  std::vector<MPI_Request> requests(1);
  if (equal) {
    check_mpi(MPI_Iallgather(send.raw_data(), counts[rank_], MPI_BYTE, flat.raw_data(), counts[0], MPI_BYTE, comm_,
                             &requests[0]),
              "MPI_Iallgather");
  } else {
    check_mpi(MPI_Iallgatherv(send.raw_data(), counts[rank_], MPI_BYTE, flat.raw_data(), counts.data(),
                              displacements.data(), MPI_BYTE, comm_, &requests[0]),
              "MPI_Iallgatherv");
  }
  finish_collective(requests, "allgather", {send.storage(), flat.storage()});
  return split_flat(moved_to(std::move(flat), x.device()), std::move(shapes));
}

std::vector<Tensor> MpiCommunicator::alltoall(const std::vector<Tensor>& xs, CallSite site) {
  FlightCall flight(*this, site);
  TANDEM_CHECK(static_cast<int>(xs.size()) == size_, "alltoall: rank ", rank_, " passed ", xs.size(), " tensors for ",
               size_, " ranks");
  for (const Tensor& x : xs) {
    check_defined(x, "alltoall");
    TANDEM_CHECK(x.dtype() == xs[0].dtype(), "alltoall: rank ", rank_, "'s tensors mix dtypes (", xs[0].description(),
                 " and ", x.description(), ")");
  }
  check_one_kind(xs, "alltoall");
  FlatExchange exchanged = exchange_pieces(xs, OpKind::alltoall, "alltoall", nullptr, PieceOptions());
  return split_flat(exchanged.flat, std::move(exchanged.headers));
}

AlltoallvResult MpiCommunicator::alltoallv(const Tensor& x, const std::vector<std::int64_t>& send_counts, CallSite site) {
  FlightCall flight(*this, site);
  check_defined(x, "alltoallv");
  TANDEM_CHECK(x.dim() >= 1, "alltoallv: rank ", rank_, " passed ", x.description(),
               "; its pieces are rows along the first axis, so it needs at least one axis");
  TANDEM_CHECK(static_cast<int>(send_counts.size()) == size_, "alltoallv: rank ", rank_, " passed ",
               send_counts.size(), " send counts for ", size_, " ranks");
  std::int64_t total = 0;
  for (std::size_t r = 0; r < send_counts.size(); ++r) {
    TANDEM_CHECK(send_counts[r] >= 0, "alltoallv: rank ", rank_, "'s send count for rank ", r, " is ",
                 send_counts[r], " (counts are numbers of rows, at least 0)");
    total += send_counts[r];
  }
  TANDEM_CHECK(total == x.shape()[0], "alltoallv: rank ", rank_, "'s send counts add up to ", total, " rows but ",
               x.description(), " has ", x.shape()[0]);
  // Consecutive row ranges of one (always contiguous) tensor: MPI sends straight from x, unpacked.
  std::vector<Tensor> pieces;
  std::int64_t begin = 0;
  for (std::int64_t count : send_counts) {
    pieces.push_back(x.slice_rows(begin, begin + count));
    begin += count;
  }
  Shape row_shape(x.shape().begin() + 1, x.shape().end());
  const FlatExchange exchanged = exchange_pieces(pieces, OpKind::alltoallv, "alltoallv", &row_shape, PieceOptions());
  AlltoallvResult result;
  std::int64_t received = 0;
  for (const Header& header : exchanged.headers) {
    result.recv_counts.push_back(header.shape[0]);
    received += header.shape[0];
  }
  row_shape.insert(row_shape.begin(), received);
  result.y = exchanged.flat.reshape(row_shape);
  return result;
}

Tensor MpiCommunicator::allreduce_checked(const Tensor& x, AllreduceOp op, std::uint64_t digest,
                                          const char* operation, CallSite site) {
  FlightCall flight(*this, site);
  check_defined(x, operation);
  const MPI_Datatype type = mpi_type(x.dtype(), operation);
  TANDEM_CHECK(op == AllreduceOp::sum || is_floating(x.dtype()), operation, ": the mean of ", x.description(),
               " needs a floating dtype");
  // Ranks whose headers agree (dtype, shape, device) choose alike: small tensors inside the
  // headers, middle ones exchanged whole beside them (summed here), large ones by MPI.
  const bool small = inlines(x);
  if (!small && exchanges_directly(x) && x.nbytes() <= kDirectAllreduceBytes) {
    PieceOptions options;
    options.reduce_op = op == AllreduceOp::mean ? 1 : 0;
    options.digest = digest;
    options.same_shape = true;
    const Tensor host = comm_detail::host_for_mpi(x);
    const FlatExchange exchanged =
        exchange_pieces(PieceList::same_for_all(host, size_), OpKind::allreduce, operation, nullptr, options);
    // Every rank's tensor arrived whole: each rank sums them in rank order, so all get the same bits.
    Tensor y(x.shape(), x.dtype());
    if (y.nbytes() > 0) {
      const char* pieces = static_cast<const char*>(exchanged.flat.raw_data());
      std::memcpy(y.raw_data(), pieces, y.nbytes());
      for (int r = 1; r < size_; ++r) add_into(y.raw_data(), pieces + r * y.nbytes(), y.numel(), y.dtype());
    }
    if (op == AllreduceOp::mean) divide(y, size_);
    return moved_to(std::move(y), x.device());
  }
  Header mine = collective_header(OpKind::allreduce, -1, &x);
  mine.reduce_op = op == AllreduceOp::mean ? 1 : 0;
  mine.digest = digest;
  if (small) mine.flags |= comm_detail::kFlagInlinePayload;
  Tensor host_copy;
  const Tensor& host = small ? comm_detail::host_view_for_mpi(x, host_copy) : host_copy;
  InlineData carried;
  carried.to_all = &host;
  // Device transport: the copy and the output (of x's shape) before the exchange (see run_device_phase).
  const Tensor staged = transport_copy(x);
  Tensor device_y = staged.defined() ? Tensor(x.shape(), x.dtype(), transport_device()) : Tensor();
  const std::vector<Header> all = exchange_headers(mine, true, &carried);
  if (all_inline(all)) {
    // Every rank's tensor came with its header: each rank sums them in rank order, so all get
    // the same bits.
    collective_open_ = false;
    Tensor y(x.shape(), x.dtype());
    if (y.nbytes() > 0) {
      std::memcpy(y.raw_data(), rank_ == 0 ? host.raw_data() : carried.payload(0), y.nbytes());
      for (int r = 1; r < size_; ++r)
        add_into(y.raw_data(), r == rank_ ? host.raw_data() : carried.payload(r), y.numel(), y.dtype());
    }
    if (op == AllreduceOp::mean) divide(y, size_);
    return moved_to(std::move(y), x.device());
  }
  if (on_device(all)) {
    run_device_phase(operation, [&] {
      if (device_y.numel() > 0) device_allreduce(staged, device_y);
    });
    // The arithmetic of divide() below, as a kernel queued behind the sum.
    if (op == AllreduceOp::mean)
      device_y = device_y.dtype() == DType::f32 ? mul(device_y, 1.0 / size_) : div(device_y, double(size_));
    return device_y.to(x.device());
  }
  const Tensor send = comm_detail::host_for_mpi(x);
  Tensor y(x.shape(), x.dtype());
  const std::size_t element = dtype_size(x.dtype());
  const std::size_t chunk = kChunkBytes / element;
  if (hierarchy_) {
    hierarchical_sum(send, y, type, chunk, operation);
  } else {
    std::vector<MPI_Request> requests;
    for (std::size_t offset = 0; offset < static_cast<std::size_t>(x.numel()); offset += chunk) {
      const int count = static_cast<int>(std::min(chunk, static_cast<std::size_t>(x.numel()) - offset));
      requests.emplace_back();
      check_mpi(MPI_Iallreduce(static_cast<const char*>(send.raw_data()) + offset * element,
                               static_cast<char*>(y.raw_data()) + offset * element, count, type, mpi_sum(x.dtype()),
                               comm_, &requests.back()),
                "MPI_Iallreduce");
    }
    finish_collective(requests, operation, {send.storage(), y.storage()});
  }
  if (op == AllreduceOp::mean) divide(y, size_);
  return moved_to(std::move(y), x.device());
}

Tensor MpiCommunicator::allreduce(const Tensor& x, AllreduceOp op, CallSite site) { return allreduce_checked(x, op, 0, "allreduce", site); }

Tensor MpiCommunicator::reduce_scatter(const std::vector<Tensor>& xs, CallSite site) {
  FlightCall flight(*this, site);
  TANDEM_CHECK(static_cast<int>(xs.size()) == size_, "reduce_scatter: rank ", rank_, " passed ", xs.size(),
               " tensors for ", size_, " ranks");
  for (const Tensor& x : xs) {
    check_defined(x, "reduce_scatter");
    TANDEM_CHECK(x.dtype() == xs[0].dtype(), "reduce_scatter: rank ", rank_, "'s tensors mix dtypes (",
                 xs[0].description(), " and ", x.description(), ")");
  }
  check_one_kind(xs, "reduce_scatter");
  const MPI_Datatype type = mpi_type(xs[0].dtype(), "reduce_scatter");
  Header mine = collective_header(OpKind::reduce_scatter, -1, &xs[rank_]);
  mine.digest = shapes_digest(xs);
  // Device transport: the copies and the output (of xs[rank]'s shape) before the exchange (see
  // run_device_phase).
  std::vector<Tensor> sends;
  Tensor device_y;
  if (moves_on_device(xs[0])) {
    for (const Tensor& x : xs) sends.push_back(transport_copy(x));
    device_y = Tensor(xs[rank_].shape(), xs[rank_].dtype(), transport_device());
  }
  const std::vector<Header> all = exchange_headers(mine, false);
  const Device device = xs[0].device();
  if (on_device(all)) {
    run_device_phase("reduce_scatter", [&] { device_reduce_scatter(sends, device_y); });
    return device_y.to(device);
  }
  std::vector<int> counts(size_);
  std::size_t total = 0;
  for (int r = 0; r < size_; ++r) {
    counts[r] = checked_int(static_cast<std::size_t>(xs[r].numel()), "reduce_scatter");
    total += xs[r].nbytes();
  }
  checked_int(total, "reduce_scatter");
  const Packed send = pack(on_host(xs), xs[0].dtype());
  Tensor y(xs[rank_].shape(), xs[rank_].dtype());
  std::vector<MPI_Request> requests(1);
  check_mpi(
      MPI_Ireduce_scatter(send.data, y.raw_data(), counts.data(), type, mpi_sum(xs[0].dtype()), comm_, &requests[0]),
      "MPI_Ireduce_scatter");
  finish_collective(requests, "reduce_scatter", {send.owner, y.storage()});
  return y.to(device);
}

}  // namespace tandem
