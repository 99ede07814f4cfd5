#include "comm/multi_node_links/create_mnbn_model.h"

#include <map>
#include <string>
#include <vector>

#include "comm/multi_node_links/multi_node_batch_normalization.h"
#include "layers/links/batch_normalization.h"

namespace tandem {

namespace {

std::string join(const std::string& path, const std::string& name) { return path.empty() ? name : path + "/" + name; }

template <typename Pairs>
std::vector<std::string> names_of(const Pairs& pairs) {
  std::vector<std::string> names;
  for (const auto& entry : pairs) names.push_back(entry.first);
  return names;
}

std::string list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "none" : out;
}

// A plain BatchNormalization (or a subclass of it) to replace; null for anything else, and for a
// MultiNodeBatchNormalization, which is what the conversion makes.
BatchNormalization* to_replace(Link& link) {
  if (dynamic_cast<MultiNodeBatchNormalization*>(&link)) return nullptr;
  return dynamic_cast<BatchNormalization*>(&link);
}

// bn's replacement, holding bn's own Variables and buffers rather than copies: the two stay one
// layer whichever of them the optimizer, a snapshot or the user's code reaches.
LinkPtr multi_node_twin(BatchNormalization& bn, const CommunicatorPtr& comm, const std::string& path) {
  Tensor& avg_mean = bn.persistent("avg_mean");
  auto twin = std::make_shared<MultiNodeBatchNormalization>(avg_mean.numel(), comm, bn.decay(), bn.eps(),
                                                            avg_mean.dtype());
  const std::string where = path.empty() ? "the model" : "'" + path + "'";
  const auto params = names_of(bn.namedparams(true)), twin_params = names_of(twin->namedparams(true));
  TANDEM_CHECK(params == twin_params, "create_mnbn_model: the ", bn.type_name(), " at ", where,
               " has the parameters (", list(params), ") but MultiNodeBatchNormalization has (", list(twin_params),
               "): it cannot take its place");
  const auto buffers = names_of(bn.namedpersistents()), twin_buffers = names_of(twin->namedpersistents());
  TANDEM_CHECK(buffers == twin_buffers, "create_mnbn_model: the ", bn.type_name(), " at ", where,
               " has the persistent buffers (", list(buffers), ") but MultiNodeBatchNormalization has (",
               list(twin_buffers), "): it cannot take its place");
  // The twin's own device first, so that its later parameters and moves go where bn's are.
  twin->to(bn.device());
  twin->set_train(bn.is_train());
  for (const std::string& name : params) twin->param(name) = bn.param(name);  // the same Variable
  for (const std::string& name : buffers) twin->persistent(name) = bn.persistent(name);  // the same storage
  bn.forward_to(twin);
  return twin;
}

// Replaces every BatchNormalization below `link`. `done` maps each link met so far to what stands
// in its place, so that a link shared by two parents gets one replacement.
void convert_children(Link& link, const std::string& path, const CommunicatorPtr& comm,
                      std::map<const Link*, LinkPtr>& done) {
  const auto children = link.children();  // a copy: replace_child changes the list
  for (const auto& [name, child] : children) {
    const std::string child_path = join(path, name);
    auto seen = done.find(child.get());
    if (seen == done.end()) {
      BatchNormalization* bn = to_replace(*child);
      seen = done.emplace(child.get(), bn ? multi_node_twin(*bn, comm, child_path) : child).first;
      if (!bn) convert_children(*child, child_path, comm, done);
    }
    if (seen->second != child) link.replace_child(name, seen->second);
  }
}

}  // namespace

LinkPtr create_mnbn_model(const LinkPtr& link, CommunicatorPtr comm) {
  TANDEM_CHECK(link != nullptr, "create_mnbn_model: the model is null");
  TANDEM_CHECK(comm != nullptr, "create_mnbn_model: no communicator");
  if (BatchNormalization* bn = to_replace(*link)) return multi_node_twin(*bn, comm, "");
  std::map<const Link*, LinkPtr> done;
  convert_children(*link, "", comm, done);
  return link;
}

}  // namespace tandem
