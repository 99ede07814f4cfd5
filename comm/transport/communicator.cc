#include "comm/transport/communicator.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/ops.h"

namespace tandem {

namespace {
thread_local const char* g_scope_label = nullptr;  // CommLabelScope's innermost label

std::atomic<bool>& collective_site_check() {
  static std::atomic<bool> on{[] {
    const char* value = std::getenv("TANDEM_CHECK_COLLECTIVE_SITES");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }()};
  return on;
}

}  // namespace

bool check_collective_sites_enabled() { return collective_site_check().load(std::memory_order_relaxed); }
void set_check_collective_sites(bool on) { collective_site_check().store(on, std::memory_order_relaxed); }

CommLabelScope::CommLabelScope(const char* label) : previous_(g_scope_label) { g_scope_label = label; }
CommLabelScope::~CommLabelScope() { g_scope_label = previous_; }
const char* CommLabelScope::current() { return g_scope_label; }

namespace {
// Moves a result to the requested device. The MPI layer has already put it where the
// communicator puts results (communicator.h), so a request for another device costs one copy.
Tensor land(Tensor y, const std::optional<Device>& device) { return device && y.defined() ? y.to(*device) : y; }
}  // namespace

Tensor Communicator::recv(int source, int tag, std::optional<Device> device, CallSite site) {
  MessageExpectation expect;
  expect.kind = comm_detail::OpKind::tensor_send;
  expect.operation = "recv";
  return land(recv_message(source, tag, expect, site).tensor, device);
}

Tensor Communicator::bcast(const Tensor& x, int root, std::optional<Device> device, CallSite site) {
  return land(bcast(x, root, site), device);
}

std::vector<Tensor> Communicator::gather(const Tensor& x, int root, std::optional<Device> device, CallSite site) {
  std::vector<Tensor> ys = gather(x, root, site);
  for (Tensor& y : ys) y = land(std::move(y), device);
  return ys;
}

Tensor Communicator::scatter(const std::vector<Tensor>& xs, int root, std::optional<Device> device, CallSite site) {
  return land(scatter(xs, root, site), device);
}

namespace {

// What a communicator without non-blocking collectives returns: the result, computed at start.
class CompletedCollective final : public PendingCollective {
 public:
  explicit CompletedCollective(Tensor result) : result_(std::move(result)) {}
  bool test() override { return true; }
  Tensor wait() override { return result_; }

 private:
  Tensor result_;
};

}  // namespace

std::unique_ptr<PendingCollective> Communicator::start_allreduce_sum(const Tensor& x, std::uint64_t digest,
                                                                     const char* operation, bool, CallSite site) {
  return std::make_unique<CompletedCollective>(allreduce_checked(x, AllreduceOp::sum, digest, operation, site));
}

std::vector<Tensor> comm_detail::reduce_scatter_stripes(const Tensor& x, int size, const char* operation) {
  TANDEM_CHECK(x.defined() && x.dim() == 1 && x.numel() % size == 0, operation, ": reduce-scatter of ",
               x.defined() ? x.description() : std::string("an undefined tensor"), " needs a 1-D tensor of ", size,
               " equal stripes (one per rank)");
  std::vector<Tensor> stripes;
  const std::int64_t n = x.numel() / size;
  for (int r = 0; r < size; ++r) stripes.push_back(x.slice_rows(r * n, (r + 1) * n));
  return stripes;
}

std::unique_ptr<PendingCollective> Communicator::start_reduce_scatter_sum(const Tensor& x, std::uint64_t,
                                                                          const char* operation, CallSite site) {
  return std::make_unique<CompletedCollective>(
      reduce_scatter(comm_detail::reduce_scatter_stripes(x, size_, operation), site));
}

std::unique_ptr<PendingCollective> Communicator::start_allgather(const Tensor& x, std::uint64_t, const char* operation,
                                                                 CallSite site) {
  std::vector<Tensor> flat;
  for (const Tensor& piece : allgather(x, site)) {
    TANDEM_CHECK(piece.shape() == x.shape(), operation, ": the ranks' pieces differ (", x.description(), " here, ",
                 piece.description(), " from another rank); start_allgather needs one shape on every rank");
    flat.push_back(piece.reshape({-1}));
  }
  return std::make_unique<CompletedCollective>(concat(flat, 0));
}

}  // namespace tandem
