// Variable: a tensor together with its place in the define-by-run graph.
//
// A Variable is a cheap handle (copies share the same variable). It holds its data, its
// gradient, and a VariableNode: the graph-side record that the functions which consume the
// variable keep alive. The graph therefore holds only what backward needs (shapes, creators
// and whatever tensors each function saved), never the data of intermediate variables that
// the user has dropped.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tandem {

class FunctionNode;
class OrderFreeSum;
struct VariableImpl;

// The graph-side half of a variable. Functions hold their inputs' nodes strongly and their
// outputs' nodes weakly, so a graph lives exactly as long as some output still refers to it.
struct VariableNode {
  std::weak_ptr<VariableImpl> variable;   // where leaf gradients are delivered
  std::shared_ptr<FunctionNode> creator;  // null for leaves
  bool requires_grad = false;
  // A link's parameter (Link::initialize_param). Deterministic mode adds each gradient term of a
  // parameter to its order-free sum as it comes (autograd/engine.cc), not summed first.
  bool parameter = false;
  Shape shape;
  DType dtype = DType::f32;
  Device device;
  std::string name;

  // Frees a deep graph iteratively: the default chain of destructors would recurse once per
  // node and overflow the stack on long graphs (an RNN unrolled over 100,000 steps).
  ~VariableNode();
};

struct BackwardOptions {
  // Keep the functions' saved tensors so that backward can run through the graph again.
  bool retain_graph = false;
  // Also store gradients in intermediate (non-leaf) variables that are still alive.
  bool retain_grad = false;
  // Tell the backward observers (autograd/backward_observer.h: a data-parallel optimizer's
  // overlap) about this backward. Off for a backward run inside another one (activation
  // checkpointing's recompute): the outer backward is the one they follow.
  bool notify_observers = true;
};

class Variable {
 public:
  Variable() = default;  // undefined
  explicit Variable(Tensor data, bool requires_grad = false, std::string name = "");

  bool defined() const { return impl_ != nullptr; }
  const Tensor& data() const;
  // Replaces the data in place (optimizers); the shape and dtype must not change.
  void set_data(const Tensor& data);
  // The data converted to another floating dtype, in place (Link::to(DType)); the gradient is
  // dropped. Only for leaves outside any graph being recorded: a graph that saved the old data
  // keeps it.
  void convert_data(DType dtype);
  const Tensor& grad() const;  // undefined until a backward pass reaches this variable
  void set_grad(const Tensor& grad);
  void cleargrad();  // grad becomes undefined

  bool requires_grad() const;
  void set_requires_grad(bool requires_grad);  // only on leaves
  const std::shared_ptr<FunctionNode>& creator() const;
  bool is_leaf() const { return creator() == nullptr; }
  const std::string& name() const;
  void set_name(const std::string& name);

  const Shape& shape() const { return data().shape(); }
  std::size_t dim() const { return data().dim(); }
  std::int64_t numel() const { return data().numel(); }
  DType dtype() const { return data().dtype(); }
  Device device() const { return data().device(); }
  std::string description() const;  // "f32[2, 3] 'name'"

  // Backpropagates from this variable. Without a seed it must be a scalar (seeded with 1) or
  // have size 0 (a comm delegate variable: the graph is walked with no seed so that the
  // communication functions behind it run their backward).
  void backward(const BackwardOptions& options = {}) const;
  void backward(const Tensor& seed, const BackwardOptions& options = {}) const;

  // Cuts the graph: unchain() makes this variable a leaf; unchain_backward() also cuts every
  // creator reachable from it, freeing the graph behind it.
  void unchain() const;
  void unchain_backward() const;

  const std::shared_ptr<VariableNode>& node() const;
  bool same_as(const Variable& other) const { return impl_ == other.impl_; }
  // Whether nothing but this handle can see the variable: no other handle to it, no function
  // that took it as an input, no other tensor on its data's storage (a view, a saved tensor).
  // A function handed such a variable as an rvalue may overwrite its data instead of allocating
  // (functions::relu of a temporary).
  bool exclusively_owned() const;

 private:
  friend class FunctionNode;
  friend OrderFreeSum& order_free_gradient(Variable& param);
  friend void round_order_free_gradient(Variable& param, double scale);
  explicit Variable(std::shared_ptr<VariableImpl> impl) : impl_(std::move(impl)) {}
  VariableImpl& impl() const;
  std::shared_ptr<VariableImpl> impl_;
};

struct VariableImpl {
  Tensor data;
  Tensor grad;
  std::shared_ptr<VariableNode> node;
  // Deterministic mode (core/deterministic.h): the order-free sum of the gradients delivered
  // since grad was last cleared, and the storage of the grad it was rounded into (a grad with
  // other storage was set by someone else: the sum starts again from it).
  std::shared_ptr<OrderFreeSum> grad_sum;
  std::weak_ptr<Storage> grad_sum_storage;
};

using Variables = std::vector<Variable>;

}  // namespace tandem
