#include "autograd/variable.h"

#include "autograd/engine.h"
#include "autograd/function_node.h"

namespace tandem {

VariableNode::~VariableNode() {
  // Take over the creator and walk backwards, detaching each node we hold the last reference
  // to from its inputs before letting it go; every destructor then runs with nothing left to
  // destroy recursively.
  // The list of functions still to detach stays empty (no allocation) where the graph behind
  // this node is one function deep or still held elsewhere, which is most nodes.
  std::shared_ptr<FunctionNode> function = std::move(creator);
  std::vector<std::shared_ptr<FunctionNode>> pending;
  while (function) {
    if (function.use_count() == 1) {  // else still referenced elsewhere
      for (std::shared_ptr<VariableNode>& input : function->inputs_) {
        if (input && input.use_count() == 1 && input->creator) pending.push_back(std::move(input->creator));
      }
      function->inputs_.clear();
    }
    function.reset();
    if (pending.empty()) break;
    function = std::move(pending.back());
    pending.pop_back();
  }
}

Variable::Variable(Tensor data, bool requires_grad, std::string name) : impl_(std::make_shared<VariableImpl>()) {
  TANDEM_CHECK(data.defined(), "Variable: cannot wrap an undefined tensor");
  TANDEM_CHECK(!requires_grad || is_floating(data.dtype()), "Variable: only floating variables can require a gradient, got ",
               data.description());
  impl_->data = std::move(data);
  impl_->node = std::make_shared<VariableNode>();
  VariableNode& node = *impl_->node;
  node.variable = impl_;
  node.requires_grad = requires_grad;
  node.shape = impl_->data.shape();
  node.dtype = impl_->data.dtype();
  node.device = impl_->data.device();
  node.name = std::move(name);
}

VariableImpl& Variable::impl() const {
  TANDEM_CHECK(impl_ != nullptr, "Variable: the variable is undefined");
  return *impl_;
}

const Tensor& Variable::data() const { return impl().data; }

void Variable::set_data(const Tensor& data) {
  VariableImpl& v = impl();
  TANDEM_CHECK(data.defined() && data.shape() == v.data.shape() && data.dtype() == v.data.dtype(),
               "Variable::set_data: ", description(), " cannot take ", data.description());
  v.data = data;
  v.node->device = data.device();
}

void Variable::convert_data(DType dtype) {
  VariableImpl& v = impl();
  TANDEM_CHECK(is_floating(dtype) && v.data.defined() && is_floating(v.data.dtype()), "Variable::convert_data: ",
               description(), " to ", dtype_name(dtype), ": both dtypes must be floating");
  v.data = v.data.to(dtype);
  v.node->dtype = dtype;  // what backward checks a gradient for this leaf against
  v.grad = Tensor();
}

const Tensor& Variable::grad() const { return impl().grad; }

void Variable::set_grad(const Tensor& grad) {
  VariableImpl& v = impl();
  // A 16-bit variable's gradient may be held in f32 (backward then accumulates into it in f32).
  const bool dtype_fits =
      grad.defined() && (grad.dtype() == v.data.dtype() || (is_half(v.data.dtype()) && grad.dtype() == DType::f32));
  TANDEM_CHECK(!grad.defined() || (grad.shape() == v.data.shape() && dtype_fits), "Variable::set_grad: gradient ",
               grad.description(), " does not match ", description());
  TANDEM_CHECK(!grad.defined() || grad.device() == v.data.device(), "Variable::set_grad: gradient on ",
               grad.device(), " for ", description(), " on ", v.data.device());
  v.grad = grad;
}

void Variable::cleargrad() { impl().grad = Tensor(); }

bool Variable::requires_grad() const { return impl().node->requires_grad; }

void Variable::set_requires_grad(bool requires_grad) {
  TANDEM_CHECK(is_leaf(), "Variable::set_requires_grad: ", description(),
               " is the output of a function; only leaves can change it");
  TANDEM_CHECK(!requires_grad || is_floating(dtype()), "Variable::set_requires_grad: only floating variables can "
               "require a gradient, got ", description());
  impl().node->requires_grad = requires_grad;
}

const std::shared_ptr<FunctionNode>& Variable::creator() const { return impl().node->creator; }
const std::string& Variable::name() const { return impl().node->name; }
void Variable::set_name(const std::string& name) { impl().node->name = name; }
const std::shared_ptr<VariableNode>& Variable::node() const { return impl().node; }

bool Variable::exclusively_owned() const {
  // The creator holds its outputs' nodes weakly; a consumer holds its inputs' nodes.
  return impl_ && impl_.use_count() == 1 && impl_->node.use_count() == 1 && impl_->data.defined() &&
         impl_->data.storage().use_count() == 1;
}

std::string Variable::description() const {
  if (!defined()) return "undefined variable";
  std::string out = data().description();
  if (!name().empty()) out += " '" + name() + "'";
  return out;
}

void Variable::backward(const BackwardOptions& options) const { tandem::backward({*this}, {Tensor()}, options); }

void Variable::backward(const Tensor& seed, const BackwardOptions& options) const {
  tandem::backward({*this}, {seed}, options);
}

void Variable::unchain() const { impl().node->creator.reset(); }

void Variable::unchain_backward() const {
  // Cutting every creator reachable from here; iterative for the same reason as ~VariableNode.
  std::vector<std::shared_ptr<VariableNode>> pending{impl().node};
  while (!pending.empty()) {
    std::shared_ptr<VariableNode> node = std::move(pending.back());
    pending.pop_back();
    std::shared_ptr<FunctionNode> function = std::move(node->creator);
    if (!function) continue;
    for (const std::shared_ptr<VariableNode>& input : function->inputs()) pending.push_back(input);
  }
}

}  // namespace tandem
