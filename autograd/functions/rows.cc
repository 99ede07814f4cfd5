#include "autograd/functions/rows.h"

#include "autograd/function_node.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/ops/indexing.h"

namespace tandem {
namespace functions {

namespace {

void check_ids(const Tensor& ids, const Tensor& x, const char* op) {
  TANDEM_CHECK(ids.defined() && (ids.dtype() == DType::i32 || ids.dtype() == DType::i64) && ids.dim() == 1, op,
               ": ids must be a 1-D i32 or i64 tensor, got ", ids.defined() ? ids.description() : "undefined");
  TANDEM_CHECK(x.dim() == 2, op, ": x must be 2-D [rows, D], got ", x.description());
  TANDEM_CHECK(ids.device() == x.device(), op, ": ids on ", ids.device(), " but x on ", x.device());
}

class SelectRows : public FunctionNode {
 public:
  explicit SelectRows(Tensor ids) : ids_(std::move(ids)) {}
  std::string name() const override { return "select_rows"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    check_ids(ids_, in[0], "select_rows");
    x_shape_ = in[0].shape();
    return {take_rows(in[0], ids_, std::nullopt, "select_rows")};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    Tensor gx = zeros(x_shape_, gy[0].dtype(), gy[0].device());
    index_add_rows_(gx, ids_, gy[0], std::nullopt, "select_rows (backward)");
    return {gx};
  }

 private:
  Tensor ids_;
  Shape x_shape_;
};

class ScatterAddRows : public FunctionNode {
 public:
  ScatterAddRows(Tensor ids, std::int64_t rows) : ids_(std::move(ids)), rows_(rows) {}
  std::string name() const override { return "scatter_add_rows"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& x = in[0];
    check_ids(ids_, x, "scatter_add_rows");
    TANDEM_CHECK(ids_.numel() == x.shape()[0], "scatter_add_rows: ", ids_.numel(), " ids for the ", x.shape()[0],
                 " rows of ", x.description());
    TANDEM_CHECK(rows_ >= 0, "scatter_add_rows: rows must be at least 0, got ", rows_);
    Tensor y = zeros({rows_, x.shape()[1]}, x.dtype(), x.device());
    index_add_rows_(y, ids_, x, std::nullopt, "scatter_add_rows");
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    return {take_rows_trusted(gy[0], ids_, "scatter_add_rows (backward)")};  // checked in forward
  }

 private:
  Tensor ids_;
  std::int64_t rows_;
};

}  // namespace

Variable select_rows(const Variable& x, const Tensor& ids) { return call<SelectRows>({x}, ids)[0]; }

Variable scatter_add_rows(const Variable& x, const Tensor& ids, std::int64_t rows) {
  return call<ScatterAddRows>({x}, ids, rows)[0];
}

}  // namespace functions
}  // namespace tandem
