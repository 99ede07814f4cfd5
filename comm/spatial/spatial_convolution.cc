#include "comm/spatial/spatial_convolution.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "autograd/functions/array.h"
#include "autograd/functions/deconvolution.h"
#include "autograd/functions/reduction.h"
#include "comm/functions/communication_node.h"
#include "comm/spatial/halo_exchange.h"
#include "core/error.h"
#include "core/ops.h"

namespace tandem {

namespace {

constexpr const char* kConv = "spatial_convolution_2d";
constexpr const char* kDeconv = "spatial_deconvolution_2d";
constexpr std::int64_t kFar = std::numeric_limits<std::int64_t>::max() / 4;

bool initial_overlap() {
  const char* env = std::getenv("TANDEM_SPATIAL_OVERLAP");
  return env == nullptr || std::string(env) != "0";
}
bool g_overlap = initial_overlap();

std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return -floor_div(-a, b); }

WindowAxis axis(std::int64_t kernel, std::int64_t stride, std::int64_t pad, std::int64_t dilate) {
  return {kernel, stride, pad, dilate, false};
}

// The input rect the windows of outputs `out` read (empty when out is).
Rect window_input(const Rect& out, const WindowAxis& wy, const WindowAxis& wx) {
  if (out.empty()) return {};
  return {wy.first_input(out.y0), wy.input_end(out.y1), wx.first_input(out.x0), wx.input_end(out.x1)};
}

// The outputs in [o0, o1) whose windows lie within [lo, hi).
std::pair<std::int64_t, std::int64_t> inside(std::int64_t o0, std::int64_t o1, std::int64_t lo, std::int64_t hi,
                                             const WindowAxis& w) {
  const std::int64_t first = lo <= -kFar ? o0 : std::max(o0, ceil_div(lo + w.pad, w.stride));
  const std::int64_t last = hi >= kFar ? o1 : std::min(o1, floor_div(hi + w.pad - w.extent(), w.stride) + 1);
  return {first, std::max(first, last)};
}

// Conv2DParams without padding (the padding is in the exchanged box).
Conv2DParams unpadded(const Conv2DParams& p) {
  Conv2DParams q = p;
  q.pad_y = q.pad_x = 0;
  return q;
}

IndexList rect_in(const Rect& part, const Rect& whole) {
  return {Index::all(), Index::all(), Index::range(part.y0 - whole.y0, part.y1 - whole.y0),
          Index::range(part.x0 - whole.x0, part.x1 - whole.x0)};
}

class SpatialConvolution final : public functions::CommunicationNode {
 public:
  SpatialConvolution(Communicator& comm, SpatialLayout in_layout, SpatialLayout out_layout, Conv2DParams params,
                     std::int64_t kh, std::int64_t kw)
      : CommunicationNode(comm, std::nullopt, Participation::once_recorded),
        in_layout_(std::move(in_layout)),
        out_layout_(std::move(out_layout)),
        params_(params),
        wy_(axis(kh, params.stride_y, params.pad_y, params.dilate_y)),
        wx_(axis(kw, params.stride_x, params.pad_x, params.dilate_x)) {}
  std::string name() const override { return kConv; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    remember_inputs(in);
    const Tensor &x = in[0], &W = in[1];
    const Tensor b = in.size() > 2 ? in[2] : Tensor();
    const int me = comm_->rank();
    const std::int64_t n = x.size(0);
    TANDEM_CHECK(x.size(1) == W.size(1) * params_.groups, kConv, ": rank ", me, ": x ", x.description(), " has ",
                 x.size(1), " channels but W ", W.description(), " takes ", W.size(1) * params_.groups, " (groups ",
                 params_.groups, ")");
    plan_.op = kConv;
    for (int r = 0; r < comm_->size(); ++r) {
      plan_.held.push_back({0, n, in_layout_.tile(r)});
      plan_.needed.push_back({0, n, window_input(out_layout_.tile(r), wy_, wx_)});
    }
    const Rect out = out_layout_.tile(me), need = plan_.needed[me].rect, own = in_layout_.tile(me);
    HaloExchange exchange(*comm_, plan_, x, 0.0);
    // The interior: outputs whose windows read only this rank's tile or the padding.
    Rect interior;
    if (spatial_overlap() && !out.empty() && !own.empty()) {
      const auto [iy0, iy1] =
          inside(out.y0, out.y1, own.y0 == 0 ? -kFar : own.y0, own.y1 == in_layout_.height() ? kFar : own.y1, wy_);
      const auto [ix0, ix1] =
          inside(out.x0, out.x1, own.x0 == 0 ? -kFar : own.x0, own.x1 == in_layout_.width() ? kFar : own.x1, wx_);
      interior = {iy0, iy1, ix0, ix1};
    }
    Tensor y;
    if (interior.empty()) {
      y = convolve(exchange.finish(), need, out, W, b);
    } else {
      // While the halo travels, every output from the buffer as it is (the halo not there yet):
      // right in the interior. Then the frame around the interior again, from the whole input.
      y = convolve(exchange.buffer(), need, out, W, b);
      const Tensor X = exchange.finish();
      for (const Rect& frame :
           {Rect{out.y0, interior.y0, out.x0, out.x1}, Rect{interior.y1, out.y1, out.x0, out.x1},
            Rect{interior.y0, interior.y1, out.x0, interior.x0}, Rect{interior.y0, interior.y1, interior.x1, out.x1}})
        if (!frame.empty()) index_put_(y, rect_in(frame, out), convolve(X, need, frame, W, b));
    }
    exchange.finish();
    // x and the halo, not the buffer they make: x is often kept by another layer already.
    std::vector<Tensor> saved{x, W};
    for (const Tensor& part : exchange.received()) saved.push_back(part);
    save_for_backward(std::move(saved));
    return {y};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& gy_in) override {
    const std::vector<Tensor>& kept = saved();
    const Tensor& W = kept[1];
    const Tensor X =
        HaloExchange::assemble(plan_, comm_->rank(), kept[0], std::vector<Tensor>(kept.begin() + 2, kept.end()), 0.0);
    const Tensor& gy = gy_in[0];
    const bool any = X.numel() > 0 && gy.numel() > 0;
    std::vector<Tensor> grads(inputs_.size());
    std::optional<HaloGradientExchange> exchange;
    if (needs_input_grad(0)) {
      const Tensor gX =
          any ? conv2d_grad_input(gy, W, X.shape(), unpadded(params_)) : zeros(X.shape(), X.dtype(), X.device());
      exchange.emplace(*comm_, plan_, gX, inputs_[0].shape);
    }
    // The weight gradients while the halo's gradient travels.
    if (needs_input_grad(1))
      grads[1] =
          any ? conv2d_grad_weight(X, gy, W.shape(), unpadded(params_)) : zeros(W.shape(), W.dtype(), W.device());
    if (inputs_.size() > 2 && needs_input_grad(2)) grads[2] = sum(gy, {0, 2, 3});
    if (exchange) grads[0] = exchange->finish();
    return grads;
  }

 private:
  // The outputs `part` from X, which holds the input rect `need`.
  Tensor convolve(const Tensor& X, const Rect& need, const Rect& part, const Tensor& W, const Tensor& b) const {
    if (part.empty()) return zeros({X.size(0), W.size(0), part.rows(), part.cols()}, X.dtype(), X.device());
    const Rect window = window_input(part, wy_, wx_);
    return conv2d(window == need ? X : index(X, rect_in(window, need)), W, b, unpadded(params_));
  }

  SpatialLayout in_layout_, out_layout_;
  Conv2DParams params_;
  WindowAxis wy_, wx_;
  ExchangePlan plan_;
};

}  // namespace

bool spatial_overlap() { return g_overlap; }
void set_spatial_overlap(bool on) { g_overlap = on; }

namespace functions {

SpatialMap spatial_convolution_2d(const SpatialMap& x, const Variable& W, const Variable& b,
                                  const Conv2DOptions& options) {
  x.check(kConv);
  TANDEM_CHECK(W.defined() && W.dim() == 4, kConv, ": W must be [out_c, C / groups, kh, kw], got ",
               W.defined() ? W.description() : std::string("nothing"));
  const WindowAxis wy = axis(W.shape()[2], options.stride_y, options.pad_y, options.dilate_y);
  const WindowAxis wx = axis(W.shape()[3], options.stride_x, options.pad_x, options.dilate_x);
  const SpatialLayout out = x.layout.after_window(wy, wx, kConv);
  Variables inputs{x.local, W};
  if (b.defined()) inputs.push_back(b);
  return {call<SpatialConvolution>(inputs, *x.comm, x.layout, out, options, W.shape()[2], W.shape()[3])[0], out,
          x.comm};
}

SpatialMap spatial_deconvolution_2d(const SpatialMap& x, const Variable& W, const Variable& b,
                                    const Conv2DOptions& options, std::optional<std::int64_t> out_h,
                                    std::optional<std::int64_t> out_w) {
  x.check(kDeconv);
  TANDEM_CHECK(W.defined() && W.dim() == 4, kDeconv, ": W must be [in_c, out_c / groups, kh, kw], got ",
               W.defined() ? W.description() : std::string("nothing"));
  const WindowAxis wy = axis(W.shape()[2], options.stride_y, options.pad_y, options.dilate_y);
  const WindowAxis wx = axis(W.shape()[3], options.stride_x, options.pad_x, options.dilate_x);
  const std::int64_t oh = out_h.value_or(wy.stride * (x.layout.height() - 1) + wy.extent() - 2 * wy.pad);
  const std::int64_t ow = out_w.value_or(wx.stride * (x.layout.width() - 1) + wx.extent() - 2 * wx.pad);
  TANDEM_CHECK(oh > 0 && ow > 0 && wy.output_size(oh, kDeconv) == x.layout.height() &&
                   wx.output_size(ow, kDeconv) == x.layout.width(),
               kDeconv, ": an output of ", oh, " x ", ow, " does not convolve back to the input's ", x.layout.height(),
               " x ", x.layout.width(), " with kernel ", W.shape()[2], " x ", W.shape()[3], ", stride ", wy.stride,
               " x ", wx.stride, ", pad ", wy.pad, " x ", wx.pad);
  const SpatialLayout out = x.layout.after_transposed_window(wy, wx, oh, ow);
  // The inputs that reach outputs [o0, o1): i * stride - pad + extent > o0 and i * stride - pad < o1.
  auto reach = [](std::int64_t o0, std::int64_t o1, const WindowAxis& w) {
    return std::pair{floor_div(o0 + w.pad - w.extent(), w.stride) + 1, ceil_div(o1 + w.pad, w.stride)};
  };
  const std::int64_t n = x.local.shape()[0];
  ExchangePlan plan;
  plan.op = kDeconv;
  for (int r = 0; r < x.comm->size(); ++r) {
    plan.held.push_back({0, n, x.layout.tile(r)});
    const Rect o = out.tile(r);
    Rect need;
    if (!o.empty()) {
      const auto [y0, y1] = reach(o.y0, o.y1, wy);
      const auto [x0, x1] = reach(o.x0, o.x1, wx);
      need = {y0, y1, x0, x1};
    }
    plan.needed.push_back({0, n, need});
  }
  const Rect o = out.tile(x.comm->rank()), need = plan.needed[x.comm->rank()].rect;
  const Variable X = exchange_boxes(*x.comm, plan, x.local);
  if (o.empty()) {
    const std::int64_t out_c = W.shape()[1] * options.groups;
    // Connected to X, so that this rank answers the exchange's backward too.
    return {broadcast_to(sum(X), {n, out_c, o.rows(), o.cols()}), out, x.comm};
  }
  const Variable full = deconvolution_2d(X, W, b, unpadded(options));
  // full's first row and column are at need.y0 * stride - pad (and likewise for columns).
  const std::int64_t ry = o.y0 - (need.y0 * wy.stride - wy.pad), rx = o.x0 - (need.x0 * wx.stride - wx.pad);
  const Variable y =
      get_item(full, {Index::all(), Index::all(), Index::range(ry, ry + o.rows()), Index::range(rx, rx + o.cols())});
  return {y, out, x.comm};
}

}  // namespace functions

}  // namespace tandem
