// Rows picked and rows summed by index, over the first axis of a 2-D variable: each is the
// other's backward. Mixture-of-experts layers move tokens to their experts with them
// (comm/moe/mixture_of_experts.h); embed_id is select_rows with the ids from the data.
#pragma once

#include <cstdint>

#include "autograd/variable.h"

namespace tandem {
namespace functions {

// y[s, :] = x[ids[s], :] for x [N, D] and ids (i32 or i64) of shape [S]: y is [S, D]. Ids may
// repeat (their gradients add up) or leave rows out (those get zero gradient); an id outside
// [0, N) is an error naming select_rows, the id and N.
Variable select_rows(const Variable& x, const Tensor& ids);

// y [rows, D] with y[r, :] = the sum of x[s, :] over the s with ids[s] = r (zero where none),
// for x [S, D] and ids of shape [S]: the mirror of select_rows.
Variable scatter_add_rows(const Variable& x, const Tensor& ids, std::int64_t rows);

}  // namespace functions
}  // namespace tandem
