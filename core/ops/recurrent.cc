#include "core/ops/recurrent.h"

#include "core/backend.h"
#include "core/ops.h"
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

// The packed batch of `shape` against x, the states and the weights (the fused path's inputs
// come from n_step_lstm, which has checked the user's tensors; this guards the layout).
void check_sequence(const LstmSequenceShape& shape, const Tensor& x, const Tensor& hx, const Tensor& cx,
                    const char* op) {
  ops_detail::check_compatible({&x, &hx, &cx}, op);
  ops_detail::check_floating(x, op);
  std::int64_t rows = 0;
  for (std::size_t i = 0; i < shape.lengths.size(); ++i) {
    TANDEM_CHECK(shape.lengths[i] >= 1 && (i == 0 || shape.lengths[i] <= shape.lengths[i - 1]), op,
                 ": the sequence lengths must be at least 1 and decreasing, got ", shape.lengths[i], " at ", i);
    rows += shape.lengths[i];
  }
  const std::int64_t B = static_cast<std::int64_t>(shape.lengths.size());
  TANDEM_CHECK(B >= 1, op, ": no sequence");
  TANDEM_CHECK(x.shape() == Shape({rows, shape.input_size}), op, ": x ", x.description(), " must be [N, in] = [",
               rows, ", ", shape.input_size, "]");
  const Shape state{shape.layers, B, shape.hidden};
  TANDEM_CHECK(hx.shape() == state && cx.shape() == state, op, ": hx ", hx.description(), " and cx ",
               cx.description(), " must be [L, B, H] = ", state);
}

// The arguments of lstm_recurrence_forward_ / _backward_: `rows` [N, width * H] and the rest
// [B, H] or [N, H] as named, one floating dtype and device, with the step sizes against them.
void check_recurrence(const std::vector<std::int64_t>& batch_sizes, const Tensor& rows, const Tensor& wh,
                      std::initializer_list<std::pair<const Tensor*, const char*>> per_sequence,
                      std::initializer_list<std::pair<const Tensor*, const char*>> per_row, const char* op) {
  ops_detail::check_compatible({&rows, &wh}, op);
  ops_detail::check_floating(rows, op);
  TANDEM_CHECK(wh.dim() == 2 && wh.size(0) == 4 * wh.size(1), op, ": wh ", wh.description(), " must be [4H, H]");
  const std::int64_t H = wh.size(1);
  std::int64_t N = 0;
  for (std::size_t t = 0; t < batch_sizes.size(); ++t) {
    TANDEM_CHECK(batch_sizes[t] >= 1 && (t == 0 || batch_sizes[t] <= batch_sizes[t - 1]), op,
                 ": the step sizes must be at least 1 and decreasing, got ", batch_sizes[t], " at step ", t);
    N += batch_sizes[t];
  }
  TANDEM_CHECK(rows.shape() == Shape({N, 4 * H}), op, ": the gates ", rows.description(), " must be [N, 4H] = [", N,
               ", ", 4 * H, "] for ", batch_sizes.size(), " steps of ", N, " rows in all and wh ", wh.description());
  const std::int64_t B = batch_sizes.empty() ? 0 : batch_sizes[0];
  for (const auto& [t, name] : per_sequence) {
    ops_detail::check_compatible({t, &rows}, op);
    TANDEM_CHECK(t->dim() == 2 && t->size(0) >= B && t->size(1) == H, op, ": ", name, " ", t->description(),
                 " must be [B, H] with B >= ", B, " (the first step's rows) and H = ", H);
  }
  for (const auto& [t, name] : per_row) {
    ops_detail::check_compatible({t, &rows}, op);
    TANDEM_CHECK(t->shape() == Shape({N, H}), op, ": ", name, " ", t->description(), " must be [N, H] = [", N, ", ",
                 H, "]");
  }
}

}  // namespace

std::optional<LstmSequence> lstm_sequence_forward(const LstmSequenceShape& shape, const Tensor& x, const Tensor& hx,
                                                  const Tensor& cx, const std::vector<Tensor>& weights,
                                                  bool training) {
  const char* op = "lstm_sequence_forward";
  check_sequence(shape, x, hx, cx, op);
  TANDEM_CHECK(static_cast<std::int64_t>(weights.size()) == 16 * shape.layers, op, ": ", weights.size(),
               " weights for ", shape.layers, " layers (needs 16 per layer)");
  for (std::size_t k = 0; k < weights.size(); ++k) {
    const std::int64_t l = static_cast<std::int64_t>(k) / 16, j = static_cast<std::int64_t>(k) % 16;
    const Shape expected = j >= 8 ? Shape{shape.hidden}
                                  : Shape{shape.hidden, j < 4 && l == 0 ? shape.input_size : shape.hidden};
    ops_detail::check_compatible({&x, &weights[k]}, op);
    TANDEM_CHECK(weights[k].shape() == expected, op, ": weight ", k, " ", weights[k].description(), " must be ",
                 expected);
  }
  LstmSequence r;
  if (!backend_for(x.device(), op)
           .lstm_sequence_forward(shape, x, hx, cx, weights, training, r.y, r.hy, r.cy, r.packed_weights, r.reserve))
    return std::nullopt;
  return r;
}

LstmSequenceGrads lstm_sequence_backward(const LstmSequenceShape& shape, const LstmSequence& forward,
                                         bool keep_forward, const Tensor& x, const Tensor& hx, const Tensor& cx,
                                         const Tensor& gy, const Tensor& ghy, const Tensor& gcy, bool weight_grads) {
  const char* op = "lstm_sequence_backward";
  check_sequence(shape, x, hx, cx, op);
  TANDEM_CHECK(forward.reserve.defined(), op, ": the forward did not run in training mode");
  ops_detail::check_compatible({&x, &gy, &ghy, &gcy}, op);
  TANDEM_CHECK(gy.shape() == forward.y.shape(), op, ": gy ", gy.description(), " must be shaped like y ",
               forward.y.description());
  TANDEM_CHECK(ghy.shape() == hx.shape() && gcy.shape() == hx.shape(), op, ": ghy ", ghy.description(),
               " and gcy ", gcy.description(), " must be shaped like hx ", hx.description());
  LstmSequenceGrads g;
  backend_for(x.device(), op)
      .lstm_sequence_backward(shape, x, hx, cx, forward.packed_weights, forward.reserve, keep_forward, forward.y, gy,
                              ghy, gcy, weight_grads, g.gx, g.ghx, g.gcx, g.gweights);
  return g;
}

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

void lstm_recurrence_forward_(const std::vector<std::int64_t>& batch_sizes, Tensor& gates, const Tensor& wh,
                              const Tensor& h0, const Tensor& c0, Tensor& hs, Tensor& cs) {
  const char* op = "lstm_recurrence_forward_";
  check_recurrence(batch_sizes, gates, wh, {{&h0, "h0"}, {&c0, "c0"}}, {{&hs, "hs"}, {&cs, "cs"}}, op);
  if (backend_for(gates.device(), op).lstm_recurrence_forward(batch_sizes, gates, wh, h0, c0, hs, cs)) return;
  std::int64_t off = 0, prev = 0;
  for (std::size_t t = 0; t < batch_sizes.size(); ++t) {
    const std::int64_t bt = batch_sizes[t], o = off, p = prev;  // this step's first row, the previous one's
    const Tensor h_prev = t == 0 ? h0.slice_rows(0, bt) : hs.slice_rows(p, p + bt);
    const Tensor c_prev = t == 0 ? c0.slice_rows(0, bt) : cs.slice_rows(p, p + bt);
    Tensor g = gates.slice_rows(o, o + bt), c = cs.slice_rows(o, o + bt), h = hs.slice_rows(o, o + bt);
    prev = off;
    off += bt;
    matmul_accumulate_(g, h_prev, wh, false, true);
    lstm_cell_forward_(g, c_prev, c, h);
  }
}

void lstm_recurrence_backward_(const std::vector<std::int64_t>& batch_sizes, const Tensor& activations,
                               const Tensor& cs, const Tensor& c0, const Tensor& wh, const Tensor& ghs, Tensor& dh,
                               Tensor& dc, Tensor& ggates) {
  const char* op = "lstm_recurrence_backward_";
  check_recurrence(batch_sizes, activations, wh, {{&c0, "c0"}, {&dh, "dh"}, {&dc, "dc"}}, {{&cs, "cs"}, {&ghs, "ghs"}},
                   op);
  ops_detail::check_compatible({&ggates, &activations}, op);
  TANDEM_CHECK(ggates.shape() == activations.shape(), op, ": ggates ", ggates.description(),
               " must have the shape of the activations ", activations.description());
  if (backend_for(activations.device(), op)
          .lstm_recurrence_backward(batch_sizes, activations, cs, c0, wh, ghs, dh, dc, ggates))
    return;
  std::vector<std::int64_t> offsets(batch_sizes.size(), 0);
  for (std::size_t t = 1; t < batch_sizes.size(); ++t) offsets[t] = offsets[t - 1] + batch_sizes[t - 1];
  for (std::size_t step = batch_sizes.size(); step-- > 0;) {
    const std::int64_t bt = batch_sizes[step], off = offsets[step];
    Tensor dh_t = dh.slice_rows(0, bt), dc_t = dc.slice_rows(0, bt);
    add_(dh_t, ghs.slice_rows(off, off + bt));
    const Tensor c_prev = step == 0 ? c0.slice_rows(0, bt) : cs.slice_rows(offsets[step - 1], offsets[step - 1] + bt);
    Tensor gg = ggates.slice_rows(off, off + bt);
    lstm_cell_backward_(activations.slice_rows(off, off + bt), c_prev, cs.slice_rows(off, off + bt), dh_t, dc_t, gg,
                        dc_t);
    dh_t.copy_(matmul(gg, wh));  // the gradient of h_{t-1} for the sequences running at t
  }
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
