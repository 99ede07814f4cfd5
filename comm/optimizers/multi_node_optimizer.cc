#include "comm/optimizers/multi_node_optimizer.h"

#include <string>
#include <vector>

#include "comm/data_parallel/data_parallel.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/ops.h"

namespace tandem {

namespace {

// FNV-1a over every parameter's bytes: equal on two ranks when their replicas are equal.
std::uint64_t values_digest(const Link& target) {
  Fnv1a64 h;
  for (const auto& [name, param] : target.namedparams()) {
    const Tensor host = param.data().to(Device::cpu());
    h.bytes(host.raw_data(), static_cast<std::size_t>(host.numel()) * dtype_size(host.dtype()));
  }
  return h.digest();
}

// Whether every rank's replica is already equal to every other's (one tiny allgather).
bool replicas_equal(Communicator& comm, const Link& target) {
  const std::vector<Tensor> digests =
      comm.allgather(from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(values_digest(target))}));
  for (const Tensor& d : digests)
    if (d.to_vector<std::int64_t>() != digests[0].to_vector<std::int64_t>()) return false;
  return true;
}

class MultiNodeGradientSync final : public GradientSync {
 public:
  MultiNodeGradientSync(CommunicatorPtr comm, bool zero_fill) : comm_(std::move(comm)), zero_fill_(zero_fill) {}

  bool before_update(Link& target) override {
    std::vector<std::pair<std::string, Shape>> now;
    for (const auto& [name, param] : target.namedparams()) now.emplace_back(name, param.shape());
    if (now != known_) {
      known_ = std::move(now);
      // Replicas that already agree (the same seed, or resumed from the same snapshot) need no
      // broadcast, and their gradients are valid: go on to update, so a resumed run loses no step.
      if (!replicas_equal(*comm_, target)) {
        bcast_data(*comm_, target);
        return false;
      }
    }
    multi_node_mean_grad(*comm_, target, zero_fill_);
    return true;
  }

 private:
  CommunicatorPtr comm_;
  bool zero_fill_;
  std::vector<std::pair<std::string, Shape>> known_;
};

}  // namespace

std::shared_ptr<Optimizer> create_multi_node_optimizer(std::shared_ptr<Optimizer> optimizer, CommunicatorPtr comm,
                                                       bool zero_fill) {
  TANDEM_CHECK(optimizer && comm, "create_multi_node_optimizer: an optimizer and a communicator are required");
  TANDEM_CHECK(!optimizer->gradient_sync(), "create_multi_node_optimizer: this ", optimizer->type_name(),
               " already has a gradient sync (wrapped twice?)");
  optimizer->set_gradient_sync(std::make_shared<MultiNodeGradientSync>(std::move(comm), zero_fill));
  return optimizer;
}

}  // namespace tandem
