// The "pure_nccl" communicator: creation, and the NCCL calls behind the device transport of
// the MPI communicator (nccl_communicator.h). Host code only: no kernels of its own.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <vector>

#include "comm/mpi_env.h"
#include "comm/nccl_communicator.h"
#include "core/error.h"
#include "core/ops.h"
#include "cuda/cuda.h"
#include "cuda/cuda_check.h"
#include "cuda/device_context.h"

namespace tandem {

using comm_detail::check_mpi;

struct NcclCommunicator::Nccl {
  ncclComm_t comm = nullptr;
};

namespace {

// Element types of the reductions; moves count bytes (ncclUint8) whatever the dtype.
ncclDataType_t nccl_type(DType dtype, const char* operation) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::boolean: break;
  }
  TANDEM_FAIL(operation, ": cannot sum ", dtype_name(dtype), " tensors (f32, f64, i32 and i64 can be)");
}

// Runs `calls` between ncclGroupStart and ncclGroupEnd, so that NCCL progresses the sends and
// receives inside together (one rank's sends to and receives from several peers would
// otherwise wait on each other). The group is closed even when a call throws.
template <typename F>
void grouped(F&& calls) {
  TANDEM_NCCL_CHECK(ncclGroupStart());
  try {
    calls();
  } catch (...) {
    (void)ncclGroupEnd();
    throw;
  }
  TANDEM_NCCL_CHECK(ncclGroupEnd());
}

// Whether the tensors lie back to back in one storage, in order (the pieces of split_flat).
bool consecutive(const std::vector<Tensor>& xs) {
  for (std::size_t i = 1; i < xs.size(); ++i) {
    const char* end = static_cast<const char*>(xs[i - 1].raw_data()) + xs[i - 1].nbytes();
    if (!xs[i].shares_storage_with(xs[0]) || static_cast<const char*>(xs[i].raw_data()) != end) return false;
  }
  return true;
}

}  // namespace

std::shared_ptr<NcclCommunicator> NcclCommunicator::create(MPI_Comm comm) {
  comm_detail::ensure_mpi();
  TANDEM_CHECK(comm != MPI_COMM_NULL, "create_communicator: MPI_COMM_NULL is not a communicator");
  MPI_Comm owned = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(comm, &owned), "MPI_Comm_dup");
  return std::shared_ptr<NcclCommunicator>(new NcclCommunicator(owned, std::nullopt));
}

NcclCommunicator::NcclCommunicator(MPI_Comm owned, std::optional<int> gpu) : MpiCommunicator(owned) {
  // Every rank learns every rank's GPU (and host) before NCCL is touched, so that a layout
  // NCCL refuses is an error on every rank rather than a hang inside ncclCommInitRank.
  const int gpus = cuda::device_count();
  gpu_ = gpu ? *gpu : gpus > 0 ? intra_rank_ % gpus : -1;
  const int mine[3] = {inter_rank_, gpu_, gpus};
  std::vector<int> layout(static_cast<std::size_t>(size_) * 3);
  check_mpi(MPI_Allgather(mine, 3, MPI_INT, layout.data(), 3, MPI_INT, mpi_comm()), "MPI_Allgather (GPU layout)");
  for (int r = 0; r < size_; ++r) {
    const int host = layout[3 * r], device = layout[3 * r + 1], count = layout[3 * r + 2];
    TANDEM_CHECK(device >= 0, "create_communicator(\"pure_nccl\"): rank ", r, " has no CUDA GPU (",
                 cuda::device_count() == 0 && r == rank_ ? cuda::unavailable_reason() : "none visible there",
                 "); every rank needs one");
    for (int q = 0; q < r; ++q) {
      TANDEM_CHECK(layout[3 * q] != host || layout[3 * q + 1] != device, "create_communicator(\"pure_nccl\"): ranks ",
                   q, " and ", r, " would share cuda:", device, " on one host (", count,
                   " GPU(s) there); NCCL needs a GPU of its own for each rank: start at most as many ranks per host "
                   "as it has GPUs, or use \"naive\", which moves CUDA tensors through host memory");
    }
  }
  device_ = Device::cuda(gpu_);
  cuda::use_device(gpu_, "pure_nccl");  // NCCL binds the communicator to the current device

  // Rank 0's unique id reaches every rank over MPI; so does a failure to make one.
  ncclUniqueId id{};
  int status = ncclSuccess;
  if (rank_ == 0) status = static_cast<int>(ncclGetUniqueId(&id));
  check_mpi(MPI_Bcast(&status, 1, MPI_INT, 0, mpi_comm()), "MPI_Bcast (NCCL status)");
  TANDEM_CHECK(status == ncclSuccess, "create_communicator(\"pure_nccl\"): ncclGetUniqueId failed on rank 0: ",
               ncclGetErrorString(static_cast<ncclResult_t>(status)));
  check_mpi(MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, mpi_comm()), "MPI_Bcast (NCCL id)");
  nccl_ = std::make_unique<Nccl>();
  TANDEM_NCCL_CHECK(ncclCommInitRank(&nccl_->comm, size_, id, rank_));
}

NcclCommunicator::~NcclCommunicator() {
  if (!nccl_ || !nccl_->comm) return;
  // Errors are ignored: a destructor cannot report them, and at exit the runtime may be gone.
  if (cudaSetDevice(gpu_) != cudaSuccess) return;
  if (broken()) {
    // A collective failed with the peers' halves queued: waiting for them would never end.
    (void)ncclCommAbort(nccl_->comm);
  } else {
    (void)ncclCommDestroy(nccl_->comm);
  }
}

std::shared_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  auto result = std::shared_ptr<NcclCommunicator>(new NcclCommunicator(split_mpi(color, key), gpu_));
  result->set_timeout(timeout());
  result->set_device(device());
  return result;
}

// Every call below is queued on the stream of this rank's GPU, after the kernels already
// queued there (which produce the tensors) and before those queued later (which read them);
// the tensors' memory returns to the device's caching allocator in the same stream order.

void NcclCommunicator::device_send(const Tensor& x, int dest) {
  cudaStream_t stream = cuda::use_device(gpu_, "pure_nccl send").stream;
  TANDEM_NCCL_CHECK(ncclSend(x.raw_data(), x.nbytes(), ncclUint8, dest, nccl_->comm, stream));
}

void NcclCommunicator::device_recv(Tensor& y, int source) {
  cudaStream_t stream = cuda::use_device(gpu_, "pure_nccl recv").stream;
  TANDEM_NCCL_CHECK(ncclRecv(y.raw_data(), y.nbytes(), ncclUint8, source, nccl_->comm, stream));
}

void NcclCommunicator::device_bcast(Tensor& buffer, int root) {
  cudaStream_t stream = cuda::use_device(gpu_, "pure_nccl bcast").stream;
  // In place: the root's buffer is its tensor, which NCCL only reads.
  TANDEM_NCCL_CHECK(ncclBroadcast(buffer.raw_data(), buffer.raw_data(), buffer.nbytes(), ncclUint8, root,
                                  nccl_->comm, stream));
}

void NcclCommunicator::device_gather(const Tensor& x, std::vector<Tensor>& pieces, int root) {
  cudaStream_t stream = cuda::use_device(gpu_, "pure_nccl gather").stream;
  if (rank_ == root && x.nbytes() > 0) pieces[root].copy_(x);
  grouped([&] {
    if (rank_ != root) {
      if (x.nbytes() > 0) TANDEM_NCCL_CHECK(ncclSend(x.raw_data(), x.nbytes(), ncclUint8, root, nccl_->comm, stream));
      return;
    }
    for (int r = 0; r < size_; ++r) {
      if (r == root || pieces[r].nbytes() == 0) continue;
      TANDEM_NCCL_CHECK(ncclRecv(pieces[r].raw_data(), pieces[r].nbytes(), ncclUint8, r, nccl_->comm, stream));
    }
  });
}

void NcclCommunicator::device_scatter(const std::vector<Tensor>& xs, Tensor& y, int root) {
  cudaStream_t stream = cuda::use_device(gpu_, "pure_nccl scatter").stream;
  grouped([&] {
    if (rank_ != root) {
      if (y.nbytes() > 0) TANDEM_NCCL_CHECK(ncclRecv(y.raw_data(), y.nbytes(), ncclUint8, root, nccl_->comm, stream));
      return;
    }
    for (int r = 0; r < size_; ++r) {
      if (r == root || xs[r].nbytes() == 0) continue;
      TANDEM_NCCL_CHECK(ncclSend(xs[r].raw_data(), xs[r].nbytes(), ncclUint8, r, nccl_->comm, stream));
    }
  });
}

void NcclCommunicator::device_allgather(const Tensor& x, Tensor& flat, std::vector<Tensor>& pieces) {
  cudaStream_t stream = cuda::use_device(gpu_, "pure_nccl allgather").stream;
  // Every rank sees the same sizes (from the headers), so all choose the same calls.
  bool equal = true;
  for (const Tensor& piece : pieces) equal = equal && piece.nbytes() == pieces[0].nbytes();
  if (equal) {
    if (x.nbytes() > 0)
      TANDEM_NCCL_CHECK(ncclAllGather(x.raw_data(), flat.raw_data(), x.nbytes(), ncclUint8, nccl_->comm, stream));
    return;
  }
  if (x.nbytes() > 0) pieces[rank_].copy_(x);
  grouped([&] {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      if (x.nbytes() > 0) TANDEM_NCCL_CHECK(ncclSend(x.raw_data(), x.nbytes(), ncclUint8, r, nccl_->comm, stream));
      if (pieces[r].nbytes() > 0)
        TANDEM_NCCL_CHECK(ncclRecv(pieces[r].raw_data(), pieces[r].nbytes(), ncclUint8, r, nccl_->comm, stream));
    }
  });
}

void NcclCommunicator::device_alltoall(const std::vector<Tensor>& xs, std::vector<Tensor>& pieces) {
  cudaStream_t stream = cuda::use_device(gpu_, "pure_nccl alltoall").stream;
  if (xs[rank_].nbytes() > 0) pieces[rank_].copy_(xs[rank_]);
  grouped([&] {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      if (xs[r].nbytes() > 0)
        TANDEM_NCCL_CHECK(ncclSend(xs[r].raw_data(), xs[r].nbytes(), ncclUint8, r, nccl_->comm, stream));
      if (pieces[r].nbytes() > 0)
        TANDEM_NCCL_CHECK(ncclRecv(pieces[r].raw_data(), pieces[r].nbytes(), ncclUint8, r, nccl_->comm, stream));
    }
  });
}

void NcclCommunicator::device_allreduce(const Tensor& x, Tensor& y) {
  cudaStream_t stream = cuda::use_device(gpu_, "pure_nccl allreduce").stream;
  TANDEM_NCCL_CHECK(ncclAllReduce(x.raw_data(), y.raw_data(), static_cast<std::size_t>(x.numel()),
                                  nccl_type(x.dtype(), "allreduce"), ncclSum, nccl_->comm, stream));
}

void NcclCommunicator::device_reduce(const Tensor& x, Tensor& y, int root) {
  cudaStream_t stream = cuda::use_device(gpu_, "pure_nccl reduce").stream;
  TANDEM_NCCL_CHECK(ncclReduce(x.raw_data(), rank_ == root ? y.raw_data() : nullptr, static_cast<std::size_t>(x.numel()),
                               nccl_type(x.dtype(), "reduce"), ncclSum, root, nccl_->comm, stream));
}

void NcclCommunicator::device_reduce_scatter(const std::vector<Tensor>& xs, Tensor& y) {
  cudaStream_t stream = cuda::use_device(gpu_, "pure_nccl reduce_scatter").stream;
  const ncclDataType_t type = nccl_type(y.dtype(), "reduce_scatter");
  bool equal = true;
  for (const Tensor& x : xs) equal = equal && x.numel() == xs[0].numel();
  if (equal) {
    if (y.numel() == 0) return;
    // ncclReduceScatter reads one buffer holding every piece in rank order.
    std::vector<Tensor> flat_pieces;
    for (const Tensor& x : xs) flat_pieces.push_back(x.reshape({x.numel()}));
    const Tensor send = consecutive(xs) ? xs[0] : concat(flat_pieces, 0);
    TANDEM_NCCL_CHECK(ncclReduceScatter(send.raw_data(), y.raw_data(), static_cast<std::size_t>(y.numel()), type,
                                        ncclSum, nccl_->comm, stream));
    return;
  }
  // Pieces of different sizes: one reduce per piece, to its rank, progressed together.
  grouped([&] {
    for (int r = 0; r < size_; ++r) {
      if (xs[r].numel() == 0) continue;
      TANDEM_NCCL_CHECK(ncclReduce(xs[r].raw_data(), r == rank_ ? y.raw_data() : nullptr,
                                   static_cast<std::size_t>(xs[r].numel()), type, ncclSum, r, nccl_->comm, stream));
    }
  });
}

}  // namespace tandem
