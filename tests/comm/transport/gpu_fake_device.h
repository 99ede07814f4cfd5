// A stand-in CUDA device for running gpu_communicator_test.cc where there is no GPU (every
// build without --config=cuda; see tests/comm/BUILD.bazel, gpu_fake_device_test):
//
// - HostCudaBackend: the CPU backend registered as the backend of Device::cuda(i), so that
//   "CUDA" tensors exist, in host memory. Every path of the communicators that depends on a
//   tensor's device (staging, where results land, the devices of gradients) then runs as it
//   would on a GPU.
// - FakeDeviceCommunicator: the MPI communicator with a device transport, as pure_nccl, whose
//   device_* members move the bytes with blocking MPI calls on a communicator of their own
//   instead of NCCL. It runs pure_nccl's protocol (headers, the synchronous point-to-point
//   header, the agreement of the ranks on the kind of their tensors, the placement of the
//   buffers) everywhere but in the NCCL calls themselves, one "GPU" per rank: cuda:intra_rank.
//   A protocol that queued a transfer its peer never matches would hang here, and fail the test
//   at its deadline.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "comm/transport/mpi_communicator.h"
#include "core/backend.h"
#include "core/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/tensor.h"

namespace fake_device {

using namespace tandem;

// The size of the stand-in's next allocation to fail as a GPU out of memory would (0: none), for
// tests of failures inside collectives: fail_next_allocation_of(n).
inline std::size_t& failing_allocation_bytes() {
  static std::size_t bytes = 0;
  return bytes;
}
inline void fail_next_allocation_of(std::size_t nbytes) { failing_allocation_bytes() = nbytes; }

class HostCudaBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::cuda; }

  void* allocate(std::size_t nbytes, int device) override {
    if (nbytes > 0 && nbytes == failing_allocation_bytes()) {
      failing_allocation_bytes() = 0;
      TANDEM_FAIL("allocate: out of memory on cuda:", device, " for ", nbytes,
                  " bytes (the stand-in's failure on demand)");
    }
    return cpu().allocate(nbytes, device);
  }
  void deallocate(void* ptr, std::size_t nbytes, int device) override { cpu().deallocate(ptr, nbytes, device); }
  void copy_to_host(void* dst, const void* src, std::size_t nbytes, int device) override {
    cpu().copy_to_host(dst, src, nbytes, device);
  }
  void copy_from_host(void* dst, const void* src, std::size_t nbytes, int device) override {
    cpu().copy_from_host(dst, src, nbytes, device);
  }
  void fill(Tensor& out, double value) override { cpu().fill(out, value); }
  void cast(const Tensor& in, Tensor& out) override { cpu().cast(in, out); }
  void unary(UnaryOp op, const Tensor& in, Tensor& out, double p0, double p1) override {
    cpu().unary(op, in, out, p0, p1);
  }
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override { cpu().binary(op, a, b, out); }
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) override {
    cpu().where(cond, a, b, out);
  }
  void reduce(ReduceOp op, const Tensor& in, std::int64_t outer, std::int64_t reduced, std::int64_t inner,
              Tensor& out) override {
    cpu().reduce(op, in, outer, reduced, inner, out);
  }
  void matmul(const Tensor& a, const Tensor& b, Tensor& out, std::int64_t batch, std::int64_t m, std::int64_t n,
              std::int64_t k, bool transpose_a, bool transpose_b, bool accumulate) override {
    cpu().matmul(a, b, out, batch, m, n, k, transpose_a, transpose_b, accumulate);
  }
  void copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst, const StridedView& dst_view,
                    const Shape& shape) override {
    cpu().copy_strided(src, src_view, dst, dst_view, shape);
  }
  void sgd_update(Tensor& param, const Tensor& grad, double lr) override { cpu().sgd_update(param, grad, lr); }
  void momentum_sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, double lr, double momentum) override {
    cpu().momentum_sgd_update(param, grad, velocity, lr, momentum);
  }
  void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& vhat,
                   const AdamStep& step) override {
    cpu().adam_update(param, grad, m, v, vhat, step);
  }
  double sum_of_squares(const Tensor& x) override { return cpu().sum_of_squares(x); }
  void random_uniform(Tensor& out, std::uint64_t seed, double low, double high) override {
    cpu().random_uniform(out, seed, low, high);
  }
  void im2col(const Tensor& x, const Conv2DGeometry& g, Tensor& col) override { cpu().im2col(x, g, col); }
  void col2im(const Tensor& col, const Conv2DGeometry& g, Tensor& x) override { cpu().col2im(col, g, x); }
  void conv2d(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g, std::int64_t groups,
              Tensor& y) override {
    cpu().conv2d(x, W, b, g, groups, y);
  }
  void conv2d_grad_input(const Tensor& gy, const Tensor& W, const Conv2DGeometry& g, std::int64_t groups,
                         Tensor& gx) override {
    cpu().conv2d_grad_input(gy, W, g, groups, gx);
  }
  void conv2d_grad_weight(const Tensor& x, const Tensor& gy, const Conv2DGeometry& g, std::int64_t groups,
                          Tensor& gW) override {
    cpu().conv2d_grad_weight(x, gy, g, groups, gW);
  }
  void max_pool2d(const Tensor& x, const Conv2DGeometry& g, Tensor& y, Tensor& indices) override {
    cpu().max_pool2d(x, g, y, indices);
  }
  void max_pool2d_backward(const Tensor& gy, const Tensor& indices, const Conv2DGeometry& g, Tensor& gx) override {
    cpu().max_pool2d_backward(gy, indices, g, gx);
  }
  void avg_pool2d(const Tensor& x, const Conv2DGeometry& g, Tensor& y) override { cpu().avg_pool2d(x, g, y); }
  void avg_pool2d_backward(const Tensor& gy, const Conv2DGeometry& g, Tensor& gx) override {
    cpu().avg_pool2d_backward(gy, g, gx);
  }
  void take_rows(const Tensor& table, const Tensor& ids, Tensor& out, bool has_ignore,
                 std::int64_t ignore_label) override {
    cpu().take_rows(table, ids, out, has_ignore, ignore_label);
  }
  void index_add_rows(Tensor& table, const Tensor& ids, const Tensor& src, bool has_ignore,
                      std::int64_t ignore_label) override {
    cpu().index_add_rows(table, ids, src, has_ignore, ignore_label);
  }
  void lstm_cell_forward(Tensor& gates, const Tensor& c_prev, Tensor& c, Tensor& h) override {
    cpu().lstm_cell_forward(gates, c_prev, c, h);
  }
  void lstm_cell_backward(const Tensor& activations, const Tensor& c_prev, const Tensor& c, const Tensor& gh,
                          const Tensor& gc, Tensor& ggates, Tensor& gc_prev) override {
    cpu().lstm_cell_backward(activations, c_prev, c, gh, gc, ggates, gc_prev);
  }
  void batch_norm_stats(const Tensor& x, std::int64_t outer, std::int64_t channels, std::int64_t inner, Tensor& mean,
                        Tensor& var) override {
    cpu().batch_norm_stats(x, outer, channels, inner, mean, var);
  }
  void channel_affine(const Tensor& x, const Tensor& scale, const Tensor& z, const Tensor& zscale,
                      const Tensor& shift, std::int64_t outer, std::int64_t channels, std::int64_t inner,
                      Tensor& out) override {
    cpu().channel_affine(x, scale, z, zscale, shift, outer, channels, inner, out);
  }
  void batch_norm_backward_sums(const Tensor& gy, const Tensor& x, const Tensor& mean, std::int64_t outer,
                                std::int64_t channels, std::int64_t inner, Tensor& sum_gy,
                                Tensor& sum_gy_xmu) override {
    cpu().batch_norm_backward_sums(gy, x, mean, outer, channels, inner, sum_gy, sum_gy_xmu);
  }

 private:
  static Backend& cpu() { return cpu_backend(); }
};

// Registers the stand-in as the CUDA backend (once; it lives as long as the process).
inline bool install() {
  static const bool installed = [] {
    register_backend(DeviceType::cuda, new HostCudaBackend());
    return true;
  }();
  return installed;
}

class FakeDeviceCommunicator final : public MpiCommunicator {
 public:
  static std::shared_ptr<FakeDeviceCommunicator> create(MPI_Comm comm) {
    comm_detail_ensure();
    MPI_Comm owned = MPI_COMM_NULL;
    MPI_Comm_dup(comm, &owned);
    return std::shared_ptr<FakeDeviceCommunicator>(new FakeDeviceCommunicator(owned));
  }
  ~FakeDeviceCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && data_ != MPI_COMM_NULL) MPI_Comm_free(&data_);
  }

  std::string name() const override { return "pure_nccl (stand-in)"; }
  std::shared_ptr<Communicator> split(int color, int key, CallSite site = CallSite::current()) override {
    FlightCall flight(*this, site);
    auto part = std::shared_ptr<FakeDeviceCommunicator>(new FakeDeviceCommunicator(split_mpi(color, key)));
    part->set_timeout(timeout());
    part->set_device(device());
    return part;
  }

 protected:
  bool moves_device_tensors() const override { return true; }
  Device transport_device() const override { return gpu_; }

  void device_send(const Tensor& x, int dest) override {
    expect_here({x});
    MPI_Send(x.raw_data(), bytes(x), MPI_BYTE, dest, 0, data_);
  }
  void device_recv(Tensor& y, int source) override {
    expect_here({y});
    MPI_Recv(y.raw_data(), bytes(y), MPI_BYTE, source, 0, data_, MPI_STATUS_IGNORE);
  }
  void device_bcast(Tensor& buffer, int root) override {
    expect_here({buffer});
    MPI_Bcast(buffer.raw_data(), bytes(buffer), MPI_BYTE, root, data_);
  }
  void device_gather(const Tensor& x, std::vector<Tensor>& pieces, int root) override {
    expect_here({x});
    expect_here(pieces);
    if (rank_ != root) {
      if (x.nbytes() > 0) MPI_Send(x.raw_data(), bytes(x), MPI_BYTE, root, 0, data_);
      return;
    }
    if (x.nbytes() > 0) pieces[root].copy_(x);
    std::vector<MPI_Request> requests;
    for (int r = 0; r < size_; ++r) {
      if (r == root || pieces[r].nbytes() == 0) continue;
      requests.emplace_back();
      MPI_Irecv(pieces[r].raw_data(), bytes(pieces[r]), MPI_BYTE, r, 0, data_, &requests.back());
    }
    wait(requests);
  }
  void device_scatter(const std::vector<Tensor>& xs, Tensor& y, int root) override {
    expect_here(xs);
    if (rank_ != root) {
      expect_here({y});
      if (y.nbytes() > 0) MPI_Recv(y.raw_data(), bytes(y), MPI_BYTE, root, 0, data_, MPI_STATUS_IGNORE);
      return;
    }
    std::vector<MPI_Request> requests;
    for (int r = 0; r < size_; ++r) {
      if (r == root || xs[r].nbytes() == 0) continue;
      requests.emplace_back();
      MPI_Isend(xs[r].raw_data(), bytes(xs[r]), MPI_BYTE, r, 0, data_, &requests.back());
    }
    wait(requests);
  }
  void device_allgather(const Tensor& x, Tensor& flat, std::vector<Tensor>& pieces) override {
    expect_here({x, flat});
    expect_here(pieces);
    exchange({x}, pieces, true);
  }
  void device_alltoall(const std::vector<Tensor>& xs, std::vector<Tensor>& pieces) override {
    expect_here(xs);
    expect_here(pieces);
    exchange(xs, pieces, false);
  }
  void device_allreduce(const Tensor& x, Tensor& y) override {
    expect_here({x, y});
    MPI_Allreduce(x.raw_data(), y.raw_data(), static_cast<int>(x.numel()), type(x), MPI_SUM, data_);
  }
  void device_reduce(const Tensor& x, Tensor& y, int root) override {
    expect_here({x});
    if (rank_ == root) expect_here({y});
    MPI_Reduce(x.raw_data(), rank_ == root ? y.raw_data() : nullptr, static_cast<int>(x.numel()), type(x), MPI_SUM,
               root, data_);
  }
  void device_reduce_scatter(const std::vector<Tensor>& xs, Tensor& y) override {
    expect_here(xs);
    expect_here({y});
    for (int r = 0; r < size_; ++r) {
      if (xs[r].numel() == 0) continue;
      MPI_Reduce(xs[r].raw_data(), r == rank_ ? y.raw_data() : nullptr, static_cast<int>(xs[r].numel()), type(xs[r]),
                 MPI_SUM, r, data_);
    }
  }

 private:
  explicit FakeDeviceCommunicator(MPI_Comm owned) : MpiCommunicator(owned), gpu_(Device::cuda(intra_rank_)) {
    device_ = gpu_;
    MPI_Comm_dup(owned, &data_);
  }

  static void comm_detail_ensure() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    TANDEM_CHECK(initialized, "FakeDeviceCommunicator: create a communicator with create_communicator first");
  }

  // The contract of the device_* members: every tensor on this rank's "GPU", contiguous.
  void expect_here(const std::vector<Tensor>& xs) const {
    for (const Tensor& x : xs) {
      TANDEM_CHECK(x.defined() && x.device() == gpu_, "FakeDeviceCommunicator on rank ", rank_,
                   ": a device transfer got ", x.defined() ? x.description() : "an undefined tensor",
                   ", not a tensor on ", gpu_.str());
    }
  }
  static int bytes(const Tensor& x) { return static_cast<int>(x.nbytes()); }
  static MPI_Datatype type(const Tensor& x) {
    switch (x.dtype()) {
      case DType::f32: return MPI_FLOAT;
      case DType::f64: return MPI_DOUBLE;
      case DType::i32: return MPI_INT32_T;
      case DType::i64: return MPI_INT64_T;
      case DType::boolean: break;
    }
    TANDEM_FAIL("FakeDeviceCommunicator: a reduction of ", x.description());
  }
  static void wait(std::vector<MPI_Request>& requests) {
    MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  }
  // xs[r] (or xs[0] for everyone when `same`) goes to rank r, pieces[r] comes from rank r;
  // this rank's own piece is a device copy, and empty transfers are skipped on both sides.
  void exchange(const std::vector<Tensor>& xs, std::vector<Tensor>& pieces, bool same) {
    auto to = [&](int r) -> const Tensor& { return same ? xs[0] : xs[r]; };
    if (to(rank_).nbytes() > 0) pieces[rank_].copy_(to(rank_));
    std::vector<MPI_Request> requests;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      if (to(r).nbytes() > 0) {
        requests.emplace_back();
        MPI_Isend(to(r).raw_data(), bytes(to(r)), MPI_BYTE, r, 0, data_, &requests.back());
      }
      if (pieces[r].nbytes() > 0) {
        requests.emplace_back();
        MPI_Irecv(pieces[r].raw_data(), bytes(pieces[r]), MPI_BYTE, r, 0, data_, &requests.back());
      }
    }
    wait(requests);
  }

  Device gpu_;
  MPI_Comm data_ = MPI_COMM_NULL;
};

}  // namespace fake_device
