#include "autograd/functions/array.h"

#include <numeric>

#include "autograd/function_node.h"
#include "core/ops.h"

namespace tandem {
namespace functions {

namespace {

class Reshape : public FunctionNode {
 public:
  explicit Reshape(Shape shape) : shape_(std::move(shape)) {}
  std::string name() const override { return "reshape"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    x_shape_ = in[0].shape();
    return {in[0].reshape(shape_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override { return {gy[0].reshape(x_shape_)}; }

 private:
  Shape shape_, x_shape_;
};

class Transpose : public FunctionNode {
 public:
  explicit Transpose(std::vector<std::int64_t> axes) : axes_(std::move(axes)) {}
  std::string name() const override { return "transpose"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    if (axes_.empty()) {
      for (std::size_t d = in[0].dim(); d-- > 0;) axes_.push_back(static_cast<std::int64_t>(d));
    }
    return {permute(in[0], axes_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    std::vector<std::int64_t> inverse(axes_.size());
    for (std::size_t d = 0; d < axes_.size(); ++d)
      inverse[normalize_axis(axes_[d], axes_.size(), "transpose")] = static_cast<std::int64_t>(d);
    return {permute(gy[0], inverse)};
  }

 private:
  std::vector<std::int64_t> axes_;
};

class BroadcastTo : public FunctionNode {
 public:
  explicit BroadcastTo(Shape shape) : shape_(std::move(shape)) {}
  std::string name() const override { return "broadcast_to"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    x_shape_ = in[0].shape();
    return {tandem::broadcast_to(in[0], shape_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override { return {sum_to(gy[0], x_shape_)}; }

 private:
  Shape shape_, x_shape_;
};

class Concat : public FunctionNode {
 public:
  explicit Concat(std::int64_t axis) : axis_(axis) {}
  std::string name() const override { return "concat"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    Tensor y = tandem::concat(in, axis_);
    axis_ = normalize_axis(axis_, y.dim(), "concat");
    std::int64_t position = 0;
    for (std::size_t i = 0; i + 1 < in.size(); ++i) cuts_.push_back(position += in[i].size(axis_));
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override { return split(gy[0], cuts_, axis_); }

 private:
  std::int64_t axis_;
  std::vector<std::int64_t> cuts_;
};

class Stack : public FunctionNode {
 public:
  explicit Stack(std::int64_t axis) : axis_(axis) {}
  std::string name() const override { return "stack"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    Tensor y = tandem::stack(in, axis_);
    axis_ = normalize_axis(axis_, y.dim(), "stack");
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    std::vector<Tensor> pieces = split(gy[0], gy[0].size(axis_), axis_);
    for (Tensor& piece : pieces) piece = tandem::squeeze(piece, axis_);
    return pieces;
  }

 private:
  std::int64_t axis_;
};

class SplitAxis : public FunctionNode {
 public:
  SplitAxis(std::vector<std::int64_t> indices, std::int64_t sections, std::int64_t axis)
      : indices_(std::move(indices)), sections_(sections), axis_(axis) {}
  std::string name() const override { return "split_axis"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    std::vector<Tensor> pieces = sections_ > 0 ? split(in[0], sections_, axis_) : split(in[0], indices_, axis_);
    axis_ = normalize_axis(axis_, in[0].dim(), "split_axis");
    return pieces;
  }
  // Missing output gradients arrive zero-filled, so concatenating them restores the input.
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override { return {tandem::concat(gy, axis_)}; }

 private:
  std::vector<std::int64_t> indices_;
  std::int64_t sections_;
  std::int64_t axis_;
};

class GetItem : public FunctionNode {
 public:
  explicit GetItem(IndexList indices) : indices_(std::move(indices)) {}
  std::string name() const override { return "get_item"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    x_shape_ = in[0].shape();
    return {index(in[0], indices_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    // Basic indexing selects each element at most once, so assignment scatters exactly.
    Tensor gx = zeros(x_shape_, gy[0].dtype(), gy[0].device());
    index_put_(gx, indices_, gy[0]);
    return {gx};
  }

 private:
  IndexList indices_;
  Shape x_shape_;
};

class Cast : public FunctionNode {
 public:
  explicit Cast(DType dtype) : dtype_(dtype) {}
  std::string name() const override { return "cast"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    x_dtype_ = in[0].dtype();
    return {in[0].to(dtype_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override { return {gy[0].to(x_dtype_)}; }

 private:
  DType dtype_, x_dtype_ = DType::f32;
};

}  // namespace

Variable reshape(const Variable& x, const Shape& shape) { return call<Reshape>({x}, shape)[0]; }

Variable expand_dims(const Variable& x, std::int64_t axis) {
  return reshape(x, tandem::expand_dims(x.data(), axis).shape());
}

Variable squeeze(const Variable& x, std::int64_t axis) { return reshape(x, tandem::squeeze(x.data(), axis).shape()); }

Variable transpose(const Variable& x, const std::vector<std::int64_t>& axes) { return call<Transpose>({x}, axes)[0]; }
Variable broadcast_to(const Variable& x, const Shape& shape) { return call<BroadcastTo>({x}, shape)[0]; }

Variable concat(const Variables& xs, std::int64_t axis) {
  TANDEM_CHECK(!xs.empty(), "concat: needs at least one variable");
  return call<Concat>(xs, axis)[0];
}

Variable stack(const Variables& xs, std::int64_t axis) {
  TANDEM_CHECK(!xs.empty(), "stack: needs at least one variable");
  return call<Stack>(xs, axis)[0];
}

Variables split_axis(const Variable& x, std::int64_t sections, std::int64_t axis) {
  TANDEM_CHECK(sections > 0, "split_axis: sections must be positive, got ", sections);
  return call<SplitAxis>({x}, std::vector<std::int64_t>{}, sections, axis);
}

Variables split_axis(const Variable& x, const std::vector<std::int64_t>& indices, std::int64_t axis) {
  return call<SplitAxis>({x}, indices, 0, axis);
}

Variable get_item(const Variable& x, const IndexList& indices) { return call<GetItem>({x}, indices)[0]; }

Variable cast(const Variable& x, DType dtype) {
  TANDEM_CHECK(x.defined(), "cast: the input is an undefined variable");
  if (x.dtype() == dtype) return x;
  TANDEM_CHECK(!x.requires_grad() || is_floating(dtype), "cast: ", x.data().description(),
               " requires a gradient, which a cast to ", dtype_name(dtype), " cannot carry back");
  return call<Cast>({x}, dtype)[0];
}

}  // namespace functions
}  // namespace tandem
