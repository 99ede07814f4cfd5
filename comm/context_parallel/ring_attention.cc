#include "comm/context_parallel/ring_attention.h"

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "comm/functions/communication_node.h"
#include "core/ops.h"
#include "core/ops/half_compute.h"

namespace tandem::functions {

namespace {

constexpr int kRingTag = 7;
constexpr double kInf = std::numeric_limits<double>::infinity();

// One run's rows of a [B, H, T_local, x] tensor, by the run's offset within its rank's rows.
struct LocalRun {
  PositionRun run;
  std::int64_t offset = 0;
};
std::vector<LocalRun> local_runs(const SequenceLayout& layout, int rank) {
  std::vector<LocalRun> out;
  std::int64_t offset = 0;
  for (const PositionRun& run : layout.runs(rank)) {
    out.push_back({run, offset});
    offset += run.length;
  }
  return out;
}
Tensor rows_of(const Tensor& x, const LocalRun& r) { return slice(x, 2, r.offset, r.offset + r.run.length); }

// Whether any query of run qr may see any key of run kr (by position; segments aside).
bool may_see(const AttentionMask& mask, const PositionRun& qr, const PositionRun& kr) {
  const std::int64_t p0 = qr.start, p1 = qr.start + qr.length - 1, s0 = kr.start, s1 = kr.start + kr.length - 1;
  if (mask.causal && s0 > p1) return false;
  if (mask.window > 0 && (p0 - s1 >= mask.window || (!mask.causal && s0 - p1 >= mask.window))) return false;
  return true;
}

// The mask of one (query run, key run) pair: global positions, the runs' segment ids.
AttentionMask pair_mask(const AttentionMask& mask, const PositionRun& qr, const PositionRun& kr) {
  AttentionMask m;
  m.causal = mask.causal;
  m.window = mask.window;
  m.query_start = qr.start;
  m.key_start = kr.start;
  if (mask.query_segments.defined()) {
    m.query_segments = slice(mask.query_segments, 1, qr.start, qr.start + qr.length);
    m.key_segments = slice(mask.key_segments, 1, kr.start, kr.start + kr.length);
  }
  return m;
}

// (out, lse) += (o, l): the softmax over the union of two sets of keys, from each set's
// normalised output and log-sum-exp. A query that sees nothing in a set has lse -inf there.
void merge(Tensor& out, Tensor& lse, const Tensor& o, const Tensor& l) {
  if (!out.defined()) {
    out = o;
    lse = l;
    return;
  }
  const Tensor top = maximum(lse, l);
  const Tensor seen = not_equal(top, -kInf);
  const Tensor zero = zeros({}, lse.dtype(), lse.device());
  const Tensor shift = where(seen, top, zero);
  const Tensor a = exp(sub(lse, shift)), b = exp(sub(l, shift));
  const Tensor total = where(seen, add(a, b), full({}, 1.0, lse.dtype(), lse.device()));
  const Shape wide{lse.size(0), lse.size(1), lse.size(2), 1};
  out = add(mul(out, div(a, total).reshape(wide)), mul(o, div(b, total).reshape(wide)));
  lse = where(seen, add(shift, log(total)), full({}, -kInf, lse.dtype(), lse.device()));
}

class RingAttention : public CommunicationNode {
 public:
  RingAttention(Communicator& comm, SequenceLayout layout, AttentionMask mask, double scale, AttentionDropout dropout)
      : CommunicationNode(comm), layout_(std::move(layout)), mask_(std::move(mask)), scale_(scale), dropout_(dropout) {}
  std::string name() const override { return "ring_attention"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    remember_inputs(in);
    const Tensor q = ops_detail::widen(in[0]), k = ops_detail::widen(in[1]), v = ops_detail::widen(in[2]);
    check(q, k, v);
    const int R = comm_->size(), r = comm_->rank();
    const std::vector<LocalRun> mine = local_runs(layout_, r);
    std::vector<Tensor> outs(mine.size()), lses(mine.size());
    Tensor kc = k, vc = v;
    for (int s = 0; s < R; ++s) {
      const int source = (r - s + R) % R;
      if (s + 1 < R) send_around(kc, vc);
      const std::vector<LocalRun> theirs = local_runs(layout_, source);
      for (std::size_t i = 0; i < mine.size(); ++i)
        for (const LocalRun& kr : theirs) {
          if (!may_see(mask_, mine[i].run, kr.run)) continue;
          const AttentionOutput part = fused_attention_forward(rows_of(q, mine[i]), rows_of(kc, kr), rows_of(vc, kr),
                                                               pair_mask(mask_, mine[i].run, kr.run), scale_, dropout_);
          merge(outs[i], lses[i], part.out, part.lse);
        }
      if (s + 1 < R) receive_around(kc, vc, q.device());
    }
    // Queries that saw no key anywhere: output 0, log-sum-exp -inf.
    for (std::size_t i = 0; i < mine.size(); ++i)
      if (!outs[i].defined()) {
        outs[i] = zeros({q.size(0), q.size(1), mine[i].run.length, v.size(3)}, q.dtype(), q.device());
        lses[i] = full({q.size(0), q.size(1), mine[i].run.length}, -kInf, q.dtype(), q.device());
      }
    const Tensor out =
        mine.empty() ? zeros({q.size(0), q.size(1), 0, v.size(3)}, q.dtype(), q.device()) : concat(outs, 2);
    const Tensor lse = mine.empty() ? zeros({q.size(0), q.size(1), 0}, q.dtype(), q.device()) : concat(lses, 2);
    save_for_backward({q, k, v, out, lse});
    return {ops_detail::narrow(out, in[0].dtype())};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    const std::vector<Tensor>& saved_tensors = saved();
    const Tensor &q = saved_tensors[0], &k = saved_tensors[1], &v = saved_tensors[2], &out = saved_tensors[3],
                 &lse = saved_tensors[4];
    const Tensor gout = ops_detail::widen(gy[0]);
    const int R = comm_->size(), r = comm_->rank();
    const std::vector<LocalRun> mine = local_runs(layout_, r);
    std::vector<Tensor> gq(mine.size());
    Tensor kc = k, vc = v, gkc = zeros(k.shape(), k.dtype(), k.device()), gvc = zeros(v.shape(), v.dtype(), v.device());
    for (int s = 0; s < R; ++s) {
      const int source = (r - s + R) % R;
      if (s + 1 < R) send_around(kc, vc);
      const std::vector<LocalRun> theirs = local_runs(layout_, source);
      std::vector<Tensor> gk_runs, gv_runs;
      for (const LocalRun& kr : theirs) {
        Tensor gk = rows_of(gkc, kr), gv = rows_of(gvc, kr);
        for (std::size_t i = 0; i < mine.size(); ++i) {
          if (!may_see(mask_, mine[i].run, kr.run)) continue;
          const AttentionGradients g = fused_attention_backward(
              rows_of(q, mine[i]), rows_of(kc, kr), rows_of(vc, kr), rows_of(out, mine[i]), rows_of(lse, mine[i]),
              rows_of(gout, mine[i]), pair_mask(mask_, mine[i].run, kr.run), scale_, dropout_);
          gq[i] = gq[i].defined() ? add(gq[i], g.q) : g.q;
          gk = add(gk, g.k);
          gv = add(gv, g.v);
        }
        gk_runs.push_back(gk);
        gv_runs.push_back(gv);
      }
      if (!theirs.empty()) {
        gkc = gk_runs.size() == 1 ? gk_runs[0] : concat(gk_runs, 2);
        gvc = gv_runs.size() == 1 ? gv_runs[0] : concat(gv_runs, 2);
      }
      // The gradients of the keys and values held now go on with them (after the last step, home).
      if (R > 1) send_around(gkc, gvc);
      if (s + 1 < R) receive_around(kc, vc, q.device());
      if (R > 1) receive_around(gkc, gvc, q.device());
    }
    for (std::size_t i = 0; i < mine.size(); ++i)
      if (!gq[i].defined()) gq[i] = zeros(rows_of(q, mine[i]).shape(), q.dtype(), q.device());
    const Tensor gq_all = mine.empty() ? zeros(q.shape(), q.dtype(), q.device()) : concat(gq, 2);
    return on_input_devices({ops_detail::narrow(gq_all, gy[0].dtype()), ops_detail::narrow(gkc, gy[0].dtype()),
                             ops_detail::narrow(gvc, gy[0].dtype())});
  }

 private:
  void check(const Tensor& q, const Tensor& k, const Tensor& v) const {
    const int r = comm_->rank();
    TANDEM_CHECK(layout_.ranks() == comm_->size(), "ring_attention: the layout has ", layout_.ranks(),
                 " ranks but the communicator ", comm_->size());
    const std::int64_t n = layout_.local_length(r);
    TANDEM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(2) == n && k.size(2) == n && v.size(2) == n,
                 "ring_attention: rank ", r, " holds ", n, " positions of the sequence, so q, k and v must be [B, H, ",
                 n, ", d], got q ", q.description(), ", k ", k.description(), ", v ", v.description());
  }
  void send_around(const Tensor& a, const Tensor& b) {
    const int next = (comm_->rank() + 1) % comm_->size();
    comm_->isend(a, next, kRingTag);
    comm_->isend(b, next, kRingTag);
  }
  void receive_around(Tensor& a, Tensor& b, const Device& device) {
    const int previous = (comm_->rank() - 1 + comm_->size()) % comm_->size();
    a = comm_->recv(previous, kRingTag, device);
    b = comm_->recv(previous, kRingTag, device);
  }

  SequenceLayout layout_;
  AttentionMask mask_;
  double scale_;
  AttentionDropout dropout_;
};

}  // namespace

std::vector<std::pair<PositionRun, PositionRun>> ring_attention_blocks(const SequenceLayout& layout,
                                                                       const AttentionMask& mask, int rank, int step) {
  const int R = layout.ranks();
  std::vector<std::pair<PositionRun, PositionRun>> blocks;
  for (const PositionRun& q : layout.runs(rank))
    for (const PositionRun& k : layout.runs(((rank - step) % R + R) % R))
      if (may_see(mask, q, k)) blocks.push_back({q, k});
  return blocks;
}

Variable ring_attention(Communicator& comm, const SequenceLayout& layout, const Variable& q, const Variable& k,
                        const Variable& v, const AttentionMask& mask, double scale, const AttentionDropout& dropout) {
  return call<RingAttention>({q, k, v}, comm, layout, mask, scale, dropout)[0];
}

}  // namespace tandem::functions
