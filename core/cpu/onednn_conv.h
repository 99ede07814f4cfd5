// Convolution on oneDNN's direct kernels (forward, backward-data, backward-weights), f32 (and bf16
// where the processor has bf16 dot products: f32 sums, each result rounded once), for the
// CPU backend's conv2d family (core/cpu/conv.cc), which picks among these, Winograd (winograd_conv.h)
// and im2col + GEMM per geometry by measurement (core/cpu/measured_choice.h). Tensors stay in tandem's plain NCHW /
// OIHW layout; oneDNN's blocked layouts live only inside a call (reorders in and out), which
// keeps every other operation on plain row-major data.
#pragma once

#include <cstdint>

#include "core/backend.h"
#include "core/tensor.h"

namespace tandem {
namespace cpu {

// Whether oneDNN can run this convolution here: a build with oneDNN, f32 (or bf16 with
// onednn_native_bf16), and a geometry it takes. Every operand has the dtype.
bool onednn_conv_supported(const Conv2DGeometry& g, std::int64_t out_channels, std::int64_t groups, DType dtype);

// The three directions, with the CPU backend's contracts (y, gx and gW overwritten). Only when
// onednn_conv_supported.
// With relu, y = max(conv + b, 0): oneDNN's eltwise post-op, inside the primitive.
void onednn_conv2d(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g, std::int64_t groups,
                   bool relu, Tensor& y);
void onednn_conv2d_grad_input(const Tensor& gy, const Tensor& W, const Conv2DGeometry& g, std::int64_t groups,
                              Tensor& gx);
void onednn_conv2d_grad_weight(const Tensor& x, const Tensor& gy, const Conv2DGeometry& g, std::int64_t groups,
                               Tensor& gW);

}  // namespace cpu
}  // namespace tandem
