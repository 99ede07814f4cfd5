// The "pure_nccl" communicator: NCCL moves CUDA tensors, MPI everything else.
//
// It is the MPI communicator ("naive", mpi_communicator.h) with a device transport: the
// headers, their checks, the objects, the CPU tensors and the waits that turn deadlocks into
// errors stay on MPI, and only the bytes of CUDA tensors move with NCCL, queued on the stream
// of their device (cuda/device_context.h) so that they are ordered with the kernels that
// produce and consume them. As in ChainerMN, MPI bootstraps NCCL (rank 0's ncclUniqueId is
// broadcast over MPI), and each rank communicates on one GPU: cuda:(intra_rank % GPUs on its
// host), its device(). Tensors on another GPU are copied to that one and back.
//
// - Collectives: ncclBroadcast, ncclAllReduce, ncclReduce, ncclAllGather (equal pieces) and
//   ncclReduceScatter (equal pieces); gather, scatter, alltoall and the unequal variants are
//   grouped ncclSend/ncclRecv (or grouped ncclReduce), this rank's own piece a device copy.
//   Every rank must pass tensors of the same kind: all CUDA (NCCL) or all CPU (MPI); a mix is an
//   error on every rank, found in the header exchange.
// - Point to point, CUDA tensors of 64 KiB or more (MpiCommunicator::kDevicePayloadBytes): the
//   header goes by MPI_Issend, and the payload by ncclSend once the receiver has matched the
//   header (the send waits on the host until then, as a large MPI send does). Every NCCL call of
//   a rank is thus queued only after the peers involved have committed to the same call, so the
//   GPU streams of the ranks hold their NCCL calls in orders that can always complete: a program
//   whose ranks disagree fails on the host (with the usual diagnosis or TANDEM_COMM_TIMEOUT)
//   instead of hanging a GPU. Smaller CUDA tensors go through host memory and MPI, as with
//   "naive", so that their sends return at once (a ring of sends works, as with MPI); ChainerMN's
//   pure_nccl sends every tensor that way.
//
// NCCL needs a GPU of its own for every rank of a communicator: ranks that would share one (the
// same physical GPU, by UUID, on one host: more ranks on a host than it has GPUs) are an error on
// every rank at creation; "naive" serves that case, staging CUDA tensors through host memory.
//
// Destruction is collective too, like creation: the destructor first meets the peers in a
// barrier and only then destroys the NCCL communicator. Where that cannot be done safely (the
// communicator is broken, an exception is unwinding, MPI is finalised, the barrier fails), the
// NCCL communicator is leaked instead of risking a hang (see the destructor).
//
// Only under --config=cuda: include it behind `#if TANDEM_WITH_CUDA`.
#pragma once

#include <memory>
#include <optional>

#include "comm/transport/mpi_communicator.h"

namespace tandem {

class NcclCommunicator final : public MpiCommunicator {
 public:
  // Collective over comm (works on a duplicate of it). The caller checks that a GPU exists.
  static std::shared_ptr<NcclCommunicator> create(MPI_Comm comm);
  ~NcclCommunicator() override;

  std::string name() const override { return "pure_nccl"; }
  // The part keeps each rank's GPU.
  std::shared_ptr<Communicator> split(int color, int key, CallSite site = CallSite::current()) override;

 protected:
  bool moves_device_tensors() const override { return true; }
  Device transport_device() const override { return Device::cuda(gpu_); }
  void device_send(const Tensor& x, int dest) override;
  void device_recv(Tensor& y, int source) override;
  void device_bcast(Tensor& buffer, int root) override;
  void device_gather(const Tensor& x, std::vector<Tensor>& pieces, int root) override;
  void device_scatter(const std::vector<Tensor>& xs, Tensor& y, int root) override;
  void device_allgather(const Tensor& x, Tensor& flat, std::vector<Tensor>& pieces) override;
  void device_alltoall(const std::vector<Tensor>& xs, std::vector<Tensor>& pieces) override;
  void device_allreduce(const Tensor& x, Tensor& y) override;
  void device_reduce(const Tensor& x, Tensor& y, int root) override;
  void device_reduce_scatter(const std::vector<Tensor>& xs, Tensor& y) override;

 private:
  // Takes ownership of `owned`; gpu: this rank's GPU (default: intra_rank % GPUs).
  NcclCommunicator(MPI_Comm owned, std::optional<int> gpu);

  struct Nccl;  // the NCCL communicator (nccl_communicator.cu)
  std::unique_ptr<Nccl> nccl_;
  int gpu_ = 0;
};

}  // namespace tandem
