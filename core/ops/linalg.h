// Matrix products with numpy.matmul semantics: 1-D operands are promoted (and the added axis
// removed again), leading batch axes broadcast. The transpose flags apply to the last two axes
// of an operand without copying it.
#pragma once

#include "core/tensor.h"

namespace tandem {

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

// out += op(a) @ op(b) for 2-D operands, in place: the accumulating GEMM that gradient
// computations use to avoid a temporary.
void matmul_accumulate_(Tensor& out, const Tensor& a, const Tensor& b, bool transpose_a = false,
                        bool transpose_b = false);

}  // namespace tandem
