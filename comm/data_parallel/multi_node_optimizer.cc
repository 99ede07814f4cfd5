#include "comm/data_parallel/multi_node_optimizer.h"

#include <string>
#include <vector>

#include "comm/data_parallel/data_parallel.h"
#include "core/deterministic.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/ops.h"

namespace tandem {

namespace {

class MultiNodeGradientSync final : public GradientSync {
 public:
  MultiNodeGradientSync(CommunicatorPtr comm, bool zero_fill, std::optional<DType> allreduce_grad_dtype)
      : comm_(std::move(comm)), zero_fill_(zero_fill), allreduce_grad_dtype_(allreduce_grad_dtype) {}

  bool before_update(Link& target) override {
    std::vector<std::pair<std::string, Shape>> now;
    for (const auto& [name, param] : target.namedparams()) now.emplace_back(name, param.shape());
    if (now != known_) {
      known_ = std::move(now);
      // Replicas that already agree (the same seed, or resumed from the same snapshot) need no
      // broadcast, and their gradients are valid: go on to update, so a resumed run loses no step.
      if (!replicas_equal(*comm_, target.namedparams())) {
        bcast_data(*comm_, target);
        return false;
      }
    }
    multi_node_mean_grad(*comm_, target, zero_fill_, allreduce_grad_dtype_);
    return true;
  }

 private:
  CommunicatorPtr comm_;
  bool zero_fill_;
  std::optional<DType> allreduce_grad_dtype_;
  std::vector<std::pair<std::string, Shape>> known_;
};

// The same, group by group.
class GroupedGradientSync final : public GradientSync {
 public:
  explicit GroupedGradientSync(std::vector<ParameterGroup> groups) : groups_(std::move(groups)) {}

  bool before_update(Link& target) override {
    const std::vector<NamedParams> split = split_by_group(target);
    std::vector<std::pair<std::string, Shape>> now;
    for (const auto& [name, param] : target.namedparams()) now.emplace_back(name, param.shape());
    if (now != known_) {
      known_ = std::move(now);
      // Every group is checked on every rank (each check is a collective of its group), and the
      // update goes ahead only where all replicas already agreed.
      bool all_equal = true;
      for (std::size_t g = 0; g < groups_.size(); ++g) {
        if (replicas_equal(*groups_[g].comm, split[g])) continue;
        bcast_data(*groups_[g].comm, split[g]);
        all_equal = false;
      }
      // The groups' verdicts may differ between ranks of different groups; the update must not.
      if (!agree_everywhere(all_equal)) return false;
    }
    for (std::size_t g = 0; g < groups_.size(); ++g)
      multi_node_mean_grad(*groups_[g].comm, split[g], groups_[g].zero_fill, groups_[g].grad_scale);
    return true;
  }

 private:
  std::vector<NamedParams> split_by_group(Link& target) const {
    std::vector<NamedParams> split(groups_.size());
    for (const auto& [name, param] : target.namedparams()) {
      std::vector<std::size_t> in;
      for (std::size_t g = 0; g < groups_.size(); ++g)
        if (groups_[g].contains(name)) in.push_back(g);
      TANDEM_CHECK(in.size() == 1, "create_multi_node_optimizer: parameter '", name, "' belongs to ",
                   in.empty() ? std::string("no group") : detail::concat(in.size(), " groups (", groups_[in[0]].name,
                                                                        " and ", groups_[in[1]].name, ")"),
                   "; every parameter must belong to exactly one of the groups (", group_names(), ")");
      split[in[0]].emplace_back(name, param);
    }
    return split;
  }

  std::string group_names() const {
    std::string names;
    for (std::size_t g = 0; g < groups_.size(); ++g) names += (g ? ", " : "") + groups_[g].name;
    return names;
  }

  // Whether `mine` holds on every rank of every group (the groups together span the job).
  bool agree_everywhere(bool mine) const {
    bool all = mine;
    for (const ParameterGroup& group : groups_) {
      const Tensor votes = group.comm->allreduce(full({1}, all ? 0.0 : 1.0, DType::f64));
      all = votes.to_vector<double>()[0] == 0.0;
    }
    // Once more over the first group, so that a "no" found in a later group reaches its ranks.
    const Tensor votes = groups_.front().comm->allreduce(full({1}, all ? 0.0 : 1.0, DType::f64));
    return votes.to_vector<double>()[0] == 0.0;
  }

  std::vector<ParameterGroup> groups_;
  std::vector<std::pair<std::string, Shape>> known_;
};

}  // namespace

std::shared_ptr<Optimizer> create_multi_node_optimizer(std::shared_ptr<Optimizer> optimizer,
                                                       std::vector<ParameterGroup> groups) {
  TANDEM_CHECK(optimizer, "create_multi_node_optimizer: an optimizer is required");
  TANDEM_CHECK(!groups.empty(), "create_multi_node_optimizer: no parameter groups");
  for (const ParameterGroup& group : groups)
    TANDEM_CHECK(group.comm && group.contains, "create_multi_node_optimizer: group '", group.name,
                 "' needs a communicator and a contains() test");
  TANDEM_CHECK(!optimizer->gradient_sync(), "create_multi_node_optimizer: this ", optimizer->type_name(),
               " already has a gradient sync (wrapped twice?)");
  optimizer->set_gradient_sync(std::make_shared<GroupedGradientSync>(std::move(groups)));
  return optimizer;
}

std::shared_ptr<Optimizer> create_multi_node_optimizer(std::shared_ptr<Optimizer> optimizer, CommunicatorPtr comm,
                                                       const DataParallelOptions& options) {
  TANDEM_CHECK(!options.allreduce_grad_dtype || is_floating(*options.allreduce_grad_dtype),
               "create_multi_node_optimizer: allreduce_grad_dtype must be floating (bf16, f16, f32, f64), got ",
               dtype_name(*options.allreduce_grad_dtype));
  if (deterministic()) {
    // Deterministic mode sums the gradients with the order-free allreduce after backward, the
    // same for every bucket size and overlap; ZeRO-1 and 2 then keep the whole optimizer state
    // on every rank (the update is element-wise: the same bits). ZeRO-3's sharded parameters
    // are not supported yet.
    TANDEM_CHECK(options.zero < 3, "create_multi_node_optimizer: ZeRO-3 (zero = ", options.zero,
                 ") does not run in deterministic mode (TANDEM_DETERMINISTIC=1) yet; use zero <= 2");
    TANDEM_CHECK(!options.double_buffering, "create_multi_node_optimizer: double_buffering applies gradients a step "
                 "late and does not run in deterministic mode (TANDEM_DETERMINISTIC=1)");
    return create_multi_node_optimizer(std::move(optimizer), std::move(comm), options.zero_fill,
                                       options.allreduce_grad_dtype);
  }
  install_data_parallel_sync(optimizer, std::move(comm), options);
  return optimizer;
}

std::shared_ptr<Optimizer> create_multi_node_optimizer(std::shared_ptr<Optimizer> optimizer, CommunicatorPtr comm,
                                                       bool zero_fill, std::optional<DType> allreduce_grad_dtype) {
  TANDEM_CHECK(optimizer && comm, "create_multi_node_optimizer: an optimizer and a communicator are required");
  TANDEM_CHECK(!optimizer->gradient_sync(), "create_multi_node_optimizer: this ", optimizer->type_name(),
               " already has a gradient sync (wrapped twice?)");
  TANDEM_CHECK(!allreduce_grad_dtype || is_floating(*allreduce_grad_dtype),
               "create_multi_node_optimizer: allreduce_grad_dtype must be floating (bf16, f16, f32, f64), got ",
               dtype_name(*allreduce_grad_dtype));
  TANDEM_CHECK(!allreduce_grad_dtype || !deterministic(), "create_multi_node_optimizer: allreduce_grad_dtype (",
               dtype_name(*allreduce_grad_dtype),
               ") does not run in deterministic mode (TANDEM_DETERMINISTIC=1), "
               "whose sums are exact");
  optimizer->set_gradient_sync(
      std::make_shared<MultiNodeGradientSync>(std::move(comm), zero_fill, allreduce_grad_dtype));
  return optimizer;
}

}  // namespace tandem
