#include "core/ops/indexing.h"

#include "core/backend.h"
#include "core/ops/checks.h"
#include "core/ops/half_compute.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "core/ops/shape_ops.h"

namespace tandem {

namespace {

void check_id_dtype(const Tensor& ids, const char* op) {
  ops_detail::check_defined(ids, op);
  TANDEM_CHECK(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, op, ": ids must be i32 or i64, got ",
               ids.description());
}

void check_table(const Tensor& table, const char* op) {
  ops_detail::check_defined(table, op);
  ops_detail::check_numeric(table, op);
  TANDEM_CHECK(table.dim() == 2, op, ": the table must be 2-D [V, D], got ", table.description());
}

}  // namespace

void check_row_ids(const Tensor& ids, std::int64_t rows, std::optional<std::int64_t> ignore_label, const char* op) {
  check_id_dtype(ids, op);
  if (ids.numel() == 0) return;
  // Fast path on any device: the extreme ids (with ignored ones mapped to 0) are in range.
  const Tensor kept = ignore_label ? where(not_equal(ids, static_cast<double>(*ignore_label)), ids,
                                           zeros({}, ids.dtype(), ids.device()))
                                   : ids;
  // Both extremes in one transfer: on a GPU each item() waits for the device.
  const std::vector<std::int64_t> extremes = stack({min(kept), max(kept)}).to(DType::i64).to_vector<std::int64_t>();
  if (extremes[0] >= 0 && extremes[1] < rows) return;
  // Slow path, only to name the first offending id.
  const std::vector<std::int64_t> values = ids.to_vector<std::int64_t>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (ignore_label && values[i] == *ignore_label) continue;
    if (values[i] < 0 || values[i] >= rows)
      TANDEM_FAIL(op, ": id ", values[i], " at flat position ", i, " is outside [0, ", rows, ")",
                  ignore_label ? " and is not the ignore_label " + std::to_string(*ignore_label) : std::string());
  }
}

namespace {

Tensor gather_rows(const Tensor& table, const Tensor& ids, std::optional<std::int64_t> ignore_label, const char* op,
                   bool check_range) {
  // Rows of a 16-bit table move in f32 (exact both ways) until the backends take them as they are.
  if (table.defined() && is_half(table.dtype()))
    return gather_rows(table.to(DType::f32), ids, ignore_label, op, check_range).to(table.dtype());
  check_table(table, op);
  check_id_dtype(ids, op);
  TANDEM_CHECK(ids.device() == table.device(), op, ": table on ", table.device(), " but ids on ", ids.device());
  if (check_range) check_row_ids(ids, table.size(0), ignore_label, op);
  Shape out_shape = ids.shape();
  out_shape.push_back(table.size(1));
  Tensor out(out_shape, table.dtype(), table.device());
  backend_for(table.device(), op).take_rows(table, ids, out, ignore_label.has_value(), ignore_label.value_or(0));
  return out;
}

}  // namespace

Tensor take_rows(const Tensor& table, const Tensor& ids, std::optional<std::int64_t> ignore_label, const char* op) {
  return gather_rows(table, ids, ignore_label, op, /*check_range=*/true);
}

Tensor take_rows_trusted(const Tensor& table, const Tensor& ids, const char* op) {
  return gather_rows(table, ids, std::nullopt, op, /*check_range=*/false);
}

void index_add_rows_(Tensor& table, const Tensor& ids, const Tensor& src, std::optional<std::int64_t> ignore_label,
                     const char* op) {
  if (table.defined() && is_half(table.dtype())) {  // the sums in f32, each row rounded once
    ops_detail::check_compatible({&table, &src}, op);
    Tensor wide = table.to(DType::f32);
    index_add_rows_(wide, ids, src.to(DType::f32), ignore_label, op);
    return ops_detail::narrow_into(table, wide);
  }
  check_table(table, op);
  check_id_dtype(ids, op);
  ops_detail::check_compatible({&table, &src}, op);
  TANDEM_CHECK(ids.device() == table.device(), op, ": table on ", table.device(), " but ids on ", ids.device());
  Shape expected = ids.shape();
  expected.push_back(table.size(1));
  TANDEM_CHECK(src.shape() == expected, op, ": src ", src.description(), " does not match ids ", ids.description(),
               " and table ", table.description(), " (expected ", expected, ")");
  TANDEM_CHECK(!src.shares_storage_with(table), op, ": src must not share memory with the table");
  check_row_ids(ids, table.size(0), ignore_label, op);
  backend_for(table.device(), op).index_add_rows(table, ids, src, ignore_label.has_value(), ignore_label.value_or(0));
}

}  // namespace tandem
