// 3x3 convolution with stride 1 by Winograd's minimal filtering F(2x2, 3x3) (Lavin & Gray,
// "Fast Algorithms for Convolutional Neural Networks", 2016), for the CPU backend's conv2d family
// (core/cpu/conv.cc), which runs it where it was measured faster than oneDNN's direct kernels and
// im2col (core/cpu/measured_choice.h).
//
// Each 2x2 block of outputs ("tile") of one (input, output) channel pair costs 16 multiply-adds
// instead of 36: the tile's 4x4 input patch and the 3x3 kernel are transformed (additions and
// halvings only), multiplied element by element and summed over the input channels, and
// transformed back. Summed over the channels, the 16 element-wise products are 16 GEMMs
// [out channels x in channels] x [in channels x tiles], which run on the product library measured
// fastest (core/cpu/gemm.h). The arithmetic is f32 throughout; the transforms' constants (1, 1/2)
// are exact, and the results differ from a direct convolution by rounding only (tests/core/
// conv_test.cc bounds it against an f64 convolution).
//
// The input's gradient of a stride-1 convolution is again a stride-1 convolution (of gy, padded
// by 2 - pad, with the kernels turned by 180 degrees and their channels swapped), so it runs on
// the same kernel. The weights' gradient follows from the same factorisation: with respect to the
// transformed kernels U it is, per position, the sum over tiles of (A gy A^T) times the inputs'
// transformed tiles (16 GEMMs [out x tiles] x [tiles x in]); then gW = G^T (that) G.
#pragma once

#include <cstdint>

#include "core/backend.h"
#include "core/tensor.h"

namespace tandem {
namespace cpu {

// Whether this convolution can run on Winograd F(2x2, 3x3): f32, one group, a 3x3 kernel,
// stride 1, no dilation, padding 0 to 2 on each axis (the input's gradient pads by 2 - pad).
bool winograd_conv_supported(const Conv2DGeometry& g, std::int64_t out_channels, std::int64_t groups, DType dtype);

// With the CPU backend's contracts (y and gx overwritten); only where winograd_conv_supported.
// With relu, y = max(conv + b, 0), applied as the outputs are written.
void winograd_conv2d(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g, bool relu,
                     Tensor& y);
void winograd_conv2d_grad_input(const Tensor& gy, const Tensor& W, const Conv2DGeometry& g, Tensor& gx);
void winograd_conv2d_grad_weight(const Tensor& x, const Tensor& gy, const Conv2DGeometry& g, Tensor& gW);

}  // namespace cpu
}  // namespace tandem
