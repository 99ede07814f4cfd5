// 2-D convolution, as chainer.functions.convolution_2d (cover_all=False).
#pragma once

#include <cstdint>

#include "autograd/functions/fused_activation.h"
#include "autograd/variable.h"
#include "core/ops/conv.h"

namespace tandem {
namespace functions {

// Stride, pad, dilation and groups: core's Conv2DParams, under the name Chainer users expect.
using Conv2DOptions = Conv2DParams;

// y [N, out_c, out_h, out_w] from x [N, C, H, W], W [out_c, C / groups, kh, kw] and an optional
// bias b [out_c], with out_h = (H + 2 pad_y - (dilate_y (kh - 1) + 1)) / stride_y + 1 (and
// likewise out_w). x, W and b must share one floating dtype and device.
// (Options by reference: a GCC 12.2 miscompile of this struct's by-value copy first showed here;
// the build now avoids it project-wide, see .bazelrc.)
// With an activation, activation(convolution_2d(x, W, b)) as one function (fused_activation.h);
// on the CPU with oneDNN the ReLU runs inside the convolution primitive (a post-op).
Variable convolution_2d(const Variable& x, const Variable& W, const Variable& b = Variable(),
                        const Conv2DOptions& options = {}, Activation activation = Activation::none);

}  // namespace functions
}  // namespace tandem
