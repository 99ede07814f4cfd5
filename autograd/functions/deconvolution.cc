#include "autograd/functions/deconvolution.h"

#include <algorithm>
#include <string>

#include "autograd/function_node.h"
#include "core/ops.h"
#include "core/ops/conv.h"

namespace tandem {
namespace functions {

namespace {

constexpr const char* kOp = "deconvolution_2d";

// "stride 2x1, pad 1x0, dilate 1x1, groups 1", for messages.
std::string describe(const Conv2DParams& p) {
  return "stride " + std::to_string(p.stride_y) + "x" + std::to_string(p.stride_x) + ", pad " +
         std::to_string(p.pad_y) + "x" + std::to_string(p.pad_x) + ", dilate " + std::to_string(p.dilate_y) + "x" +
         std::to_string(p.dilate_x) + ", groups " + std::to_string(p.groups);
}

// Everything the core convolution would reject, checked here first so that the error names
// deconvolution_2d and its own operands (x in the role of conv2d_grad_input's gy, the output in
// the role of its x) rather than the core op it is built on.
void check_operands(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DParams& p) {
  TANDEM_CHECK(x.dim() == 4, kOp, ": x must be 4-D [N, in_channels, H, W], got ", x.description());
  TANDEM_CHECK(W.dim() == 4, kOp, ": W must be 4-D [in_channels, out_channels / groups, kh, kw], got ", W.description(),
               " (x ", x.description(), ")");
  TANDEM_CHECK(is_floating(x.dtype()), kOp, ": needs floating operands (f32, f64, bf16 or f16), got x ",
               x.description(), " and W ", W.description());
  for (const Tensor* t : {&W, &b}) {
    if (!t->defined()) continue;
    TANDEM_CHECK(t->dtype() == x.dtype(), kOp, ": operands have different dtypes: x ", x.description(), " and ",
                 t == &W ? "W " : "b ", t->description());
    TANDEM_CHECK(t->device() == x.device(), kOp, ": operands are on different devices: x ", x.description(), " on ",
                 x.device(), " and ", t == &W ? "W " : "b ", t->description(), " on ", t->device());
  }
  TANDEM_CHECK(p.stride_y >= 1 && p.stride_x >= 1, kOp, ": stride must be >= 1, got ", p.stride_y, "x", p.stride_x);
  TANDEM_CHECK(p.pad_y >= 0 && p.pad_x >= 0, kOp, ": pad must be >= 0, got ", p.pad_y, "x", p.pad_x);
  TANDEM_CHECK(p.dilate_y >= 1 && p.dilate_x >= 1, kOp, ": dilate must be >= 1, got ", p.dilate_y, "x", p.dilate_x);
  TANDEM_CHECK(p.groups >= 1, kOp, ": groups must be >= 1, got ", p.groups);
  TANDEM_CHECK(W.size(2) >= 1 && W.size(3) >= 1, kOp, ": the kernel of W ", W.description(), " is empty");
  TANDEM_CHECK(x.size(1) == W.size(0), kOp, ": channel mismatch: x ", x.description(), " has ", x.size(1),
               " channels but W ", W.description(), " expects ", W.size(0),
               " (W is [in_channels, out_channels / groups, kh, kw])");
  TANDEM_CHECK(x.size(1) % p.groups == 0, kOp, ": groups=", p.groups, " does not divide the ", x.size(1),
               " input channels of x ", x.description(), " (W ", W.description(), ")");
  TANDEM_CHECK(x.size(2) >= 1 && x.size(3) >= 1, kOp, ": x ", x.description(),
               " has an empty image (no convolution gives one, so no deconvolution takes one)");
  if (b.defined()) {
    const std::int64_t out_c = W.size(1) * p.groups;
    TANDEM_CHECK(b.dim() == 1 && b.size(0) == out_c, kOp, ": b ", b.description(), " does not match the ", out_c,
                 " output channels of W ", W.description(), " (groups=", p.groups, ")");
  }
}

// The output extent along one axis (`axis` "out_h" or "out_w"): Chainer's get_deconv_outsize, or
// the requested one if it convolves back to the `in` elements of x. conv_outsize(out, kernel,
// stride, pad, false, dilate) == in exactly when stride (in - 1) <= out + 2 pad - extent <
// stride in, that is out in [lowest, lowest + stride - 1] with lowest the default size.
std::int64_t output_extent(std::int64_t in, std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                           std::int64_t dilate, std::optional<std::int64_t> requested, const char* axis,
                           const Tensor& x, const Tensor& W, const Conv2DParams& p) {
  const std::int64_t extent = dilate * (kernel - 1) + 1;
  const std::int64_t lowest = stride * (in - 1) + extent - 2 * pad;
  const std::int64_t highest = lowest + stride - 1;
  if (!requested) {
    TANDEM_CHECK(lowest >= 1, kOp, ": the output size ", axis, " = stride * (", in, " - 1) + ", extent,
                 " (the dilated kernel) - 2 * pad = ", lowest, " is not positive: x ", x.description(), ", W ",
                 W.description(), ", ", describe(p), " (too much padding)");
    return lowest;
  }
  const std::int64_t out = *requested;
  TANDEM_CHECK(out >= 1 && out >= lowest && out <= highest, kOp, ": ", axis, " = ", out,
               " does not convolve back to the ", in, " elements of x ", x.description(), " along that axis with W ",
               W.description(), " (", describe(p), "): ",
               highest < 1 ? std::string("no positive size does (too much padding)")
                           : axis + std::string(" must be in [") + std::to_string(std::max<std::int64_t>(lowest, 1)) +
                                 ", " + std::to_string(highest) + "]");
  return out;
}

// The adjoint of convolution_2d with respect to its input, on core's convolution: forward is
// conv2d_grad_input (x in the role of the output gradient), backward is conv2d and
// conv2d_grad_weight with the roles of input and output gradient swapped. Only what backward
// reads is kept: x when W needs a gradient and W when x needs one.
class Deconvolution2D : public FunctionNode {
 public:
  Deconvolution2D(const Conv2DParams& params, std::optional<std::int64_t> out_h, std::optional<std::int64_t> out_w)
      : params_(params), out_h_(out_h), out_w_(out_w) {}
  std::string name() const override { return kOp; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& x = in[0];
    const Tensor& W = in[1];
    const Tensor b = in.size() == 3 ? in[2] : Tensor();
    check_operands(x, W, b, params_);
    const std::int64_t out_c = W.size(1) * params_.groups;
    const Shape y_shape{x.size(0), out_c,
                        output_extent(x.size(2), W.size(2), params_.stride_y, params_.pad_y, params_.dilate_y, out_h_,
                                      "out_h", x, W, params_),
                        output_extent(x.size(3), W.size(3), params_.stride_x, params_.pad_x, params_.dilate_x, out_w_,
                                      "out_w", x, W, params_)};
    Tensor y = tandem::conv2d_grad_input(x, W, y_shape, params_);
    // The core op has no bias term (a gradient never needs one): one more pass over y.
    if (b.defined() && y.numel() > 0) tandem::add_(y, b.reshape({1, out_c, 1, 1}));
    w_shape_ = W.shape();
    save_for_backward({needs_input_grad(1) ? x : Tensor(), needs_input_grad(0) ? W : Tensor()});
    return {y};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& gy = grads[0];
    std::vector<Tensor> out(inputs().size());
    if (needs_input_grad(0)) out[0] = tandem::conv2d(gy, saved()[1], Tensor(), params_);
    if (needs_input_grad(1)) out[1] = tandem::conv2d_grad_weight(gy, saved()[0], w_shape_, params_);
    if (out.size() == 3 && needs_input_grad(2)) out[2] = tandem::sum(gy, {0, 2, 3});
    return out;
  }

 private:
  Conv2DParams params_;
  std::optional<std::int64_t> out_h_, out_w_;
  Shape w_shape_;
};

}  // namespace

Variable deconvolution_2d(const Variable& x, const Variable& W, const Variable& b, const Conv2DOptions& options,
                          std::optional<std::int64_t> out_h, std::optional<std::int64_t> out_w) {
  TANDEM_CHECK(x.defined() && W.defined(), kOp, ": x and W must be defined variables");
  if (b.defined()) return call<Deconvolution2D>({x, W, b}, options, out_h, out_w)[0];
  return call<Deconvolution2D>({x, W}, options, out_h, out_w)[0];
}

}  // namespace functions
}  // namespace tandem
