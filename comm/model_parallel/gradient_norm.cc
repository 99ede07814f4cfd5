#include "comm/model_parallel/gradient_norm.h"

#include <map>
#include <sstream>

#include "comm/tensor_parallel/tensor_parallel_checkpoint.h"

namespace tandem {

namespace {

// The link holding parameter `path` ("a/b/W": link a/b, parameter W) and the parameter's name.
std::pair<Link*, std::string> owner_of(Link& root, const std::string& path) {
  Link* link = &root;
  std::stringstream parts(path);
  std::string part, next;
  std::getline(parts, part, '/');
  while (std::getline(parts, next, '/')) {
    Link* child = nullptr;
    for (const auto& [name, c] : link->children())
      if (name == part) child = c.get();
    TANDEM_CHECK(child != nullptr, "model_parallel_gradient_clipping: no link '", part, "' on the way to '", path, "'");
    link = child;
    part = next;
  }
  return {link, part};
}

}  // namespace

std::shared_ptr<GradientClipping> model_parallel_gradient_clipping(double threshold, Optimizer& optimizer,
                                                                   CommunicatorPtr tensor_group,
                                                                   CommunicatorPtr model_group,
                                                                   std::set<std::string> not_counted) {
  // Replicated parameters count on tensor rank 0 only: without a group summing over the tensor
  // ranks, each would clip by its own norm and the replicas would drift apart.
  TANDEM_CHECK(
      !tensor_group || tensor_group->size() == 1 || (model_group && model_group->size() >= tensor_group->size()),
      "model_parallel_gradient_clipping: a tensor group of ", tensor_group ? tensor_group->size() : 0,
      " ranks needs a model group holding at least those ranks (got ",
      model_group ? std::to_string(model_group->size()) + " ranks" : std::string("none"), ")");
  // Built at the first call, when the optimizer has its target and its sync its shards.
  auto weights = std::make_shared<std::map<std::string, double>>();
  auto counts = [&optimizer, tensor_group, not_counted, weights](const std::string& name) {
    if (weights->empty()) {
      Link& target = *optimizer.target();
      const bool tensor_rank_zero = !tensor_group || tensor_group->rank() == 0;
      for (const auto& [path, param] : target.namedparams()) {
        double weight = 1;
        if (not_counted.count(path)) {
          weight = 0;
        } else if (tensor_group && tensor_group->size() > 1) {
          const auto [link, param_name] = owner_of(target, path);
          const auto* split = dynamic_cast<const TensorParallelLink*>(link);
          const bool is_split = split != nullptr && split->split_axes().count(param_name) > 0;
          weight = is_split || tensor_rank_zero ? 1 : 0;
        }
        (*weights)[path] = weight;
        if (optimizer.gradient_sync())
          for (const GradientSync::Slice& slice : optimizer.gradient_sync()->slices_of(target, path))
            (*weights)[slice.name] = weight;
      }
    }
    const auto it = weights->find(name);
    TANDEM_CHECK(it != weights->end(), "model_parallel_gradient_clipping: the optimizer updates '", name,
                 "', which is neither a parameter of its target nor a slice of one");
    return it->second;
  };
  std::function<double(double)> total;
  if (model_group && model_group->size() > 1)
    total = [model_group](double local) { return model_group->allreduce(full({}, local, DType::f64)).item(); };
  return std::make_shared<GradientClipping>(threshold, counts, total);
}

}  // namespace tandem
