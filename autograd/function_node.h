// FunctionNode: one application of a differentiable function in the graph.
//
// A function computes its outputs eagerly in forward(), saves only the tensors its backward
// reads (save_for_backward), and in backward() maps one gradient per output to one gradient
// per input. An undefined Tensor means "no gradient" in both directions.
//
// Use: `auto ys = std::make_shared<MyFunction>(args)->apply({x, w});` — apply() runs
// forward, and when gradients are being recorded links the outputs to this node.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "core/call_site.h"
#include "core/tensor.h"

namespace tandem {

// What a graph dump (autograd/graph_dump.h) shows of a function beyond its name(). Ordinary
// functions have nothing to add. Communication functions say whom they exchange with, so that
// one rank's dump shows where its messages go and the merged dump of a job (comm/graph) can join
// the ranks' graphs: each send to its recv, each collective across its ranks.
struct FunctionDescription {
  enum class Exchange { none, send, recv, collective };
  Exchange exchange = Exchange::none;
  int peer = -1;                       // send: the destination; recv: the source; a collective with a root: the root
  int tag = -1;                        // send and recv
  int rank = -1, size = 0;             // this rank in the communicator, and the communicator's size
  const void* communicator = nullptr;  // identity only: messages are matched within one
  std::string detail;                  // anything else worth a line in the dump
};

namespace autograd_detail {
// While one is alive on a thread, every function applied there reports the leaves requiring a
// gradient that it reads (once each): what an activation-checkpointed region reads.
class LeafRecorder {
 public:
  LeafRecorder();
  ~LeafRecorder();
  LeafRecorder(const LeafRecorder&) = delete;
  LeafRecorder& operator=(const LeafRecorder&) = delete;
  std::vector<std::shared_ptr<VariableNode>> leaves() const { return leaves_; }
  void add(const std::shared_ptr<VariableNode>& leaf);

 private:
  LeafRecorder* previous_;
  std::vector<std::shared_ptr<VariableNode>> leaves_;
};
LeafRecorder* active_leaf_recorder();
}  // namespace autograd_detail

class FunctionNode : public std::enable_shared_from_this<FunctionNode> {
 public:
  virtual ~FunctionNode() = default;

  // The function's name, for errors ("linear", "softmax_cross_entropy").
  virtual std::string name() const = 0;
  // Computes the outputs from the inputs' data.
  virtual std::vector<Tensor> forward(const std::vector<Tensor>& inputs) = 0;
  // Gradients of the inputs from gradients of the outputs; one entry per input (undefined for
  // inputs that get none). grad_outputs has one entry per output: zeros where no gradient
  // arrived, unless zero_fill_grad_outputs() is false, in which case those stay undefined.
  virtual std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) = 0;

  // Normal functions whose outputs received no gradient at all are skipped by backward.
  // Communication functions return true: their backward is the peer's half of a message
  // exchange and must run whenever the node is reachable, gradient or not.
  virtual bool always_run_backward() const { return false; }
  // Normal functions are recorded only when an input requires a gradient. Communication
  // functions are recorded whenever gradients are recorded at all: a recv has no input yet
  // must send the gradient of its output back, and both ranks must agree on that.
  virtual bool always_record() const { return false; }
  virtual bool zero_fill_grad_outputs() const { return true; }
  // For graph dumps; see FunctionDescription.
  virtual FunctionDescription describe() const { return {}; }
  // Takes a ReLU of its only output into this function, after forward: functions::relu was
  // handed that output, `y`, by a caller that keeps no other handle to it. A function that can
  // (linear, convolution_2d) masks its output gradient by y > 0 in backward from then on, keeps y
  // for that, and returns true; relu then overwrites y in place and returns the same variable.
  virtual bool absorb_relu(const Tensor& y) {
    (void)y;
    return false;
  }

  Variables apply(const Variables& inputs);

  // Position on the tape: strictly increasing in the order nodes were created.
  std::int64_t sequence_number() const { return sequence_number_; }
  const std::vector<std::shared_ptr<VariableNode>>& inputs() const { return inputs_; }
  // The output nodes still alive (null entries for outputs already destroyed).
  std::vector<std::shared_ptr<VariableNode>> outputs() const;
  std::size_t num_outputs() const { return outputs_.size(); }
  // Whether input i needs a gradient; backward may leave the others undefined (and skip work).
  bool needs_input_grad(std::size_t i) const { return i < needs_input_grad_.size() && needs_input_grad_[i]; }
  // True while apply() records this node (forward can skip saving tensors otherwise).
  bool recording() const { return recording_; }

  // Frees the saved tensors; a later backward through this node is an error.
  void release_saved();
  bool released() const { return released_; }
  // Throws the "graph already freed" error if release_saved() has run.
  void check_not_released() const;

  // Leaves (parameters) this function's backward gives gradients to without taking them as
  // inputs: those an activation-checkpointed region reads (autograd/checkpoint.h), whose backward
  // recomputes the region and delivers their gradients itself. The engine counts them as uses,
  // so that a data-parallel optimizer hears of such a leaf's final gradient only after this
  // function's backward has added its share.
  const std::vector<std::shared_ptr<VariableNode>>& hidden_leaves() const { return hidden_leaves_; }

 protected:
  void set_hidden_leaves(std::vector<std::shared_ptr<VariableNode>> leaves) { hidden_leaves_ = std::move(leaves); }
  void save_for_backward(std::vector<Tensor> tensors);
  // One more tensor after those saved so far (an output a function keeps once it knows it needs it).
  void save_also(Tensor tensor) {
    if (recording_) saved_.push_back(std::move(tensor));
  }
  // The saved tensors; throws a clear error once they have been released.
  const std::vector<Tensor>& saved() const;
  // True while backward runs under BackwardOptions::retain_graph: the saved tensors serve a
  // later backward too, so backward must not consume them (e.g. cuDNN's RNN reserve space,
  // which its backward overwrites).
  bool graph_retained() const { return graph_retained_; }
  // Gradient accumulation fusion (as Megatron-LM's for linear layers): when input i is a leaf
  // (a parameter) whose gradient already holds earlier contributions (an earlier microbatch or
  // backward call) in memory nothing else shares, backward may add its contribution straight
  // into that gradient (a GEMM with beta = 1) and return an undefined gradient for the input:
  // the engine would only add it there, after a temporary and another pass over memory. Null
  // otherwise (and always under check_finite, which must see every gradient).
  Tensor* leaf_gradient_to_accumulate(std::size_t i) const;

 private:
  friend struct VariableNode;
  friend class BackwardEngine;

  std::int64_t sequence_number_ = -1;
  std::vector<std::shared_ptr<VariableNode>> inputs_;
  std::vector<std::shared_ptr<VariableNode>> hidden_leaves_;
  std::vector<std::weak_ptr<VariableNode>> outputs_;
  // Shape, dtype and device of each output, to zero-fill missing gradients (one vector, not
  // three: every recorded function allocates it).
  struct OutputMeta {
    Shape shape;
    DType dtype;
    Device device;
  };
  std::vector<OutputMeta> output_meta_;
  // The user's line that applied this function, when a CallSiteScope was active (the
  // communication functions open one): its backward runs under the same site, so that the
  // flight recorder names the user's line for the gradients' messages too.
  CallSite site_;
  std::vector<bool> needs_input_grad_;
  std::vector<Tensor> saved_;
  bool recording_ = false;
  bool released_ = false;
  bool graph_retained_ = false;
};

// Creates a node of type F and applies it: `call<ReluFunction>({x})`.
template <typename F, typename... Args>
Variables call(const Variables& inputs, Args&&... args) {
  return std::make_shared<F>(std::forward<Args>(args)...)->apply(inputs);
}

}  // namespace tandem
