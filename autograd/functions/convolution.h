// 2-D convolution, as chainer.functions.convolution_2d (cover_all=False).
#pragma once

#include <cstdint>

#include "autograd/variable.h"

namespace tandem {
namespace functions {

struct Conv2DOptions {
  std::int64_t stride_y = 1, stride_x = 1;
  std::int64_t pad_y = 0, pad_x = 0;
  std::int64_t dilate_y = 1, dilate_x = 1;
  std::int64_t groups = 1;

  // The same stride, pad and dilation on both axes: Conv2DOptions::make(2, 1).
  static Conv2DOptions make(std::int64_t stride, std::int64_t pad = 0, std::int64_t dilate = 1,
                            std::int64_t groups = 1) {
    Conv2DOptions o;
    o.stride_y = o.stride_x = stride;
    o.pad_y = o.pad_x = pad;
    o.dilate_y = o.dilate_x = dilate;
    o.groups = groups;
    return o;
  }
  // Chainable setters: Conv2DOptions().stride(2).pad(1).with_groups(2).
  Conv2DOptions& stride(std::int64_t y, std::int64_t x) { stride_y = y; stride_x = x; return *this; }
  Conv2DOptions& stride(std::int64_t s) { return stride(s, s); }
  Conv2DOptions& pad(std::int64_t y, std::int64_t x) { pad_y = y; pad_x = x; return *this; }
  Conv2DOptions& pad(std::int64_t p) { return pad(p, p); }
  Conv2DOptions& dilate(std::int64_t y, std::int64_t x) { dilate_y = y; dilate_x = x; return *this; }
  Conv2DOptions& dilate(std::int64_t d) { return dilate(d, d); }
  Conv2DOptions& with_groups(std::int64_t g) { groups = g; return *this; }
};

// y [N, out_c, out_h, out_w] from x [N, C, H, W], W [out_c, C / groups, kh, kw] and an optional
// bias b [out_c], with out_h = (H + 2 pad_y - (dilate_y (kh - 1) + 1)) / stride_y + 1 (and
// likewise out_w). x, W and b must share one floating dtype and device.
//
// The options are taken by const reference on purpose: GCC 12.2 at -O2/-O3 -march=native
// (AVX-512, 256-bit SLP) miscompiles the by-value copy of a defaulted `= {}` argument of this
// struct into the call's stack slot (pad_y arrived as 1), which a reference avoids.
Variable convolution_2d(const Variable& x, const Variable& W, const Variable& b = Variable(),
                        const Conv2DOptions& options = {});

}  // namespace functions
}  // namespace tandem
