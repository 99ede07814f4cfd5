// 2-D max and average pooling over [N, C, H, W], as chainer.functions.max_pooling_2d and
// average_pooling_2d. As in Chainer, a stride left out (std::nullopt) equals the kernel size.
#pragma once

#include <cstdint>
#include <optional>

#include "autograd/variable.h"

namespace tandem {
namespace functions {

// Window maxima. cover_all (Chainer's default) adds windows at the far edges so that every
// input element is covered: out = (H + 2 pad - k + stride - 1) / stride + 1; without it
// out = (H + 2 pad - k) / stride + 1. Padding never wins the max; the gradient goes to the
// (first) maximal element of each window.
Variable max_pooling_2d(const Variable& x, std::int64_t ksize_y, std::int64_t ksize_x, std::int64_t stride_y,
                        std::int64_t stride_x, std::int64_t pad_y, std::int64_t pad_x, bool cover_all = true);
Variable max_pooling_2d(const Variable& x, std::int64_t ksize, std::optional<std::int64_t> stride = std::nullopt,
                        std::int64_t pad = 0, bool cover_all = true);

// Window means; the divisor is always ksize_y * ksize_x, padding counting as zeros (Chainer's
// pad_value=0). out = (H + 2 pad - k) / stride + 1.
Variable average_pooling_2d(const Variable& x, std::int64_t ksize_y, std::int64_t ksize_x, std::int64_t stride_y,
                            std::int64_t stride_x, std::int64_t pad_y, std::int64_t pad_x);
Variable average_pooling_2d(const Variable& x, std::int64_t ksize, std::optional<std::int64_t> stride = std::nullopt,
                            std::int64_t pad = 0);

}  // namespace functions
}  // namespace tandem
