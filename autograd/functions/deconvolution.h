// 2-D transposed convolution ("deconvolution"), as chainer.functions.deconvolution_2d.
#pragma once

#include <cstdint>
#include <optional>

#include "autograd/functions/convolution.h"
#include "autograd/variable.h"

namespace tandem {
namespace functions {

// y [N, out_c, out_h, out_w] from x [N, in_c, h, w], W [in_c, out_c / groups, kh, kw] (Chainer's
// layout for deconvolution: the layout of convolution_2d's W with the roles of its channels
// swapped) and an optional bias b [out_c]. Deconvolution is the adjoint of convolution_2d with
// respect to its input: convolution_2d(y, W, options) has x's shape, and every input pixel is
// scattered into the output as that pixel times the kernel, at stride steps, with the pad
// cropped off each border.
//
// The output size is by default Chainer's get_deconv_outsize (without cover_all):
//   out_h = stride_y (h - 1) + dilate_y (kh - 1) + 1 - 2 pad_y   (and likewise out_w).
// With stride > 1, up to stride - 1 larger sizes convolve back to the same h; out_h / out_w pick
// one: conv_outsize(out_h, kh, stride_y, pad_y, false, dilate_y) must equal h (and likewise for
// w). x, W and b share one floating dtype and device. Errors name deconvolution_2d, the shapes
// and the parameter at fault.
//
// backward: gx = convolution_2d(gy, W) without bias, gW = the weight gradient of that
// convolution (gy its input, x its output gradient), gb = sum of gy over N, out_h and out_w.
Variable deconvolution_2d(const Variable& x, const Variable& W, const Variable& b = Variable(),
                          const Conv2DOptions& options = {}, std::optional<std::int64_t> out_h = std::nullopt,
                          std::optional<std::int64_t> out_w = std::nullopt);

}  // namespace functions
}  // namespace tandem
