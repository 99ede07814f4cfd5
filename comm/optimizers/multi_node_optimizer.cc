#include "comm/optimizers/multi_node_optimizer.h"

#include <string>
#include <vector>

#include "core/error.h"

namespace tandem {

namespace {

class MultiNodeGradientSync final : public GradientSync {
 public:
  MultiNodeGradientSync(CommunicatorPtr comm, bool zero_fill) : comm_(std::move(comm)), zero_fill_(zero_fill) {}

  bool before_update(Link& target) override {
    std::vector<std::pair<std::string, Shape>> now;
    for (const auto& [name, param] : target.namedparams()) now.emplace_back(name, param.shape());
    if (now != known_) {
      comm_->bcast_data(target);
      known_ = std::move(now);
      return false;
    }
    comm_->multi_node_mean_grad(target, zero_fill_);
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
