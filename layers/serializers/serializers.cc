#include "layers/serializers/serializers.h"

#include <map>
#include <set>

namespace tandem {

NamedTensors link_state(Link& link) {
  NamedTensors out;
  for (auto& [name, param] : link.namedparams()) out.emplace_back(name, param.data());
  for (auto& [name, tensor] : link.namedpersistents()) out.emplace_back(name, *tensor);
  return out;
}

void load_link_state(Link& link, const NamedTensors& entries, bool strict, const std::string& source) {
  std::map<std::string, Tensor> loaded;
  for (const auto& [name, tensor] : entries) loaded[name] = tensor;
  std::set<std::string> used;
  auto find = [&](const std::string& name, const std::string& what) -> const Tensor& {
    auto it = loaded.find(name);
    TANDEM_CHECK(it != loaded.end(), "load_npz: ", source, " has no entry for ", what, " '", name, "'");
    used.insert(name);
    return it->second;
  };
  for (auto& [name, param] : link.namedparams(true)) {
    const Tensor& value = find(name, "parameter");
    if (!param.defined()) {  // a lazily shaped parameter: the file gives its shape
      try {
        link.initialize_param_from(name, value);
      } catch (const Error& e) {
        TANDEM_FAIL("load_npz: ", source, ": cannot create '", name, "' from ", value.description(), ": ", e.what());
      }
      continue;
    }
    TANDEM_CHECK(value.shape() == param.shape() && value.dtype() == param.dtype(), "load_npz: ", source, ": '", name,
                 "' is ", value.description(), " in the file but ", param.description(), " in the model");
    Tensor target = param.data();  // shares the parameter's storage: loads in place
    target.copy_(value.to(target.device()));
  }
  for (auto& [name, tensor] : link.namedpersistents()) {
    const Tensor& value = find(name, "persistent buffer");
    TANDEM_CHECK(value.shape() == tensor->shape() && value.dtype() == tensor->dtype(), "load_npz: ", source, ": '",
                 name, "' is ", value.description(), " in the file but ", tensor->description(), " in the model");
    tensor->copy_(value.to(tensor->device()));
  }
  if (strict) {
    for (const auto& [name, tensor] : loaded)
      TANDEM_CHECK(used.count(name), "load_npz: ", source, " has an entry '", name, "' that ", link.type_name(),
                   " does not have (pass strict=false to ignore extra entries)");
  }
}

void save_npz(const std::string& path, Link& link) { write_npz(path, link_state(link)); }

void load_npz(const std::string& path, Link& link, bool strict) {
  load_link_state(link, read_npz(path), strict, path);
}

void save_npz(const std::string& path, const Optimizer& optimizer) { write_npz(path, optimizer.state_dict()); }

void load_npz(const std::string& path, Optimizer& optimizer) { optimizer.load_state_dict(read_npz(path)); }

NamedTensors with_prefix_removed(const NamedTensors& entries, const std::string& prefix) {
  NamedTensors out;
  const std::string head = prefix + "/";
  for (const auto& [name, tensor] : entries)
    if (name.compare(0, head.size(), head) == 0) out.emplace_back(name.substr(head.size()), tensor);
  return out;
}

NamedTensors with_prefix(const NamedTensors& entries, const std::string& prefix) {
  NamedTensors out;
  for (const auto& [name, tensor] : entries) out.emplace_back(prefix + "/" + name, tensor);
  return out;
}

}  // namespace tandem
