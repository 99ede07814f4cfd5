#include "comm/model_parallel/tied_parameters.h"

#include "core/ops/elementwise.h"

namespace tandem {

namespace {

class TiedGradientSync : public GradientSync {
 public:
  TiedGradientSync(std::shared_ptr<GradientSync> inner, CommunicatorPtr group, std::vector<std::string> paths)
      : inner_(std::move(inner)), group_(std::move(group)), paths_(std::move(paths)) {}

  bool before_update(Link& target) override {
    sum_copies(target);
    return inner_ ? inner_->before_update(target) : true;
  }
  std::vector<std::pair<std::string, Variable>> update_params(Link& target) override {
    return inner_ ? inner_->update_params(target) : target.namedparams();
  }
  void after_update(Link& target) override {
    if (inner_) inner_->after_update(target);
  }
  double total_over_shards(double local) override { return inner_ ? inner_->total_over_shards(local) : local; }
  void attach(Link& target) override {
    if (inner_) inner_->attach(target);
  }
  std::shared_ptr<void> gather_parameters(Link& target) override {
    return inner_ ? inner_->gather_parameters(target) : nullptr;
  }
  std::vector<Slice> slices_of(Link& target, const std::string& param) override {
    return inner_ ? inner_->slices_of(target, param) : std::vector<Slice>{};
  }

 private:
  void sum_copies(Link& target) {
    std::vector<Variable> copies;
    for (const std::string& path : paths_) {
      Variable* found = nullptr;
      for (auto& [name, param] : target.namedparams())
        if (name == path) found = &param;
      TANDEM_CHECK(found != nullptr, "tie_parameters: the optimizer's target has no parameter '", path, "'");
      copies.push_back(*found);
    }
    const Variable& first = copies.front();
    Tensor sum;
    for (std::size_t i = 0; i < copies.size(); ++i) {
      TANDEM_CHECK(copies[i].shape() == first.shape() && copies[i].dtype() == first.dtype(), "tie_parameters: '",
                   paths_[i], "' ", copies[i].description(), " differs from '", paths_[0], "' ", first.description());
      if (!copies[i].grad().defined()) continue;
      sum = sum.defined() ? add(sum, copies[i].grad()) : copies[i].grad();
    }
    if (!sum.defined()) sum = zeros(first.shape(), first.dtype(), first.data().device());
    if (group_ && group_->size() > 1) {
      if (!checked_) {
        // One small allgather: every holder ties a tensor of the same shape and dtype.
        std::vector<double> mine = {static_cast<double>(first.dtype())};
        for (std::int64_t e : first.shape()) mine.push_back(static_cast<double>(e));
        mine.resize(9, -1.0);
        const std::vector<Tensor> all = group_->allgather(from_vector(mine, {9}));
        for (int r = 0; r < group_->size(); ++r)
          TANDEM_CHECK(all[static_cast<std::size_t>(r)].to_vector<double>() == mine, "tie_parameters: rank ",
                       group_->rank(), " of the tie group ties '", paths_[0], "' ", first.description(), ", rank ", r,
                       " a tensor of another shape or dtype");
        checked_ = true;
      }
      sum = group_->allreduce(sum);
    }
    for (Variable& copy : copies) copy.set_grad(copies.size() == 1 ? sum : sum.clone());
  }

  std::shared_ptr<GradientSync> inner_;
  CommunicatorPtr group_;
  std::vector<std::string> paths_;
  bool checked_ = false;
};

}  // namespace

void tie_parameters(Optimizer& optimizer, CommunicatorPtr group, std::vector<std::string> paths) {
  TANDEM_CHECK(!paths.empty(), "tie_parameters: no parameter to tie on rank ", group ? group->rank() : 0);
  TANDEM_CHECK(!optimizer.has_target(), "tie_parameters: call it before optimizer.setup(model)");
  optimizer.set_gradient_sync(
      std::make_shared<TiedGradientSync>(optimizer.gradient_sync(), std::move(group), std::move(paths)));
}

}  // namespace tandem
