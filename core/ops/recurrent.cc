#include "core/ops/recurrent.h"

#include "core/backend.h"
#include "core/ops/checks.h"

namespace tandem {

namespace {

void check_cell(const Tensor& gates, const Tensor& c_prev, const char* op) {
  ops_detail::check_compatible({&gates, &c_prev}, op);
  ops_detail::check_floating(gates, op);
  TANDEM_CHECK(c_prev.dim() == 2, op, ": c_prev must be [B, H], got ", c_prev.description());
  TANDEM_CHECK(gates.dim() == 2 && gates.size(0) == c_prev.size(0) && gates.size(1) == 4 * c_prev.size(1), op,
               ": gates ", gates.description(), " must be [B, 4H] for c_prev ", c_prev.description());
}

void check_same(const Tensor& t, const Tensor& like, const char* what, const char* op) {
  ops_detail::check_compatible({&t, &like}, op);
  TANDEM_CHECK(t.shape() == like.shape(), op, ": ", what, " ", t.description(), " must have the shape of c_prev ",
               like.description());
}

}  // namespace

void lstm_cell_forward_(Tensor& gates, const Tensor& c_prev, Tensor& c, Tensor& h) {
  const char* op = "lstm_cell_forward_";
  check_cell(gates, c_prev, op);
  check_same(c, c_prev, "c", op);
  check_same(h, c_prev, "h", op);
  backend_for(gates.device(), op).lstm_cell_forward(gates, c_prev, c, h);
}

void lstm_cell_backward_(const Tensor& activations, const Tensor& c_prev, const Tensor& c, const Tensor& gh,
                         const Tensor& gc, Tensor& ggates, Tensor& gc_prev) {
  const char* op = "lstm_cell_backward_";
  check_cell(activations, c_prev, op);
  check_same(c, c_prev, "c", op);
  check_same(gh, c_prev, "gh", op);
  check_same(gc, c_prev, "gc", op);
  check_same(gc_prev, c_prev, "gc_prev", op);
  ops_detail::check_compatible({&ggates, &activations}, op);
  TANDEM_CHECK(ggates.shape() == activations.shape(), op, ": ggates ", ggates.description(),
               " must have the shape of the activations ", activations.description());
  backend_for(activations.device(), op).lstm_cell_backward(activations, c_prev, c, gh, gc, ggates, gc_prev);
}

LstmCellResult lstm_cell(const Tensor& gates, const Tensor& c_prev) {
  check_cell(gates, c_prev, "lstm_cell");
  LstmCellResult r;
  r.activations = gates.clone();
  r.c = Tensor(c_prev.shape(), c_prev.dtype(), c_prev.device());
  r.h = Tensor(c_prev.shape(), c_prev.dtype(), c_prev.device());
  backend_for(gates.device(), "lstm_cell").lstm_cell_forward(r.activations, c_prev, r.c, r.h);
  return r;
}

}  // namespace tandem
