// Row gather and scatter-add over the first axis of a 2-D table: the operations behind
// embeddings (autograd/functions/embed_id.h) and the packing of variable-length sequences.
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace tandem {

// Checks that every id (i32 or i64, any shape) lies in [0, rows) or equals ignore_label;
// otherwise throws naming OP, the offending id, its flat position and rows.
void check_row_ids(const Tensor& ids, std::int64_t rows, std::optional<std::int64_t> ignore_label, const char* op);

// out[s, :] = table[ids[s], :] for a [V, D] table and ids of any shape S (i32 or i64): the
// result has shape S + [D]. Ids equal to ignore_label give zero rows; any other id outside
// [0, V) is an error naming OP, the id and V.
Tensor take_rows(const Tensor& table, const Tensor& ids, std::optional<std::int64_t> ignore_label = std::nullopt,
                 const char* op = "take_rows");
// take_rows for ids that the calling operation built itself from sizes it checked (a
// permutation, the rows of a packed batch): shapes, dtypes and devices are checked, the ids'
// range is not. That check costs two reductions and, on a GPU, a wait for the device, and
// n_step_lstm gathers rows this way a dozen times per call. Never for ids from a user.
Tensor take_rows_trusted(const Tensor& table, const Tensor& ids, const char* op);

// In place: table[ids[s], :] += src[s, :] for every position s of ids, with src of shape
// ids.shape() + [D]. Repeated ids accumulate; ids equal to ignore_label are skipped; other ids
// outside [0, V) are an error (checked before anything is written).
void index_add_rows_(Tensor& table, const Tensor& ids, const Tensor& src,
                     std::optional<std::int64_t> ignore_label = std::nullopt, const char* op = "index_add_rows_");

}  // namespace tandem
