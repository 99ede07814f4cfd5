// Convolution and pooling on [N, C, H, W] images, with Chainer's semantics
// (chainer.functions.convolution_2d, max_pooling_2d, average_pooling_2d).
//
// Convolution is im2col + GEMM: each image is unfolded into col [C * kh * kw, out_h * out_w]
// and multiplied by W viewed as [out_c, C * kh * kw] (per group with groups > 1). The batch is
// processed in chunks so that the unfolded images never take more than a bounded buffer, and
// a 1x1 kernel with stride 1 and no padding uses x itself as col (no copy).
#pragma once

#include <cstdint>
#include <utility>

#include "core/backend.h"
#include "core/tensor.h"

namespace tandem {

// Chainer's get_conv_outsize: the number of window positions along an axis of `size` elements
// padded by `pad` on both sides, (size + 2 pad - dk) / stride + 1 with dk = dilate (k - 1) + 1,
// or with cover_all (size + 2 pad - dk + stride - 1) / stride + 1 so that every input element
// is covered. Throws when the (dilated) kernel is larger than the padded input or a parameter
// is out of range (kernel, stride, dilate >= 1; pad >= 0).
std::int64_t conv_outsize(std::int64_t size, std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                          bool cover_all = false, std::int64_t dilate = 1);

struct Conv2DParams {
  std::int64_t stride_y = 1, stride_x = 1;
  std::int64_t pad_y = 0, pad_x = 0;
  std::int64_t dilate_y = 1, dilate_x = 1;
  std::int64_t groups = 1;  // used by the conv2d functions only

  // The same stride, pad and dilation on both axes: Conv2DParams::make(2, 1).
  static Conv2DParams make(std::int64_t stride, std::int64_t pad = 0, std::int64_t dilate = 1,
                           std::int64_t groups = 1) {
    Conv2DParams p;
    p.stride_y = p.stride_x = stride;
    p.pad_y = p.pad_x = pad;
    p.dilate_y = p.dilate_x = dilate;
    p.groups = groups;
    return p;
  }
  // Chainable setters: Conv2DParams().stride(2).pad(1).with_groups(2).
  Conv2DParams& stride(std::int64_t y, std::int64_t x) { stride_y = y; stride_x = x; return *this; }
  Conv2DParams& stride(std::int64_t s) { return stride(s, s); }
  Conv2DParams& pad(std::int64_t y, std::int64_t x) { pad_y = y; pad_x = x; return *this; }
  Conv2DParams& pad(std::int64_t p) { return pad(p, p); }
  Conv2DParams& dilate(std::int64_t y, std::int64_t x) { dilate_y = y; dilate_x = x; return *this; }
  Conv2DParams& dilate(std::int64_t d) { return dilate(d, d); }
  Conv2DParams& with_groups(std::int64_t g) { groups = g; return *this; }
};

// The validated window geometry of a kernel_h x kernel_w window over an input of shape x_shape
// [N, C, H, W]; errors name OP and the shapes.
Conv2DGeometry conv2d_geometry(const Shape& x_shape, std::int64_t kernel_h, std::int64_t kernel_w,
                               const Conv2DParams& params, bool cover_all, const char* op);

// x [N, C, H, W] -> col [N, C * kernel_h * kernel_w, out_h * out_w] (row (c * kh + ky) * kw + kx;
// zeros where the window reads padding).
Tensor im2col(const Tensor& x, std::int64_t kernel_h, std::int64_t kernel_w, const Conv2DParams& params = {},
              bool cover_all = false);
// The adjoint of im2col: col [N, C * kh * kw, out_h * out_w] -> [N, C, H, W] = x_shape, every
// entry summed into the input element it was read from.
Tensor col2im(const Tensor& col, const Shape& x_shape, std::int64_t kernel_h, std::int64_t kernel_w,
              const Conv2DParams& params = {}, bool cover_all = false);

// y [N, out_c, out_h, out_w] = conv(x [N, C, H, W], W [out_c, C / groups, kh, kw]) + b [out_c]
// (b may be undefined). Floating dtypes only; x, W and b share dtype and device. With relu,
// y = max(that, 0) (Backend::conv2d_relu: on the CPU's oneDNN path inside the primitive).
Tensor conv2d(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DParams& params = {}, bool relu = false);
// The gradient of conv2d with respect to x (of shape x_shape), given gy and W.
Tensor conv2d_grad_input(const Tensor& gy, const Tensor& W, const Shape& x_shape, const Conv2DParams& params = {});
// The gradient of conv2d with respect to W (of shape w_shape), given x and gy.
Tensor conv2d_grad_weight(const Tensor& x, const Tensor& gy, const Shape& w_shape, const Conv2DParams& params = {});

// A pooling window; stride and pad as for convolution (no dilation).
struct Pool2DParams {
  std::int64_t kernel_h = 1, kernel_w = 1;
  std::int64_t stride_y = 1, stride_x = 1;
  std::int64_t pad_y = 0, pad_x = 0;
  bool cover_all = false;
};

// Max pooling: {y, indices}, both [N, C, out_h, out_w]; indices (i64) hold iy * W + ix of each
// maximum within its input plane (the first one in window order), -1 for a window that lies
// entirely in the padding (its output is -inf). Without `with_indices` (no gradient to take)
// the indices are left undefined and never computed.
std::pair<Tensor, Tensor> max_pool2d(const Tensor& x, const Pool2DParams& params, bool with_indices = true);
// Scatters gy back to the positions in `indices`: gx of shape x_shape.
Tensor max_pool2d_backward(const Tensor& gy, const Tensor& indices, const Shape& x_shape,
                           const Pool2DParams& params);
// Average pooling: window sums divided by kernel_h * kernel_w (padding counts as zeros).
Tensor avg_pool2d(const Tensor& x, const Pool2DParams& params);
Tensor avg_pool2d_backward(const Tensor& gy, const Shape& x_shape, const Pool2DParams& params);

}  // namespace tandem
