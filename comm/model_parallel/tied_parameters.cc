#include "comm/model_parallel/tied_parameters.h"

#include <map>

#include "core/ops/elementwise.h"

namespace tandem {

namespace {

// A sync that does something to the gradients first, then hands over to the one it wraps (or
// none): the data-parallel average comes after.
class WrappingSync : public GradientSync {
 public:
  explicit WrappingSync(std::shared_ptr<GradientSync> inner) : inner_(std::move(inner)) {}
  bool before_update(Link& target) override {
    first(target);
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

 protected:
  virtual void first(Link& target) = 0;

 private:
  std::shared_ptr<GradientSync> inner_;
};

// The parameters at `paths` of the target, in that order; a missing one is an error naming it.
std::vector<Variable> find_params(Link& target, const std::vector<std::string>& paths, const char* what) {
  std::map<std::string, Variable> all;
  for (auto& [name, param] : target.namedparams()) all[name] = param;
  std::vector<Variable> out;
  for (const std::string& path : paths) {
    const auto it = all.find(path);
    TANDEM_CHECK(it != all.end(), what, ": the optimizer's target has no parameter '", path, "'");
    out.push_back(it->second);
  }
  return out;
}

class TiedGradientSync : public WrappingSync {
 public:
  TiedGradientSync(std::shared_ptr<GradientSync> inner, CommunicatorPtr group, std::vector<std::string> paths)
      : WrappingSync(std::move(inner)), group_(std::move(group)), paths_(std::move(paths)) {}

 protected:
  void first(Link& target) override { sum_copies(target); }

 private:
  void sum_copies(Link& target) {
    std::vector<Variable> copies = find_params(target, paths_, "tie_parameters");
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

  CommunicatorPtr group_;
  std::vector<std::string> paths_;
  bool checked_ = false;
};

// Each parameter's gradient summed over the group: all of them packed into one f64 buffer (the
// sum of a few parts is then exact to f32), one allreduce, unpacked; a rank without a gradient
// for one adds zeros.
class GroupSumSync : public WrappingSync {
 public:
  GroupSumSync(std::shared_ptr<GradientSync> inner, CommunicatorPtr group, std::vector<std::string> paths)
      : WrappingSync(std::move(inner)), group_(std::move(group)), paths_(std::move(paths)) {}

 protected:
  void first(Link& target) override {
    std::vector<Variable> params = find_params(target, paths_, "sum_gradients_over");
    std::int64_t total = 0;
    for (const Variable& p : params) total += p.data().numel();
    std::vector<double> packed(static_cast<std::size_t>(total), 0.0);
    std::size_t at = 0;
    for (const Variable& p : params) {
      if (p.grad().defined()) {
        const std::vector<double> g = p.grad().to(Device::cpu()).to(DType::f64).to_vector<double>();
        std::copy(g.begin(), g.end(), packed.begin() + static_cast<std::ptrdiff_t>(at));
      }
      at += static_cast<std::size_t>(p.data().numel());
    }
    const std::vector<double> sum = group_->allreduce(from_vector(packed, {total})).to_vector<double>();
    at = 0;
    for (Variable& p : params) {
      const std::size_t n = static_cast<std::size_t>(p.data().numel());
      const std::vector<double> part(sum.begin() + static_cast<std::ptrdiff_t>(at),
                                     sum.begin() + static_cast<std::ptrdiff_t>(at + n));
      p.set_grad(from_vector(part, p.shape()).to(p.dtype()).to(p.data().device()));
      at += n;
    }
  }

 private:
  CommunicatorPtr group_;
  std::vector<std::string> paths_;
};

}  // namespace

void tie_parameters(Optimizer& optimizer, CommunicatorPtr group, std::vector<std::string> paths) {
  TANDEM_CHECK(!paths.empty(), "tie_parameters: no parameter to tie on rank ", group ? group->rank() : 0);
  TANDEM_CHECK(!optimizer.has_target(), "tie_parameters: call it before optimizer.setup(model)");
  optimizer.set_gradient_sync(
      std::make_shared<TiedGradientSync>(optimizer.gradient_sync(), std::move(group), std::move(paths)));
}

void sum_gradients_over(Optimizer& optimizer, CommunicatorPtr group, std::vector<std::string> paths) {
  TANDEM_CHECK(group != nullptr, "sum_gradients_over: a group is required");
  TANDEM_CHECK(!optimizer.has_target(), "sum_gradients_over: call it before optimizer.setup(model)");
  if (paths.empty()) return;
  optimizer.set_gradient_sync(
      std::make_shared<GroupSumSync>(optimizer.gradient_sync(), std::move(group), std::move(paths)));
}

}  // namespace tandem
