#include "layers/link.h"

#include "core/ops.h"

namespace tandem {

namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "/" + name;
}

template <typename Pairs>
std::string list_names(const Pairs& pairs) {
  std::string out;
  for (const auto& entry : pairs) out += (out.empty() ? "" : ", ") + entry.first;
  return out.empty() ? "none" : out;
}

}  // namespace

Variable Link::forward(const Variable&) {
  TANDEM_FAIL(type_name(), ": this link has no single-input forward");
}

Variables Link::forward_many(const Variables& xs) {
  TANDEM_CHECK(xs.size() == 1, type_name(), ": takes one input but was given ", xs.size(),
               "; override forward_many to take several");
  return {forward(xs[0])};
}

namespace {

Variable only_output(const Link& link, const Variables& ys, std::size_t inputs) {
  TANDEM_CHECK(ys.size() == 1, link.type_name(), ": forward of ", inputs, " input(s) gave ", ys.size(),
               " outputs, not one; use forward_many");
  return ys[0];
}

}  // namespace

Variable Link::forward(const Variable& x, const Variable& t) { return only_output(*this, forward_many({x, t}), 2); }

Variable Link::forward() { return only_output(*this, forward_many({}), 0); }

void Link::collect_params(const std::string& prefix, bool include_uninitialized,
                          std::vector<std::pair<std::string, Variable>>& out) const {
  for (const auto& [name, variable] : params_)
    if (include_uninitialized || variable.defined()) out.emplace_back(join(prefix, name), variable);
  for (const auto& [name, child] : children_) child->collect_params(join(prefix, name), include_uninitialized, out);
}

std::vector<std::pair<std::string, Variable>> Link::namedparams(bool include_uninitialized) const {
  std::vector<std::pair<std::string, Variable>> out;
  collect_params("", include_uninitialized, out);
  return out;
}

std::vector<Variable> Link::params() const {
  std::vector<Variable> out;
  for (auto& entry : namedparams()) out.push_back(entry.second);
  return out;
}

void Link::collect_persistents(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) {
  for (auto& [name, tensor] : persistents_) out.emplace_back(join(prefix, name), &tensor);
  for (auto& [name, child] : children_) child->collect_persistents(join(prefix, name), out);
}

std::vector<std::pair<std::string, Tensor*>> Link::namedpersistents() {
  std::vector<std::pair<std::string, Tensor*>> out;
  collect_persistents("", out);
  return out;
}

std::int64_t Link::count_params() const {
  std::int64_t total = 0;
  for (const Variable& p : params()) total += p.numel();
  return total;
}

void Link::cleargrads() {
  for (Variable& p : params()) p.cleargrad();
}

void Link::copyparams(const Link& other) {
  const auto mine = namedparams(true);
  const auto theirs = other.namedparams(true);
  TANDEM_CHECK(mine.size() == theirs.size(), "copyparams: ", type_name(), " has ", mine.size(), " parameters (",
               list_names(mine), ") but the source ", other.type_name(), " has ", theirs.size(), " (",
               list_names(theirs), ")");
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const auto& [name, dst] = mine[i];
    const auto& [source_name, src] = theirs[i];
    TANDEM_CHECK(name == source_name, "copyparams: parameter ", i, " is '", name, "' here but '", source_name,
                 "' in the source");
    TANDEM_CHECK(src.defined() == dst.defined(), "copyparams: parameter '", name,
                 "' is initialised in only one of the two links");
    if (!dst.defined()) continue;
    TANDEM_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(), "copyparams: parameter '", name, "' is ",
                 dst.description(), " here but ", src.description(), " in the source");
    Tensor target = dst.data();  // shares the parameter's storage, so this writes in place
    target.copy_(src.data());
  }
  auto my_buffers = namedpersistents();
  auto their_buffers = const_cast<Link&>(other).namedpersistents();
  TANDEM_CHECK(my_buffers.size() == their_buffers.size(), "copyparams: ", my_buffers.size(),
               " persistent buffers here but ", their_buffers.size(), " in the source");
  for (std::size_t i = 0; i < my_buffers.size(); ++i) {
    TANDEM_CHECK(my_buffers[i].first == their_buffers[i].first, "copyparams: persistent '", my_buffers[i].first,
                 "' here but '", their_buffers[i].first, "' in the source");
    my_buffers[i].second->copy_(*their_buffers[i].second);
  }
}

void Link::set_train(bool train) {
  train_ = train;
  for (auto& entry : children_) entry.second->set_train(train);
}

std::size_t Link::param_index(const std::string& name) const {
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (params_[i].first == name) return i;
  TANDEM_FAIL(type_name(), ": no parameter '", name, "' (has: ", list_names(params_), ")");
}

Variable& Link::param(const std::string& name) {
  Variable& p = params_[param_index(name)].second;
  TANDEM_CHECK(p.defined(), type_name(), ": parameter '", name,
               "' is not initialised yet (its shape is fixed by the first forward pass)");
  return p;
}

const Variable& Link::param(const std::string& name) const { return const_cast<Link*>(this)->param(name); }

Tensor& Link::persistent(const std::string& name) {
  for (auto& entry : persistents_)
    if (entry.first == name) return entry.second;
  TANDEM_FAIL(type_name(), ": no persistent buffer '", name, "' (has: ", list_names(persistents_), ")");
}

Variable& Link::add_param(const std::string& name, const Tensor& value) {
  add_uninitialized_param(name);
  return initialize_param(name, value);
}

void Link::add_uninitialized_param(const std::string& name) {
  for (const auto& entry : params_)
    TANDEM_CHECK(entry.first != name, type_name(), ": parameter '", name, "' registered twice");
  params_.emplace_back(name, Variable());
}

Variable& Link::initialize_param(const std::string& name, const Tensor& value) {
  Variable& slot = params_[param_index(name)].second;
  // Initialisers draw on the host; a link already moved to a device keeps its parameters there.
  Tensor placed = value.to(device_);
  if (dtype_ && is_floating(placed.dtype()) && placed.dtype() != *dtype_) placed = placed.to(*dtype_);  // to(DType)
  slot = Variable(placed, true, name);
  slot.node()->parameter = true;
  return slot;
}

bool Link::param_initialized(const std::string& name) const { return params_[param_index(name)].second.defined(); }

void Link::check_loaded_shape(const std::string&, const Shape&) {}

Link* Link::param_owner(const std::string& path, std::string& name) {
  for (const auto& entry : params_) {
    if (entry.first != path) continue;
    name = path;
    return this;
  }
  for (auto& [child_name, child] : children_) {
    const std::string head = child_name + "/";
    if (path.compare(0, head.size(), head) != 0) continue;
    if (Link* owner = child->param_owner(path.substr(head.size()), name)) return owner;
  }
  return nullptr;
}

void Link::initialize_param_from(const std::string& path, const Tensor& value) {
  std::string name;
  Link* owner = param_owner(path, name);
  TANDEM_CHECK(owner != nullptr, type_name(), ": no parameter '", path, "' (has: ", list_names(namedparams(true)), ")");
  TANDEM_CHECK(!owner->param_initialized(name), type_name(), ": parameter '", path, "' is already initialised (",
               owner->params_[owner->param_index(name)].second.description(), ")");
  owner->check_loaded_shape(name, value.shape());
  Tensor placed = value.to(owner->device_);
  // A copy of its own: the parameter must not alias the caller's tensor (another model's, say).
  if (placed.shares_storage_with(value)) placed = placed.clone();
  owner->initialize_param(name, placed);
}

void Link::add_persistent(const std::string& name, const Tensor& value) {
  for (const auto& entry : persistents_)
    TANDEM_CHECK(entry.first != name, type_name(), ": persistent '", name, "' registered twice");
  persistents_.emplace_back(name, value.defined() ? value.to(device_) : value);
}

Link& Link::to(const Device& device) {
  for (auto& [name, param] : params_) {
    if (!param.defined()) continue;
    // Same Variable, new storage: optimizers and graphs holding the Variable see the move.
    param.set_data(param.data().to(device));
    if (param.grad().defined()) param.set_grad(param.grad().to(device));
  }
  for (auto& [name, value] : persistents_)
    if (value.defined()) value = value.to(device);
  for (auto& [name, child] : children_) child->to(device);
  device_ = device;
  return *this;
}

Link& Link::to(DType dtype) {
  TANDEM_CHECK(is_floating(dtype), type_name(), "::to(", dtype_name(dtype), "): parameters convert to a floating dtype");
  for (auto& [name, param] : params_)
    if (param.defined() && is_floating(param.data().dtype()) && param.data().dtype() != dtype)
      param.convert_data(dtype);
  for (auto& [name, value] : persistents_)
    if (value.defined() && is_floating(value.dtype())) value = value.to(dtype);
  for (auto& [name, child] : children_) child->to(dtype);
  dtype_ = dtype;
  return *this;
}

void Link::add_child(const std::string& name, LinkPtr child) {
  TANDEM_CHECK(child != nullptr, type_name(), ": child '", name, "' is null");
  TANDEM_CHECK(name.find('/') == std::string::npos && !name.empty(), type_name(), ": bad child name '", name, "'");
  for (const auto& entry : children_)
    TANDEM_CHECK(entry.first != name, type_name(), ": child '", name, "' registered twice");
  child->set_train(train_);
  if (child->device() != device_) child->to(device_);
  if (dtype_) child->to(*dtype_);
  children_.emplace_back(name, std::move(child));
}

void Link::replace_child(const std::string& name, LinkPtr link) {
  TANDEM_CHECK(link != nullptr, type_name(), ": replace_child: the replacement for '", name, "' is null");
  for (auto& entry : children_) {
    if (entry.first != name) continue;
    link->set_train(train_);
    if (link->device() != device_) link->to(device_);
    if (dtype_) link->to(*dtype_);
    entry.second = std::move(link);
    return;
  }
  TANDEM_FAIL(type_name(), ": replace_child: no child '", name, "' (has: ", list_names(children_), ")");
}

LinkPtr Chain::child(const std::string& name) const {
  for (const auto& entry : children())
    if (entry.first == name) return entry.second;
  TANDEM_FAIL(type_name(), ": no child '", name, "' (has: ", list_names(children()), ")");
}

const LinkPtr& ChainList::operator[](std::size_t i) const {
  TANDEM_CHECK(i < size(), "ChainList: index ", i, " out of range for ", size(), " links");
  return children()[i].second;
}

Variable ChainList::forward(const Variable& x) {
  Variable h = x;
  for (const auto& entry : children()) h = entry.second->forward(h);
  return h;
}

}  // namespace tandem
