// The "pure_nccl" communicator: creation, and the NCCL calls behind the device transport of
// the MPI communicator (nccl_communicator.h). Host code only: no kernels of its own.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "comm/transport/mpi_env.h"
#include "comm/transport/nccl_communicator.h"
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
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::boolean: break;
  }
  TANDEM_FAIL(operation, ": cannot sum ", dtype_name(dtype), " tensors (f32, f64, bf16, f16, i32 and i64 can be)");
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

// What a rank tells the others about its GPU at creation, allgathered as bytes (every rank runs
// the same binary, so the layout is the same everywhere).
struct GpuSlot {
  int host;    // inter_rank
  int device;  // the logical index, among the GPUs this rank sees; -1: none
  int count;   // the GPUs this rank sees
  int uuid_status;  // the cudaError_t of reading the UUID
  unsigned char uuid[16];
};

// A UUID as nvidia-smi -L prints it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
std::string uuid_text(const unsigned char (&uuid)[16]) {
  std::string text = "GPU-";
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    std::snprintf(hex, sizeof hex, "%02x", uuid[i]);
    text += hex;
  }
  return text;
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
  //
  // Two ranks share a GPU when they name the same physical device on one host, which logical
  // indices cannot tell: with a CUDA_VISIBLE_DEVICES of its own, every rank sees its GPU as
  // cuda:0, and different visible sets can map different indices to one GPU. So the ranks
  // compare (host, UUID) pairs; the logical index only names the GPU in the message.
  const int gpus = cuda::device_count();
  gpu_ = gpu ? *gpu : gpus > 0 ? intra_rank_ % gpus : -1;
  GpuSlot mine{};
  mine.host = inter_rank_;
  mine.device = gpu_;
  mine.count = gpus;
  mine.uuid_status = cudaSuccess;
  if (gpu_ >= 0) {
    // A failure is reported below on every rank, not thrown here: the peers would wait in the
    // allgather forever.
    cudaDeviceProp properties{};
    const cudaError_t status = cudaGetDeviceProperties(&properties, gpu_);
    mine.uuid_status = static_cast<int>(status);
    if (status == cudaSuccess) std::memcpy(mine.uuid, properties.uuid.bytes, sizeof mine.uuid);
  }
  std::vector<GpuSlot> layout(static_cast<std::size_t>(size_));
  check_mpi(MPI_Allgather(&mine, static_cast<int>(sizeof(GpuSlot)), MPI_BYTE, layout.data(),
                          static_cast<int>(sizeof(GpuSlot)), MPI_BYTE, mpi_comm()),
            "MPI_Allgather (GPU layout)");
  for (int r = 0; r < size_; ++r) {
    const GpuSlot& slot = layout[static_cast<std::size_t>(r)];
    TANDEM_CHECK(slot.device >= 0, "create_communicator(\"pure_nccl\"): rank ", r, " has no CUDA GPU (",
                 cuda::device_count() == 0 && r == rank_ ? cuda::unavailable_reason() : "none visible there",
                 "); every rank needs one");
    TANDEM_CHECK(slot.uuid_status == cudaSuccess, "create_communicator(\"pure_nccl\"): rank ", r,
                 " cannot read the properties of its cuda:", slot.device, " (cudaGetDeviceProperties: ",
                 cudaGetErrorString(static_cast<cudaError_t>(slot.uuid_status)), ")");
    for (int q = 0; q < r; ++q) {
      const GpuSlot& other = layout[static_cast<std::size_t>(q)];
      const bool shared = other.host == slot.host && std::memcmp(other.uuid, slot.uuid, sizeof slot.uuid) == 0;
      TANDEM_CHECK(!shared, "create_communicator(\"pure_nccl\"): ranks ", q, " and ", r, " would share cuda:",
                   other.device, " on one host (rank ", q, "'s cuda:", other.device, " and rank ", r, "'s cuda:",
                   slot.device, " are the same GPU, ", uuid_text(slot.uuid), "; rank ", r, " sees ", slot.count,
                   " GPU(s)); NCCL needs a GPU of its own for each rank: start at most as many ranks per host as it "
                   "has GPUs (each may see only its own, through CUDA_VISIBLE_DEVICES), or use \"naive\", which "
                   "moves CUDA tensors through host memory");
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
  // Every rank holds the id before any enters ncclCommInitRank, which blocks (in NCCL's own
  // bootstrap, making no MPI calls) until all ranks have joined: some MPI stacks progress a
  // broadcast only inside later MPI calls, so without this barrier the root could block in NCCL
  // before its broadcast reached a peer, which would then wait for the id forever.
  check_mpi(MPI_Barrier(mpi_comm()), "MPI_Barrier (before ncclCommInitRank)");
  nccl_ = std::make_unique<Nccl>();
  TANDEM_NCCL_CHECK(ncclCommInitRank(&nccl_->comm, size_, id, rank_));
}

// Tearing an NCCL communicator down can hang: ncclCommDestroy first finalises it, which flushes
// the operations queued on it and waits until the communicator is quiescent on every rank
// (ncclCommFinalize in nccl.h; NCCL's guide calls destruction an intra-node collective), so it
// never returns when the ranks destroy it at different times, when a peer has exited, or when a
// send queued on the device has no receiver. Hence:
// - Normal path: the ranks first meet in this communicator's barrier (over MPI, with its
//   diagnosis and TANDEM_COMM_TIMEOUT: a peer that has finished, or that is in another
//   collective, is an error here instead of a hang). Past it, every rank has queued all of its
//   NCCL calls, each matched by its peers', and is destroying: ncclCommDestroy can complete.
// - When that cannot be made safe, the NCCL communicator is left alone (leaked): when this
//   communicator is broken (a collective failed with the peers' halves queued), when an exception
//   is unwinding the stack (the peers may be anywhere, and an exception that escapes ends the
//   job: mpi_env.h), when MPI is finalised (no barrier is possible; at exit the CUDA runtime may
//   be going too), or when the barrier fails. ncclCommAbort is no way out: recent NCCL versions
//   may make it wait for the node's other ranks too (a maintainer's answer in NVIDIA/nccl issue
//   863; issues 992 and 1777 report hangs inside it), so it can block in exactly these cases.
//   The leak holds the communicator's device memory and NCCL's threads until the process ends,
//   which is what these cases lead to.
// Errors are never reported: a destructor cannot throw.
NcclCommunicator::~NcclCommunicator() {
  if (!nccl_ || !nccl_->comm) return;
  if (broken() || std::uncaught_exceptions() > 0 || !comm_detail::mpi_active()) return;  // leaked (above)
  try {
    MpiCommunicator::barrier();
  } catch (...) {
    return;  // the ranks did not all arrive: leaked (above)
  }
  if (cudaSetDevice(gpu_) != cudaSuccess) return;
  (void)ncclCommDestroy(nccl_->comm);
}

std::shared_ptr<Communicator> NcclCommunicator::split(int color, int key, CallSite site) {
  FlightCall flight(*this, site);
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
