// Links: the building blocks of models, with Chainer's names and semantics.
//
// A Link owns named parameters (Variables that require a gradient) and persistent buffers
// (tensors saved with the model but not trained, e.g. batch-norm running statistics).
// A Chain nests named child links and a ChainList an ordered list of them; parameter names
// are paths: "predictor/l1/W". Parameters may be declared before their shape is known
// (Linear(-1, 100)) and are initialised at the first forward pass, or by loading saved values
// (load_npz, Trainer::load_snapshot), which take the shapes from the file.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"

namespace tandem {

class Link;
using LinkPtr = std::shared_ptr<Link>;

class Link {
 public:
  Link() = default;
  virtual ~Link() = default;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  // The link's kind, for errors ("Linear", "Classifier").
  virtual std::string type_name() const { return "Link"; }

  // A single-input forward, for links that have one (Linear, Convolution2D, user chains).
  virtual Variable forward(const Variable& x);
  Variable operator()(const Variable& x) { return forward(x); }
  // Any number of inputs and outputs, as Chainer's link(*args): a model that is its own loss
  // takes (x, t) (Classifier); a MultiNodeChainList component may receive from several ranks or
  // send a pair; a rank of a model-parallel model whose input comes from another rank takes
  // none. The default passes a single input to forward(x). The updater and the evaluator call
  // it with the fields of each batch.
  virtual Variables forward_many(const Variables& xs);
  // forward_many with two inputs, or none, that must give one output: classifier->forward(x, t)
  // is the loss; model->forward() on a rank without input is its output or delegate variable.
  Variable forward(const Variable& x, const Variable& t);
  Variable operator()(const Variable& x, const Variable& t) { return forward(x, t); }
  Variable forward();

  // What the last forward reports, by name, as Chainer's reporter: Classifier gives "loss" and
  // "accuracy". The updater reports it under "main/", the evaluator under "validation/main/".
  // The default reports nothing.
  virtual std::map<std::string, double> observation() const { return {}; }

  // ---- parameters and persistent buffers of this link and all its descendants ----
  // (name, parameter) pairs in registration order, children after their parent's own, with
  // path names. Parameters not yet initialised (lazy shapes) are listed as undefined.
  std::vector<std::pair<std::string, Variable>> namedparams(bool include_uninitialized = false) const;
  std::vector<Variable> params() const;  // initialised parameters only
  std::vector<std::pair<std::string, Tensor*>> namedpersistents();
  std::int64_t count_params() const;  // total number of elements of the initialised parameters
  void cleargrads();
  // Copies parameter and persistent values from a link of the same structure.
  void copyparams(const Link& other);
  // Creates the parameter at `path` ("predictor/l1/W"), declared without a shape (Linear(-1, n))
  // and not initialised yet, from a saved value: its shape and dtype, on the owning link's
  // device, holding a copy of the value. load_npz and Trainer::load_snapshot fill lazily shaped
  // parameters this way, so a model loads without a forward pass (as Chainer's serializers do).
  // The owning link checks the shape first (Linear: [out_size, in_size], which fixes in_size).
  // Errors: no such parameter, one already initialised, or a shape the link cannot take.
  void initialize_param_from(const std::string& path, const Tensor& value);

  // Moves every parameter (its value and gradient) and every persistent buffer of this link and
  // its descendants to `device`, as Chainer's to_device; parameters initialised later (lazy
  // shapes) are created there too. Returns *this. Optimizer state follows the parameters on
  // the next update.
  Link& to(const Device& device);
  // Converts every floating parameter and persistent buffer of this link and its descendants to
  // `dtype` (f32, f64, bf16 or f16; PyTorch's model.to(torch.bfloat16)), rounding once; the
  // gradients are dropped. Before the optimizer's setup: an optimizer keeps f32 master copies of
  // 16-bit parameters (layers/optimizers/optimizer.h). Parameters initialised later (lazy shapes)
  // and links added later are converted too. Returns *this.
  Link& to(DType dtype);
  // The device the link's parameters live on (cpu until to() moves them).
  const Device& device() const { return device_; }

  // Train/test mode of this link and its children (read by links such as BatchNormalization).
  void set_train(bool train);
  bool is_train() const { return train_; }

  // The named children (empty for plain links).
  const std::vector<std::pair<std::string, LinkPtr>>& children() const { return children_; }
  // Puts `link` where the child `name` was: same name, same place in paths and in the order of
  // namedparams, moved to this link's device and train mode. For converters that swap one kind
  // of layer for another (create_mnbn_model). A subclass that keeps its own pointer to the old
  // child still calls that one: the converter must take care of it. Errors: no such child.
  void replace_child(const std::string& name, LinkPtr link);

  // The parameter or buffer of this link itself; errors name the link and list what exists.
  Variable& param(const std::string& name);
  const Variable& param(const std::string& name) const;
  Tensor& persistent(const std::string& name);

 protected:
  // Registers a parameter with its initial value (requires_grad is set).
  Variable& add_param(const std::string& name, const Tensor& value);
  // Registers a parameter whose shape is fixed later by initialize_param.
  void add_uninitialized_param(const std::string& name);
  Variable& initialize_param(const std::string& name, const Tensor& value);
  bool param_initialized(const std::string& name) const;
  // Checks a saved shape for this link's uninitialised parameter `name` before
  // initialize_param_from creates it, and records what the shape fixes (Linear: in_size). The
  // default accepts any shape.
  virtual void check_loaded_shape(const std::string& name, const Shape& shape);
  void add_persistent(const std::string& name, const Tensor& value);
  void add_child(const std::string& name, LinkPtr child);

 private:
  void collect_params(const std::string& prefix, bool include_uninitialized,
                      std::vector<std::pair<std::string, Variable>>& out) const;
  void collect_persistents(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out);
  std::size_t param_index(const std::string& name) const;
  // The link that owns the parameter at `path` and its name there, or null.
  Link* param_owner(const std::string& path, std::string& name);

  std::vector<std::pair<std::string, Variable>> params_;
  std::vector<std::pair<std::string, Tensor>> persistents_;
  Device device_ = Device::cpu();
  std::optional<DType> dtype_;  // set by to(DType): what later parameters are created in
  std::vector<std::pair<std::string, LinkPtr>> children_;
  bool train_ = true;
};

// A link with named children: `add_link("l1", std::make_shared<Linear>(-1, 100))`.
class Chain : public Link {
 public:
  std::string type_name() const override { return "Chain"; }
  template <typename T>
  std::shared_ptr<T> add_link(const std::string& name, std::shared_ptr<T> link) {
    add_child(name, link);
    return link;
  }
  // The child of that name, cast to T; errors if absent or of another type.
  template <typename T = Link>
  std::shared_ptr<T> get(const std::string& name) const {
    auto link = std::dynamic_pointer_cast<T>(child(name));
    TANDEM_CHECK(link != nullptr, type_name(), ": child '", name, "' is a ", child(name)->type_name(),
                 ", not the type requested");
    return link;
  }
  LinkPtr child(const std::string& name) const;
};

// An ordered list of links, named "0", "1", ... in parameter paths.
class ChainList : public Link {
 public:
  std::string type_name() const override { return "ChainList"; }
  template <typename T>
  std::shared_ptr<T> append(std::shared_ptr<T> link) {
    add_child(std::to_string(children().size()), link);
    return link;
  }
  std::size_t size() const { return children().size(); }
  const LinkPtr& operator[](std::size_t i) const;
  // Feeds x through every child's single-input forward in order.
  Variable forward(const Variable& x) override;
};

}  // namespace tandem
