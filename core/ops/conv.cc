#include "core/ops/conv.h"

#include <algorithm>
#include <string>

#include "core/backend.h"
#include "core/ops/checks.h"
#include "core/ops/half_compute.h"

namespace tandem {

namespace {

void check_window_params(std::int64_t kernel_h, std::int64_t kernel_w, const Conv2DParams& p, const char* op) {
  TANDEM_CHECK(kernel_h >= 1 && kernel_w >= 1, op, ": kernel size must be >= 1, got ", kernel_h, "x", kernel_w);
  TANDEM_CHECK(p.stride_y >= 1 && p.stride_x >= 1, op, ": stride must be >= 1, got ", p.stride_y, "x", p.stride_x);
  TANDEM_CHECK(p.pad_y >= 0 && p.pad_x >= 0, op, ": pad must be >= 0, got ", p.pad_y, "x", p.pad_x);
  TANDEM_CHECK(p.dilate_y >= 1 && p.dilate_x >= 1, op, ": dilate must be >= 1, got ", p.dilate_y, "x", p.dilate_x);
}

// What the conv2d operations validate and pass on: the geometry (for the whole batch), the channels and groups.
struct ConvPlan {
  Conv2DGeometry g;
  std::int64_t N = 0, C = 0, O = 0, G = 1;
};

// Validates W against the input shape (described by x_desc in messages) and plans the GEMMs.
ConvPlan plan_conv(const Shape& x_shape, const std::string& x_desc, const Shape& w_shape, const std::string& w_desc,
                   const Conv2DParams& p, const char* op) {
  TANDEM_CHECK(x_shape.size() == 4, op, ": x must be 4-D [N, C, H, W], got ", x_desc);
  TANDEM_CHECK(w_shape.size() == 4, op, ": W must be 4-D [out_channels, in_channels / groups, kh, kw], got ",
               w_desc);
  TANDEM_CHECK(p.groups >= 1, op, ": groups must be >= 1, got ", p.groups);
  ConvPlan plan;
  plan.N = x_shape[0];
  plan.C = x_shape[1];
  plan.O = w_shape[0];
  plan.G = p.groups;
  TANDEM_CHECK(plan.C % plan.G == 0, op, ": groups=", plan.G, " does not divide the ", plan.C,
               " input channels of x ", x_desc, " (W ", w_desc, ")");
  TANDEM_CHECK(plan.O % plan.G == 0, op, ": groups=", plan.G, " does not divide the ", plan.O,
               " output channels of W ", w_desc, " (x ", x_desc, ")");
  TANDEM_CHECK(w_shape[1] * plan.G == plan.C, op, ": channel mismatch: x ", x_desc, " has ", plan.C,
               " channels but W ", w_desc, " expects ", w_shape[1] * plan.G, " (", w_shape[1],
               " per group, groups=", plan.G, ")");
  const std::int64_t kh = w_shape[2], kw = w_shape[3];
  plan.g = conv2d_geometry(x_shape, kh, kw, p, false, op);
  return plan;
}

void check_conv_operands(const Tensor& x, const Tensor& W, const Tensor& b, const char* op) {
  if (!is_half(x.dtype())) ops_detail::check_floating(x, op);  // 16-bit: runs_16bit_convolutions said yes
  if (b.defined()) ops_detail::check_compatible({&x, &W, &b}, op);
  else ops_detail::check_compatible({&x, &W}, op);
}

// Whether the backend convolves this 16-bit operand itself for the geometry (else the op widens).
bool native_16bit(const Tensor& t, const Shape& x_shape, const Shape& w_shape, const Conv2DParams& params,
                  const char* op) {
  const ConvPlan plan = plan_conv(x_shape, shape_str(x_shape), w_shape, shape_str(w_shape), params, op);
  return backend_for(t.device(), op).runs_16bit_convolutions(t.dtype(), plan.g, plan.O, plan.G);
}

void check_gy(const Tensor& gy, const ConvPlan& plan, const Shape& x_shape, const std::string& w_desc,
              const char* op) {
  const Shape expected{plan.N, plan.O, plan.g.out_h, plan.g.out_w};
  TANDEM_CHECK(gy.shape() == expected, op, ": gy ", gy.description(), " does not match the output shape ",
               expected, " of x ", x_shape, " convolved with W ", w_desc);
}

Conv2DGeometry pool_geometry(const Shape& x_shape, const std::string& x_desc, const Pool2DParams& p, const char* op) {
  TANDEM_CHECK(x_shape.size() == 4, op, ": x must be 4-D [N, C, H, W], got ", x_desc);
  Conv2DParams cp;
  cp.stride_y = p.stride_y;
  cp.stride_x = p.stride_x;
  cp.pad_y = p.pad_y;
  cp.pad_x = p.pad_x;
  return conv2d_geometry(x_shape, p.kernel_h, p.kernel_w, cp, p.cover_all, op);
}

}  // namespace

std::int64_t conv_outsize(std::int64_t size, std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                          bool cover_all, std::int64_t dilate) {
  TANDEM_CHECK(size >= 0 && kernel >= 1 && stride >= 1 && pad >= 0 && dilate >= 1,
               "conv_outsize: needs size >= 0, kernel >= 1, stride >= 1, pad >= 0, dilate >= 1; got size ", size,
               ", kernel ", kernel, ", stride ", stride, ", pad ", pad, ", dilate ", dilate);
  const std::int64_t extent = dilate * (kernel - 1) + 1, padded = size + 2 * pad;
  TANDEM_CHECK(extent <= padded, "conv_outsize: the kernel (extent ", extent, ") is larger than the padded input (",
               size, " + 2 * ", pad, " = ", padded, ")");
  return cover_all ? (padded - extent + stride - 1) / stride + 1 : (padded - extent) / stride + 1;
}

Conv2DGeometry conv2d_geometry(const Shape& x_shape, std::int64_t kernel_h, std::int64_t kernel_w,
                               const Conv2DParams& p, bool cover_all, const char* op) {
  TANDEM_CHECK(x_shape.size() == 4, op, ": the input must be 4-D [N, C, H, W], got ", x_shape);
  check_window_params(kernel_h, kernel_w, p, op);
  Conv2DGeometry g;
  g.batch = x_shape[0];
  g.channels = x_shape[1];
  g.height = x_shape[2];
  g.width = x_shape[3];
  g.kernel_h = kernel_h;
  g.kernel_w = kernel_w;
  g.stride_y = p.stride_y;
  g.stride_x = p.stride_x;
  g.pad_y = p.pad_y;
  g.pad_x = p.pad_x;
  g.dilate_y = p.dilate_y;
  g.dilate_x = p.dilate_x;
  const std::int64_t extent_h = p.dilate_y * (kernel_h - 1) + 1, extent_w = p.dilate_x * (kernel_w - 1) + 1;
  const std::int64_t padded_h = g.height + 2 * p.pad_y, padded_w = g.width + 2 * p.pad_x;
  TANDEM_CHECK(extent_h <= padded_h && extent_w <= padded_w, op, ": the ", kernel_h, "x", kernel_w, " kernel",
               (p.dilate_y > 1 || p.dilate_x > 1 ? " (dilated to " + std::to_string(extent_h) + "x" +
                                                        std::to_string(extent_w) + ")"
                                                  : std::string()),
               " is larger than the padded input: ", x_shape, " padded by ", p.pad_y, "x", p.pad_x, " is ", padded_h,
               "x", padded_w);
  g.out_h = conv_outsize(g.height, kernel_h, p.stride_y, p.pad_y, cover_all, p.dilate_y);
  g.out_w = conv_outsize(g.width, kernel_w, p.stride_x, p.pad_x, cover_all, p.dilate_x);
  return g;
}

Tensor im2col(const Tensor& x, std::int64_t kernel_h, std::int64_t kernel_w, const Conv2DParams& params,
              bool cover_all) {
  ops_detail::check_floating(x, "im2col");
  TANDEM_CHECK(x.dim() == 4, "im2col: x must be 4-D [N, C, H, W], got ", x.description());
  const Conv2DGeometry g = conv2d_geometry(x.shape(), kernel_h, kernel_w, params, cover_all, "im2col");
  Tensor col({g.batch, g.channels * kernel_h * kernel_w, g.out_h * g.out_w}, x.dtype(), x.device());
  backend_for(x.device(), "im2col").im2col(x, g, col);
  return col;
}

Tensor col2im(const Tensor& col, const Shape& x_shape, std::int64_t kernel_h, std::int64_t kernel_w,
              const Conv2DParams& params, bool cover_all) {
  ops_detail::check_floating(col, "col2im");
  TANDEM_CHECK(x_shape.size() == 4, "col2im: the image shape must be 4-D [N, C, H, W], got ", x_shape);
  const Conv2DGeometry g = conv2d_geometry(x_shape, kernel_h, kernel_w, params, cover_all, "col2im");
  const Shape expected{g.batch, g.channels * kernel_h * kernel_w, g.out_h * g.out_w};
  TANDEM_CHECK(col.shape() == expected, "col2im: col ", col.description(), " does not match images ", x_shape,
               " with a ", kernel_h, "x", kernel_w, " kernel: expected ", expected);
  Tensor x(x_shape, col.dtype(), col.device());
  backend_for(col.device(), "col2im").col2im(col, g, x);
  return x;
}

Tensor conv2d(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DParams& params, bool relu) {
  const char* op = "conv2d";
  if (x.defined() && is_half(x.dtype()) && !(W.defined() && native_16bit(x, x.shape(), W.shape(), params, op)))
    return conv2d(x.to(DType::f32), ops_detail::widen(W), ops_detail::widen(b), params, relu).to(x.dtype());
  check_conv_operands(x, W, b, op);
  const ConvPlan plan = plan_conv(x.shape(), x.description(), W.shape(), W.description(), params, op);
  if (b.defined()) {
    TANDEM_CHECK(b.dim() == 1 && b.size(0) == plan.O, op, ": b ", b.description(), " does not match the ", plan.O,
                 " output channels of W ", W.description());
  }
  Tensor y({plan.N, plan.O, plan.g.out_h, plan.g.out_w}, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  Backend& backend = backend_for(x.device(), op);
  if (relu) backend.conv2d_relu(x, W, b, plan.g, plan.G, y);
  else backend.conv2d(x, W, b, plan.g, plan.G, y);
  return y;
}

Tensor conv2d_grad_input(const Tensor& gy, const Tensor& W, const Shape& x_shape, const Conv2DParams& params) {
  const char* op = "conv2d_grad_input";
  if (gy.defined() && is_half(gy.dtype()) && !(W.defined() && native_16bit(gy, x_shape, W.shape(), params, op)))
    return conv2d_grad_input(gy.to(DType::f32), ops_detail::widen(W), x_shape, params).to(gy.dtype());
  if (!is_half(gy.dtype())) ops_detail::check_floating(gy, op);
  ops_detail::check_compatible({&gy, &W}, op);
  const ConvPlan plan = plan_conv(x_shape, shape_str(x_shape), W.shape(), W.description(), params, op);
  check_gy(gy, plan, x_shape, W.description(), op);
  Tensor gx(x_shape, gy.dtype(), gy.device());
  if (gx.numel() == 0) return gx;
  backend_for(gy.device(), op).conv2d_grad_input(gy, W, plan.g, plan.G, gx);
  return gx;
}

Tensor conv2d_grad_weight(const Tensor& x, const Tensor& gy, const Shape& w_shape, const Conv2DParams& params) {
  const char* op = "conv2d_grad_weight";
  if (x.defined() && is_half(x.dtype()) && !native_16bit(x, x.shape(), w_shape, params, op))
    return conv2d_grad_weight(x.to(DType::f32), ops_detail::widen(gy), w_shape, params).to(x.dtype());
  if (!is_half(x.dtype())) ops_detail::check_floating(x, op);
  ops_detail::check_compatible({&x, &gy}, op);
  const ConvPlan plan = plan_conv(x.shape(), x.description(), w_shape, shape_str(w_shape), params, op);
  check_gy(gy, plan, x.shape(), shape_str(w_shape), op);
  Tensor gW(w_shape, x.dtype(), x.device());
  backend_for(x.device(), op).conv2d_grad_weight(x, gy, plan.g, plan.G, gW);  // an empty batch sums to 0
  return gW;
}

std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, const Pool2DParams& params, bool with_indices) {
  if (x.defined() && is_half(x.dtype())) {
    auto [y, indices] = max_pool2d(x.to(DType::f32), params, with_indices);
    return {y.to(x.dtype()), indices};
  }
  ops_detail::check_floating(x, "max_pool2d");
  const Conv2DGeometry g = pool_geometry(x.shape(), x.description(), params, "max_pool2d");
  Tensor y({g.batch, g.channels, g.out_h, g.out_w}, x.dtype(), x.device());
  Tensor indices = with_indices ? Tensor(y.shape(), DType::i64, x.device()) : Tensor();
  backend_for(x.device(), "max_pool2d").max_pool2d(x, g, y, indices);
  return {y, indices};
}

Tensor max_pool2d_backward(const Tensor& gy, const Tensor& indices, const Shape& x_shape,
                           const Pool2DParams& params) {
  const char* op = "max_pool2d_backward";
  if (gy.defined() && is_half(gy.dtype()))
    return max_pool2d_backward(gy.to(DType::f32), indices, x_shape, params).to(gy.dtype());
  ops_detail::check_floating(gy, op);
  ops_detail::check_defined(indices, op);
  TANDEM_CHECK(indices.dtype() == DType::i64, op, ": indices must be i64, got ", indices.description());
  TANDEM_CHECK(indices.device() == gy.device(), op, ": gy ", gy.description(), " and indices ", indices.description(),
               " are on different devices");
  const Conv2DGeometry g = pool_geometry(x_shape, shape_str(x_shape), params, op);
  const Shape expected{g.batch, g.channels, g.out_h, g.out_w};
  TANDEM_CHECK(gy.shape() == expected && indices.shape() == expected, op, ": gy ", gy.description(), " and indices ",
               indices.description(), " must both have the output shape ", expected, " of x ", x_shape);
  Tensor gx(x_shape, gy.dtype(), gy.device());
  backend_for(gy.device(), op).max_pool2d_backward(gy, indices, g, gx);
  return gx;
}

Tensor avg_pool2d(const Tensor& x, const Pool2DParams& params) {
  if (x.defined() && is_half(x.dtype())) return avg_pool2d(x.to(DType::f32), params).to(x.dtype());
  ops_detail::check_floating(x, "avg_pool2d");
  const Conv2DGeometry g = pool_geometry(x.shape(), x.description(), params, "avg_pool2d");
  Tensor y({g.batch, g.channels, g.out_h, g.out_w}, x.dtype(), x.device());
  backend_for(x.device(), "avg_pool2d").avg_pool2d(x, g, y);
  return y;
}

Tensor avg_pool2d_backward(const Tensor& gy, const Shape& x_shape, const Pool2DParams& params) {
  const char* op = "avg_pool2d_backward";
  if (gy.defined() && is_half(gy.dtype())) return avg_pool2d_backward(gy.to(DType::f32), x_shape, params).to(gy.dtype());
  ops_detail::check_floating(gy, op);
  const Conv2DGeometry g = pool_geometry(x_shape, shape_str(x_shape), params, op);
  const Shape expected{g.batch, g.channels, g.out_h, g.out_w};
  TANDEM_CHECK(gy.shape() == expected, op, ": gy ", gy.description(), " does not match the output shape ", expected,
               " of x ", x_shape);
  Tensor gx(x_shape, gy.dtype(), gy.device());
  backend_for(gy.device(), op).avg_pool2d_backward(gy, g, gx);
  return gx;
}

}  // namespace tandem
