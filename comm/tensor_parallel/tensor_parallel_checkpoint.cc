#include "comm/tensor_parallel/tensor_parallel_checkpoint.h"

#include <functional>

#include "comm/tensor_parallel/parallel_region.h"
#include "core/error.h"
#include "core/ops.h"

namespace tandem {

namespace {

// Calls visit(path of the parameter, the parameter, the layer's split axis or -1, the layer's
// group or null) for every initialised parameter, in the order of namedparams().
void for_each_param(Link& link, const std::string& prefix,
                    const std::function<void(const std::string&, Variable&, std::int64_t, Communicator*)>& visit) {
  const auto* parallel = dynamic_cast<const TensorParallelLink*>(&link);
  const std::map<std::string, std::int64_t> axes = parallel ? parallel->split_axes() : std::map<std::string, std::int64_t>{};
  for (auto& [name, param] : link.namedparams(/*include_uninitialized=*/true)) {
    if (name.find('/') != std::string::npos) continue;  // a child's: visited below
    const std::string path = prefix.empty() ? name : prefix + "/" + name;
    TANDEM_CHECK(param.defined(), "tensor-parallel checkpoint: parameter '", path, "' of ", link.type_name(),
                 " is not initialised yet (run a forward pass or give its input size)");
    auto it = axes.find(name);
    visit(path, param, it == axes.end() ? -1 : it->second, parallel ? &parallel->group() : nullptr);
  }
  for (const auto& [name, child] : link.children())
    for_each_param(*child, prefix.empty() ? name : prefix + "/" + name, visit);
}

}  // namespace

void TensorParallelLink::check_group_agrees(const std::string& layer, const std::vector<std::int64_t>& sizes) {
  if (agreed_) return;
  Communicator& comm = group();
  const std::vector<Tensor> all = comm.allgather(from_vector(sizes, {static_cast<std::int64_t>(sizes.size())}));
  const auto text = [](const Tensor& t) {
    std::string out;
    for (std::int64_t v : t.to_vector<std::int64_t>()) out += (out.empty() ? "" : " x ") + std::to_string(v);
    return out;
  };
  const Tensor mine = from_vector(sizes, {static_cast<std::int64_t>(sizes.size())});
  for (int r = 0; r < comm.size(); ++r)
    TANDEM_CHECK(all[r].shape() == mine.shape() && all[r].to_vector<std::int64_t>() == sizes, layer, ": the ranks of its "
                 "group built different layers: rank ", comm.rank(), " has ", text(mine), ", rank ", r, " has ",
                 text(all[r]), " (every rank of the group must build the same unsplit layer)");
  agreed_ = true;
}

NamedTensors gather_tensor_parallel_params(Link& model) {
  NamedTensors whole;
  for_each_param(model, "", [&](const std::string& path, Variable& param, std::int64_t axis, Communicator* group) {
    if (axis < 0) {
      whole.emplace_back(path, param.data().clone());
      return;
    }
    whole.emplace_back(path, concat(group->allgather(param.data()), axis));
  });
  return whole;
}

void scatter_tensor_parallel_params(Link& model, const NamedTensors& whole) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, value] : whole) by_name[name] = &value;
  for_each_param(model, "", [&](const std::string& path, Variable& param, std::int64_t axis, Communicator* group) {
    auto it = by_name.find(path);
    TANDEM_CHECK(it != by_name.end(), "scatter_tensor_parallel_params: no value for parameter '", path, "'");
    const Tensor& value = *it->second;
    Tensor mine = value;
    if (axis >= 0) {
      // The unsplit extent is the sum of the group's shares: every rank checks the value against
      // it, so a misshapen value is the same error on every rank (a share could fit by chance).
      std::int64_t extent = 0;
      for (const Tensor& e : group->allgather(from_vector(std::vector<std::int64_t>{param.data().size(axis)}, {1})))
        extent += e.data<std::int64_t>()[0];
      TANDEM_CHECK(value.dim() == param.data().dim() && value.size(axis) == extent, "scatter_tensor_parallel_params: '",
                   path, "' is ", value.description(), " unsplit, which does not fit the parameter ",
                   param.description(), " split along axis ", axis, " over ", group->size(), " rank(s) (", extent,
                   " in all)");
      const Share share = share_of(value.size(axis), group->rank(), group->size());
      mine = slice(value, axis, share.begin, share.end);
    }
    TANDEM_CHECK(mine.shape() == param.shape() && mine.dtype() == param.dtype(), "scatter_tensor_parallel_params: '",
                 path, "' is ", value.description(), " unsplit, which does not fit the parameter ", param.description(),
                 axis >= 0 ? " (this rank's share of it)" : "");
    param.set_data(mine.to(param.device()).clone());
  });
}

}  // namespace tandem
