#include "autograd/functions/n_step_lstm.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <sstream>

#include "autograd/function_node.h"
#include "autograd/grad_mode.h"
#include "core/ops.h"
#include "core/ops/half_compute.h"
#include "core/ops/indexing.h"
#include "core/ops/recurrent.h"
#include "core/random.h"

namespace tandem {
namespace functions {

namespace {

constexpr std::int64_t kWeightsPerLayer = 8;

// The node's inputs are flattened as [hx, cx, ws[0][0..7], ..., bs[0][0..7], ..., xs[0..B)] and
// its outputs as [hy, cy, ys[0..B)]; this records where each part starts.
struct Layout {
  std::int64_t layers = 0, batch = 0;
  std::size_t hx() const { return 0; }
  std::size_t cx() const { return 1; }
  std::size_t w(std::int64_t l, std::int64_t j) const { return static_cast<std::size_t>(2 + kWeightsPerLayer * l + j); }
  std::size_t b(std::int64_t l, std::int64_t j) const {
    return static_cast<std::size_t>(2 + kWeightsPerLayer * (layers + l) + j);
  }
  std::size_t x(std::int64_t i) const { return static_cast<std::size_t>(2 + 2 * kWeightsPerLayer * layers + i); }
  std::size_t num_inputs() const { return x(batch); }
};

Variables pack_inputs(const Variable& hx, const Variable& cx, const std::vector<Variables>& ws,
                      const std::vector<Variables>& bs, const Variables& xs) {
  Variables inputs{hx, cx};
  for (const Variables& layer : ws) inputs.insert(inputs.end(), layer.begin(), layer.end());
  for (const Variables& layer : bs) inputs.insert(inputs.end(), layer.begin(), layer.end());
  inputs.insert(inputs.end(), xs.begin(), xs.end());
  return inputs;
}

NStepLSTMResult unpack_outputs(Variables outputs) {
  NStepLSTMResult result;
  result.hy = outputs[0];
  result.cy = outputs[1];
  result.ys.assign(outputs.begin() + 2, outputs.end());
  return result;
}

// Index tables built here from the checked lengths: gathered with take_rows_trusted (no range
// check, which on a GPU waited for the device at every gather).
Tensor index_tensor(const std::vector<std::int64_t>& values, Device device) {
  return from_vector<std::int64_t>(values, {static_cast<std::int64_t>(values.size())}).to(device);
}

// Layer l's [B, H] slice of a stacked state [n_layers, B, H] (a view).
Tensor layer_state(const Tensor& stacked, std::int64_t l) {
  return stacked.slice_rows(l, l + 1).reshape({stacked.size(1), stacked.size(2)});
}

class NStepLSTM : public FunctionNode {
 public:
  NStepLSTM(std::int64_t n_layers, std::int64_t batch, double dropout_ratio, bool use_dropout)
      : dropout_ratio_(dropout_ratio), use_dropout_(use_dropout) {
    layout_.layers = n_layers;
    layout_.batch = batch;
  }
  std::string name() const override { return "n_step_lstm"; }

  // bf16 and f16 are computed in f32 (core/ops/half_compute.h): the inputs are widened, and each
  // output and gradient is rounded back once.
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    half_ = in.empty() || !is_half(in[0].dtype()) ? std::nullopt : std::optional<DType>(in[0].dtype());
    if (!half_) return forward_wide(in);
    check(in);  // the dtypes agree before they are widened
    return narrow_all(forward_wide(widen_all(in)), *half_);
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!half_) return backward_wide(grads);
    return narrow_all(backward_wide(widen_all(grads)), *half_);
  }

 private:
  static std::vector<Tensor> widen_all(const std::vector<Tensor>& tensors) {
    std::vector<Tensor> wide;
    wide.reserve(tensors.size());
    for (const Tensor& t : tensors) wide.push_back(ops_detail::widen(t));
    return wide;
  }
  static std::vector<Tensor> narrow_all(std::vector<Tensor> tensors, DType dtype) {
    for (Tensor& t : tensors) t = ops_detail::narrow(t, dtype);
    return tensors;
  }

  std::vector<Tensor> forward_wide(const std::vector<Tensor>& in) {
    check(in);
    const std::int64_t L = layout_.layers, B = layout_.batch;
    const Tensor& w00 = in[layout_.w(0, 0)];
    const DType dtype = w00.dtype();
    const Device device = w00.device();
    H_ = w00.size(0);
    plan(in);

    const std::int64_t N = total_;
    // Index maps between the concatenation of the sequences (the order of xs) and the packed,
    // time-major layout (step t holds rows [offsets_[t], offsets_[t] + batch_sizes_[t]), one
    // per running sequence, longest first).
    std::vector<std::int64_t> pack(N), unpack(N), order(B), rank(B), final_rows(B);
    for (std::int64_t t = 0; t < steps_; ++t)
      for (std::int64_t r = 0; r < batch_sizes_[t]; ++r) {
        const std::int64_t i = order_[r];
        pack[offsets_[t] + r] = starts_[i] + t;
        unpack[starts_[i] + t] = offsets_[t] + r;
      }
    bool any_empty = false;
    for (std::int64_t i = 0; i < B; ++i) {
      order[i] = order_[i];
      rank[i] = rank_[i];
      // A sequence's final state is its row at its last step; an empty sequence keeps its
      // initial state, stored after the N packed rows.
      any_empty = any_empty || lengths_[i] == 0;
      final_rows[i] = lengths_[i] > 0 ? offsets_[lengths_[i] - 1] + rank_[i] : N + rank_[i];
    }
    const Tensor pack_idx = index_tensor(pack, device), unpack_idx = index_tensor(unpack, device);
    const Tensor order_idx = index_tensor(order, device), rank_idx = index_tensor(rank, device);
    const Tensor final_idx = index_tensor(final_rows, device);
    // The whole LSTM in one call where the device has it (cuDNN on a GPU). Dropout between
    // layers and empty sequences stay on the cell-by-cell path below, the reference.
    if (!use_dropout_ && !any_empty)
      if (std::optional<std::vector<Tensor>> outputs = forward_fused(in, pack_idx, unpack_idx)) return *outputs;

    std::vector<Tensor> saved{pack_idx, unpack_idx, order_idx, rank_idx};
    std::vector<Tensor> xs;
    for (std::int64_t i = 0; i < B; ++i) xs.push_back(in[layout_.x(i)]);
    Tensor input = take_rows_trusted(B == 1 ? xs[0] : concat(xs, 0), pack_idx, "n_step_lstm");

    std::vector<Tensor> hy, cy;
    Tensor Hs;
    for (std::int64_t l = 0; l < L; ++l) {
      Tensor mask;
      if (l > 0 && use_dropout_) {
        const Tensor keep =
            greater_equal(philox_uniform(input.shape(), global_generator(), 0, 1, dtype, device), dropout_ratio_);
        mask = where(keep, full({}, 1.0 / (1.0 - dropout_ratio_), dtype, device), zeros({}, dtype, device));
        input = mul(input, mask);
      }
      const Tensor Wx = concat({in[layout_.w(l, 0)], in[layout_.w(l, 1)], in[layout_.w(l, 2)], in[layout_.w(l, 3)]}, 0);
      const Tensor Wh = concat({in[layout_.w(l, 4)], in[layout_.w(l, 5)], in[layout_.w(l, 6)], in[layout_.w(l, 7)]}, 0);
      Wh.storage()->mark_weight();  // every time step's product may read it (a packed copy pays)
      const Tensor bias =
          add(concat({in[layout_.b(l, 0)], in[layout_.b(l, 1)], in[layout_.b(l, 2)], in[layout_.b(l, 3)]}, 0),
              concat({in[layout_.b(l, 4)], in[layout_.b(l, 5)], in[layout_.b(l, 6)], in[layout_.b(l, 7)]}, 0));
      const Tensor h0 = take_rows_trusted(layer_state(in[layout_.hx()], l), order_idx, "n_step_lstm");
      const Tensor c0 = take_rows_trusted(layer_state(in[layout_.cx()], l), order_idx, "n_step_lstm");

      // The input projection of every step at once; the gates become the activations in place.
      Tensor gates = matmul(input, Wx, false, true);
      add_(gates, bias);
      Hs = Tensor({N, H_}, dtype, device);
      Tensor Cs({N, H_}, dtype, device);
      lstm_recurrence_forward_(batch_sizes_, gates, Wh, h0, c0, Hs, Cs);
      hy.push_back(take_rows_trusted(any_empty ? concat({Hs, h0}, 0) : Hs, final_idx, "n_step_lstm"));
      cy.push_back(take_rows_trusted(any_empty ? concat({Cs, c0}, 0) : Cs, final_idx, "n_step_lstm"));
      if (recording()) {
        // The layer's own weights, not the joined Wx and Wh: those are copies (2 MB a layer at 256
        // units, held from forward to backward), which backward joins again.
        for (const Tensor& t : {input, mask, gates, Cs, Hs, h0, c0}) saved.push_back(t);
        for (std::int64_t j = 0; j < kWeightsPerLayer; ++j) saved.push_back(in[layout_.w(l, j)]);
      }
      input = Hs;
    }
    save_for_backward(std::move(saved));

    std::vector<Tensor> outputs{stack(hy, 0), stack(cy, 0)};
    const Tensor ys = take_rows_trusted(Hs, unpack_idx, "n_step_lstm");
    for (std::int64_t i = 0; i < B; ++i) outputs.push_back(ys.slice_rows(starts_[i], starts_[i] + lengths_[i]));
    return outputs;
  }

  std::vector<Tensor> backward_wide(const std::vector<Tensor>& grads) {
    if (fused_) return backward_fused(grads);
    const std::int64_t L = layout_.layers, B = layout_.batch, N = total_;
    std::vector<Tensor> out(layout_.num_inputs());
    const std::vector<Tensor>& s = saved();
    const Tensor& pack_idx = s[0];
    const Tensor& unpack_idx = s[1];
    const Tensor& order_idx = s[2];
    const Tensor& rank_idx = s[3];
    constexpr std::int64_t kSavedPerLayer = 7 + kWeightsPerLayer;
    auto layer_saved = [&](std::int64_t l, std::int64_t k) -> const Tensor& { return s[4 + kSavedPerLayer * l + k]; };
    // The four gates' weights of one kind joined, as forward used them.
    auto joined = [&](std::int64_t l, std::int64_t first) {
      return concat({layer_saved(l, 7 + first), layer_saved(l, 8 + first), layer_saved(l, 9 + first),
                     layer_saved(l, 10 + first)},
                    0);
    };

    // The lowest layer that backpropagation has to reach.
    bool any_x = false;
    for (std::int64_t i = 0; i < B; ++i) any_x = any_x || needs_input_grad(layout_.x(i));
    std::int64_t lowest = L;
    if (any_x || needs_input_grad(layout_.hx()) || needs_input_grad(layout_.cx())) lowest = 0;
    for (std::int64_t l = 0; l < L && lowest == L; ++l)
      for (std::int64_t j = 0; j < kWeightsPerLayer; ++j)
        if (needs_input_grad(layout_.w(l, j)) || needs_input_grad(layout_.b(l, j))) lowest = l;
    if (lowest == L) return out;

    const Tensor& ghy = grads[0];
    const Tensor& gcy = grads[1];
    // The gradient arriving at each packed hidden state of the current layer.
    Tensor gHs = packed_output_grads(grads, pack_idx);
    std::vector<Tensor> ghx(L), gcx(L);

    for (std::int64_t l = L - 1; l >= lowest; --l) {
      const Tensor& input = layer_saved(l, 0);
      const Tensor& mask = layer_saved(l, 1);
      const Tensor& act = layer_saved(l, 2);
      const Tensor& Cs = layer_saved(l, 3);
      const Tensor& Hs = layer_saved(l, 4);
      const Tensor& h0 = layer_saved(l, 5);
      const Tensor& c0 = layer_saved(l, 6);
      const Tensor Wh = joined(l, 4);
      Wh.storage()->mark_weight();  // every time step's product may read it

      // dh, dc: the gradients of the running state, sorted; a sequence's rows start as its
      // gradient of hy, cy and are first touched at its last step.
      Tensor dh = take_rows_trusted(layer_state(ghy, l), order_idx, "n_step_lstm");
      Tensor dc = take_rows_trusted(layer_state(gcy, l), order_idx, "n_step_lstm");
      Tensor ggates({N, 4 * H_}, act.dtype(), act.device());
      lstm_recurrence_backward_(batch_sizes_, act, Cs, c0, Wh, gHs, dh, dc, ggates);
      if (needs_input_grad(layout_.hx())) ghx[l] = take_rows_trusted(dh, rank_idx, "n_step_lstm");
      if (needs_input_grad(layout_.cx())) gcx[l] = take_rows_trusted(dc, rank_idx, "n_step_lstm");

      auto any_needed = [&](std::int64_t j0, bool bias) {
        for (std::int64_t j = j0; j < j0 + 4; ++j)
          if (needs_input_grad(bias ? layout_.b(l, j) : layout_.w(l, j))) return true;
        return false;
      };
      // Weight gradients as single GEMMs over all steps: gates^T @ inputs, gates^T @ h_prev.
      if (any_needed(0, false)) {
        const Tensor gWx = matmul(ggates, input, true, false);
        for (std::int64_t j = 0; j < 4; ++j)
          if (needs_input_grad(layout_.w(l, j))) out[layout_.w(l, j)] = gWx.slice_rows(j * H_, (j + 1) * H_);
      }
      if (any_needed(4, false)) {
        Tensor h_prev({N, H_}, Hs.dtype(), Hs.device());
        for (std::int64_t t = 0; t < steps_; ++t) {
          const std::int64_t bt = batch_sizes_[t], off = offsets_[t];
          h_prev.slice_rows(off, off + bt)
              .copy_(t == 0 ? h0.slice_rows(0, bt) : Hs.slice_rows(offsets_[t - 1], offsets_[t - 1] + bt));
        }
        const Tensor gWh = matmul(ggates, h_prev, true, false);
        for (std::int64_t j = 0; j < 4; ++j)
          if (needs_input_grad(layout_.w(l, 4 + j))) out[layout_.w(l, 4 + j)] = gWh.slice_rows(j * H_, (j + 1) * H_);
      }
      if (any_needed(0, true) || any_needed(4, true)) {
        const Tensor gb = sum(ggates, {0});
        for (std::int64_t j = 0; j < kWeightsPerLayer; ++j)
          if (needs_input_grad(layout_.b(l, j))) out[layout_.b(l, j)] = gb.slice_rows((j % 4) * H_, (j % 4 + 1) * H_);
      }
      // The gradient of this layer's input: the previous layer's hidden states, or xs.
      if (l > lowest || (l == 0 && any_x)) {
        Tensor ginput = matmul(ggates, joined(l, 0));
        if (mask.defined()) ginput = mul(ginput, mask);
        if (l > 0) {
          gHs = ginput;
        } else {
          const Tensor gx = take_rows_trusted(ginput, unpack_idx, "n_step_lstm");
          for (std::int64_t i = 0; i < B; ++i)
            if (needs_input_grad(layout_.x(i))) out[layout_.x(i)] = gx.slice_rows(starts_[i], starts_[i] + lengths_[i]);
        }
      }
    }
    if (needs_input_grad(layout_.hx())) out[layout_.hx()] = stack(ghx, 0);
    if (needs_input_grad(layout_.cx())) out[layout_.cx()] = stack(gcx, 0);
    return out;
  }

 private:
  // The gradient of ys concatenated and packed like the input rows.
  Tensor packed_output_grads(const std::vector<Tensor>& grads, const Tensor& pack_idx) const {
    std::vector<Tensor> gys(grads.begin() + 2, grads.end());
    return take_rows_trusted(layout_.batch == 1 ? gys[0] : concat(gys, 0), pack_idx, "n_step_lstm");
  }

  // Rows of a state [L, B, H] gathered through an [L * B] index (between the user's order of the
  // sequences and the sorted one).
  Tensor gather_state(const Tensor& state, const Tensor& idx) const {
    const std::int64_t L = layout_.layers, B = layout_.batch;
    return take_rows_trusted(state.reshape({L * B, H_}), idx, "n_step_lstm").reshape({L, B, H_});
  }

  // The fused forward (core/ops/recurrent.h): nullopt when the device has none, else the outputs.
  std::optional<std::vector<Tensor>> forward_fused(const std::vector<Tensor>& in, const Tensor& pack_idx,
                                                   const Tensor& unpack_idx) {
    const std::int64_t L = layout_.layers, B = layout_.batch;
    const Tensor& w00 = in[layout_.w(0, 0)];
    LstmSequenceShape shape;
    shape.layers = L;
    shape.hidden = H_;
    shape.input_size = w00.size(1);
    for (std::int64_t r = 0; r < B; ++r) shape.lengths.push_back(lengths_[order_[r]]);
    std::vector<std::int64_t> sort(L * B), unsort(L * B);
    for (std::int64_t l = 0; l < L; ++l)
      for (std::int64_t i = 0; i < B; ++i) {
        sort[l * B + i] = l * B + order_[i];
        unsort[l * B + i] = l * B + rank_[i];
      }
    const Tensor sort_idx = index_tensor(sort, w00.device()), unsort_idx = index_tensor(unsort, w00.device());
    std::vector<Tensor> xs, weights;
    for (std::int64_t i = 0; i < B; ++i) xs.push_back(in[layout_.x(i)]);
    for (std::int64_t l = 0; l < L; ++l) {
      for (std::int64_t j = 0; j < kWeightsPerLayer; ++j) weights.push_back(in[layout_.w(l, j)]);
      for (std::int64_t j = 0; j < kWeightsPerLayer; ++j) weights.push_back(in[layout_.b(l, j)]);
    }
    const Tensor x = take_rows_trusted(B == 1 ? xs[0] : concat(xs, 0), pack_idx, "n_step_lstm");
    const Tensor hx = gather_state(in[layout_.hx()], sort_idx), cx = gather_state(in[layout_.cx()], sort_idx);
    std::optional<LstmSequence> r = lstm_sequence_forward(shape, x, hx, cx, weights, recording());
    if (!r) return std::nullopt;
    fused_ = true;
    fused_shape_ = shape;
    if (recording()) save_for_backward({pack_idx, unpack_idx, sort_idx, unsort_idx, x, hx, cx, r->y,
                                        r->packed_weights, r->reserve});
    std::vector<Tensor> outputs{gather_state(r->hy, unsort_idx), gather_state(r->cy, unsort_idx)};
    const Tensor ys = take_rows_trusted(r->y, unpack_idx, "n_step_lstm");
    for (std::int64_t i = 0; i < B; ++i) outputs.push_back(ys.slice_rows(starts_[i], starts_[i] + lengths_[i]));
    return outputs;
  }

  std::vector<Tensor> backward_fused(const std::vector<Tensor>& grads) {
    const std::int64_t L = layout_.layers, B = layout_.batch;
    std::vector<Tensor> out(layout_.num_inputs());
    const std::vector<Tensor>& s = saved();
    const Tensor &pack_idx = s[0], &unpack_idx = s[1], &sort_idx = s[2], &unsort_idx = s[3];
    const Tensor &x = s[4], &hx = s[5], &cx = s[6];
    LstmSequence forward;
    forward.y = s[7];
    forward.packed_weights = s[8];
    forward.reserve = s[9];
    bool any_x = false, weight_grads = false;
    for (std::int64_t i = 0; i < B; ++i) any_x = any_x || needs_input_grad(layout_.x(i));
    for (std::int64_t l = 0; l < L; ++l)
      for (std::int64_t j = 0; j < kWeightsPerLayer; ++j)
        weight_grads = weight_grads || needs_input_grad(layout_.w(l, j)) || needs_input_grad(layout_.b(l, j));
    if (!any_x && !weight_grads && !needs_input_grad(layout_.hx()) && !needs_input_grad(layout_.cx())) return out;

    const LstmSequenceGrads g =
        lstm_sequence_backward(fused_shape_, forward, graph_retained(), x, hx, cx, packed_output_grads(grads, pack_idx),
                               gather_state(grads[0], sort_idx), gather_state(grads[1], sort_idx), weight_grads);
    if (needs_input_grad(layout_.hx())) out[layout_.hx()] = gather_state(g.ghx, unsort_idx);
    if (needs_input_grad(layout_.cx())) out[layout_.cx()] = gather_state(g.gcx, unsort_idx);
    if (any_x) {
      const Tensor gx = take_rows_trusted(g.gx, unpack_idx, "n_step_lstm");
      for (std::int64_t i = 0; i < B; ++i)
        if (needs_input_grad(layout_.x(i))) out[layout_.x(i)] = gx.slice_rows(starts_[i], starts_[i] + lengths_[i]);
    }
    if (weight_grads)
      for (std::int64_t l = 0; l < L; ++l)
        for (std::int64_t j = 0; j < kWeightsPerLayer; ++j) {
          if (needs_input_grad(layout_.w(l, j))) out[layout_.w(l, j)] = g.gweights[16 * l + j];
          if (needs_input_grad(layout_.b(l, j))) out[layout_.b(l, j)] = g.gweights[16 * l + 8 + j];
        }
    return out;
  }

  // Shapes, dtypes and devices of every input, with messages naming the argument.
  void check(const std::vector<Tensor>& in) const {
    const std::int64_t L = layout_.layers, B = layout_.batch;
    const Tensor& w00 = in[layout_.w(0, 0)];
    TANDEM_CHECK(w00.dim() == 2, "n_step_lstm: ws[0][0] must be 2-D [H, in_size], got ", w00.description());
    TANDEM_CHECK(is_floating(w00.dtype()), "n_step_lstm: the weights must be floating, ws[0][0] is ",
                 w00.description());
    const std::int64_t H = w00.size(0), in_size = w00.size(1);
    auto same_kind = [&](const Tensor& t, const std::string& what) {
      TANDEM_CHECK(t.dtype() == w00.dtype(), "n_step_lstm: ", what, " ", t.description(), " has dtype ", t.dtype(),
                   " but ws[0][0] is ", w00.description());
      TANDEM_CHECK(t.device() == w00.device(), "n_step_lstm: ", what, " is on ", t.device(), " but ws[0][0] on ",
                   w00.device());
    };
    for (std::int64_t l = 0; l < L; ++l)
      for (std::int64_t j = 0; j < kWeightsPerLayer; ++j) {
        const std::string wname = "ws[" + std::to_string(l) + "][" + std::to_string(j) + "]";
        const std::string bname = "bs[" + std::to_string(l) + "][" + std::to_string(j) + "]";
        const Tensor& w = in[layout_.w(l, j)];
        const Tensor& b = in[layout_.b(l, j)];
        same_kind(w, wname);
        same_kind(b, bname);
        const Shape expected{H, j < 4 && l == 0 ? in_size : H};
        TANDEM_CHECK(w.shape() == expected, "n_step_lstm: ", wname, " ", w.description(), " must be ", expected,
                     j < 4 ? (l == 0 ? " ([H, in_size])" : " ([H, H] above layer 0)") : " ([H, H])");
        TANDEM_CHECK(b.shape() == Shape{H}, "n_step_lstm: ", bname, " ", b.description(), " must be [H] = [", H, "]");
      }
    for (std::int64_t i = 0; i < B; ++i) {
      const Tensor& x = in[layout_.x(i)];
      const std::string name = "xs[" + std::to_string(i) + "]";
      same_kind(x, name);
      TANDEM_CHECK(x.dim() == 2, "n_step_lstm: ", name, " ", x.description(), " must be 2-D [T, in_size]");
      TANDEM_CHECK(x.size(1) == in_size, "n_step_lstm: ", name, " ", x.description(), " has ", x.size(1),
                   " features per step but ws[0][0..3] expect in_size = ", in_size);
    }
    const Shape state{L, B, H};
    for (const char* which : {"hx", "cx"}) {
      const Tensor& t = in[which[0] == 'h' ? layout_.hx() : layout_.cx()];
      same_kind(t, which);
      TANDEM_CHECK(t.shape() == state, "n_step_lstm: ", which, " ", t.description(), " must be [n_layers, B, H] = ",
                   state);
    }
  }

  // Sorts the sequences by decreasing length and lays out the packed time-major batch.
  void plan(const std::vector<Tensor>& in) {
    const std::int64_t B = layout_.batch;
    lengths_.resize(B);
    starts_.resize(B);
    total_ = 0;
    for (std::int64_t i = 0; i < B; ++i) {
      lengths_[i] = in[layout_.x(i)].size(0);
      starts_[i] = total_;
      total_ += lengths_[i];
    }
    order_.resize(B);
    std::iota(order_.begin(), order_.end(), 0);
    std::stable_sort(order_.begin(), order_.end(),
                     [&](std::int64_t a, std::int64_t b) { return lengths_[a] > lengths_[b]; });
    rank_.resize(B);
    for (std::int64_t r = 0; r < B; ++r) rank_[order_[r]] = r;
    steps_ = B == 0 ? 0 : lengths_[order_[0]];
    batch_sizes_.assign(steps_, 0);
    offsets_.assign(steps_, 0);
    for (std::int64_t t = 0, off = 0; t < steps_; ++t) {
      while (batch_sizes_[t] < B && lengths_[order_[batch_sizes_[t]]] > t) ++batch_sizes_[t];
      offsets_[t] = off;
      off += batch_sizes_[t];
    }
  }

  Layout layout_;
  double dropout_ratio_;
  bool use_dropout_;
  std::int64_t H_ = 0, total_ = 0, steps_ = 0;
  std::vector<std::int64_t> lengths_, starts_, order_, rank_, batch_sizes_, offsets_;
  bool fused_ = false;  // forward ran on the device's fused LSTM (saved() holds its tensors)
  std::optional<DType> half_;  // the inputs' 16-bit dtype, computed in f32
  LstmSequenceShape fused_shape_;
};

}  // namespace

NStepLSTMResult n_step_lstm(std::int64_t n_layers, double dropout_ratio, const Variable& hx, const Variable& cx,
                            const std::vector<Variables>& ws, const std::vector<Variables>& bs, const Variables& xs) {
  TANDEM_CHECK(n_layers >= 1, "n_step_lstm: n_layers must be at least 1, got ", n_layers);
  TANDEM_CHECK(dropout_ratio >= 0 && dropout_ratio < 1, "n_step_lstm: dropout_ratio must be in [0, 1), got ",
               dropout_ratio);
  TANDEM_CHECK(static_cast<std::int64_t>(ws.size()) == n_layers, "n_step_lstm: ws holds ", ws.size(),
               " layers but n_layers is ", n_layers);
  TANDEM_CHECK(static_cast<std::int64_t>(bs.size()) == n_layers, "n_step_lstm: bs holds ", bs.size(),
               " layers but n_layers is ", n_layers);
  for (std::int64_t l = 0; l < n_layers; ++l) {
    TANDEM_CHECK(ws[l].size() == kWeightsPerLayer, "n_step_lstm: ws[", l, "] holds ", ws[l].size(),
                 " matrices, expected 8");
    TANDEM_CHECK(bs[l].size() == kWeightsPerLayer, "n_step_lstm: bs[", l, "] holds ", bs[l].size(),
                 " vectors, expected 8");
    for (std::int64_t j = 0; j < kWeightsPerLayer; ++j) {
      TANDEM_CHECK(ws[l][j].defined(), "n_step_lstm: ws[", l, "][", j, "] is undefined");
      TANDEM_CHECK(bs[l][j].defined(), "n_step_lstm: bs[", l, "][", j, "] is undefined");
    }
  }
  TANDEM_CHECK(!xs.empty(), "n_step_lstm: xs is empty (needs at least one sequence)");
  for (std::size_t i = 0; i < xs.size(); ++i) TANDEM_CHECK(xs[i].defined(), "n_step_lstm: xs[", i, "] is undefined");
  const Tensor& w00 = ws[0][0].data();
  TANDEM_CHECK(w00.dim() == 2, "n_step_lstm: ws[0][0] must be 2-D [H, in_size], got ", w00.description());
  // Missing initial states are zeros (constants: they get no gradient).
  const Shape state{n_layers, static_cast<std::int64_t>(xs.size()), w00.size(0)};
  const Variable h = hx.defined() ? hx : Variable(zeros(state, w00.dtype(), w00.device()));
  const Variable c = cx.defined() ? cx : Variable(zeros(state, w00.dtype(), w00.device()));
  const bool use_dropout = train_mode() && dropout_ratio > 0 && n_layers > 1;
  return unpack_outputs(call<NStepLSTM>(pack_inputs(h, c, ws, bs, xs), n_layers,
                                        static_cast<std::int64_t>(xs.size()), dropout_ratio, use_dropout));
}

}  // namespace functions
}  // namespace tandem
