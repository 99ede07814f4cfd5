#include "comm/spatial/halo_exchange.h"

#include <atomic>
#include <chrono>
#include <sstream>
#include <utility>

#include "comm/functions/communication_node.h"
#include "core/error.h"
#include "core/ops.h"

namespace tandem {

namespace {

using comm_detail::OpKind;

constexpr const char* kHalo = "halo";
constexpr const char* kHaloGradient = "halo gradient";

std::atomic<double> g_wait_seconds{0};
std::atomic<std::int64_t> g_bytes_sent{0}, g_messages{0};

class WaitTimer {
 public:
  WaitTimer() : start_(std::chrono::steady_clock::now()) {}
  ~WaitTimer() {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    double seen = g_wait_seconds.load();
    while (!g_wait_seconds.compare_exchange_weak(seen, seen + s)) {}
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// The elements of `part` within a tensor that holds box `whole`.
IndexList region(const Box& part, const Box& whole) {
  return {Index::range(part.n0 - whole.n0, part.n1 - whole.n0), Index::all(),
          Index::range(part.rect.y0 - whole.rect.y0, part.rect.y1 - whole.rect.y0),
          Index::range(part.rect.x0 - whole.rect.x0, part.rect.x1 - whole.rect.x0)};
}

bool same_box(const Box& a, const Box& b) { return a.n0 == b.n0 && a.n1 == b.n1 && a.rect == b.rect; }

Shape box_shape(const Box& b, std::int64_t channels) { return {b.samples(), channels, b.rect.rows(), b.rect.cols()}; }

void post(Communicator& comm, const Tensor& piece, int dest, const char* label) {
  MessageOptions options;
  options.kind = OpKind::layer_message;
  options.label = label;
  options.blocking = false;
  options.operation = label;
  comm.send_message(piece, dest, kSpatialTag, options);
  g_bytes_sent += static_cast<std::int64_t>(piece.nbytes());
  ++g_messages;
}

Tensor take(Communicator& comm, int source, const char* label, const std::string& op, const Tensor& like,
            const Shape& shape) {
  MessageExpectation expect;
  expect.kind = OpKind::layer_message;
  expect.operation = op + " (" + label + " from rank " + std::to_string(source) + ")";
  expect.expects = std::string("a ") + label;
  expect.check_tensor = true;
  expect.dtype = like.dtype();
  expect.shape = shape;
  ReceivedMessage m = comm.recv_message(source, kSpatialTag, expect);
  TANDEM_CHECK(m.header.label == label, op, ": rank ", comm.rank(), " expected a ", label, " from rank ", source,
               " (tag ", kSpatialTag, ") but received a '", m.header.label, "' message (", m.header.describe(),
               "): the two ranks run different spatial layers");
  return m.tensor.to(like.device());
}

// held: local is this rank's held box (the input); else its needed box (the gradient).
void check_local(const Communicator& comm, const ExchangePlan& plan, const Tensor& local, bool held) {
  const int me = comm.rank();
  const Box& b = held ? plan.held[me] : plan.needed[me];
  TANDEM_CHECK(local.dim() == 4 && local.size(0) == b.samples() && local.size(2) == b.rect.rows() &&
                   local.size(3) == b.rect.cols(),
               plan.op, ": rank ", me, " holds ", b.str(), " of the batch, so its ", held ? "input" : "gradient",
               " must be [", b.samples(), ", C, ", b.rect.rows(), ", ", b.rect.cols(), "], got ", local.description());
}

}  // namespace

Box Box::intersect(const Box& o) const {
  Box r{std::max(n0, o.n0), std::min(n1, o.n1), rect.intersect(o.rect)};
  if (r.n1 < r.n0) r.n1 = r.n0;
  return r;
}

std::string Box::str() const {
  std::ostringstream s;
  s << "samples [" << n0 << ", " << n1 << "), " << rect.str();
  return s.str();
}

void ExchangePlan::check(int ranks) const {
  TANDEM_CHECK(static_cast<int>(held.size()) == ranks && static_cast<int>(needed.size()) == ranks, op,
               ": the plan has ", held.size(), " held and ", needed.size(), " needed boxes for a group of ", ranks,
               " ranks");
  for (int a = 0; a < ranks; ++a)
    for (int b = a + 1; b < ranks; ++b)
      TANDEM_CHECK(held[a].intersect(held[b]).empty(), op, ": ranks ", a, " and ", b, " both hold ",
                   held[a].intersect(held[b]).str());
}

bool ExchangePlan::moves_nothing() const {
  for (std::size_t r = 0; r < held.size(); ++r)
    if (!same_box(held[r], needed[r])) return false;
  return true;
}

HaloExchange::HaloExchange(Communicator& comm, const ExchangePlan& plan, const Tensor& local, double fill)
    : comm_(comm), plan_(plan) {
  const int me = comm.rank(), ranks = comm.size();
  plan.check(ranks);
  check_local(comm, plan, local, true);
  const Box& mine = plan.held[me];
  for (int dest = 0; dest < ranks; ++dest) {
    const Box piece = mine.intersect(plan.needed[dest]);
    if (dest == me || piece.empty()) continue;
    post(comm, index(local, region(piece, mine)), dest, kHalo);
  }
  buffer_ = assemble(plan, me, local, {}, fill);
}

Tensor HaloExchange::assemble(const ExchangePlan& plan, int rank, const Tensor& local,
                              const std::vector<Tensor>& received, double fill) {
  const Box& mine = plan.held[rank];
  const Box& need = plan.needed[rank];
  const Box own = mine.intersect(need);
  const std::int64_t channels = local.size(1);
  // Nothing to add around this rank's own part: the buffer is its input as it is.
  if (same_box(own, need) && same_box(own, mine)) return local;
  Tensor buffer;
  if (own.empty() || own.n0 != need.n0 || own.n1 != need.n1) {
    buffer = full(box_shape(need, channels), fill, local.dtype(), local.device());
  } else {
    // Only the frame around the own part is filled (the others' parts overwrite some of it).
    buffer = empty(box_shape(need, channels), local.dtype(), local.device());
    const Tensor value = full({}, fill, local.dtype(), local.device());
    const Rect& n = need.rect;
    const Rect& o = own.rect;
    for (const Rect& strip : {Rect{n.y0, o.y0, n.x0, n.x1}, Rect{o.y1, n.y1, n.x0, n.x1}, Rect{o.y0, o.y1, n.x0, o.x0},
                              Rect{o.y0, o.y1, o.x1, n.x1}})
      if (!strip.empty()) index_put_(buffer, region({need.n0, need.n1, strip}, need), value);
  }
  if (!own.empty())
    index_put_(buffer, region(own, need), same_box(own, mine) ? local : index(local, region(own, mine)));
  std::size_t next = 0;
  for (int source = 0; source < static_cast<int>(plan.held.size()) && next < received.size(); ++source) {
    const Box piece = plan.held[source].intersect(need);
    if (source == rank || piece.empty()) continue;
    index_put_(buffer, region(piece, need), received[next++]);
  }
  return buffer;
}

Tensor HaloExchange::finish() {
  if (finished_) return buffer_;
  finished_ = true;
  WaitTimer timer;
  const int me = comm_.rank();
  const Box& need = plan_.needed[me];
  for (int source = 0; source < comm_.size(); ++source) {
    const Box piece = plan_.held[source].intersect(need);
    if (source == me || piece.empty()) continue;
    const Tensor part = take(comm_, source, kHalo, plan_.op, buffer_, box_shape(piece, buffer_.size(1)));
    index_put_(buffer_, region(piece, need), part);
    received_.push_back(part);
  }
  return buffer_;
}

HaloGradientExchange::HaloGradientExchange(Communicator& comm, const ExchangePlan& plan, const Tensor& grad,
                                           const Shape& held_shape)
    : comm_(comm), plan_(plan) {
  const int me = comm.rank(), ranks = comm.size();
  check_local(comm, plan, grad, false);
  const Box& need = plan.needed[me];
  for (int dest = 0; dest < ranks; ++dest) {
    const Box piece = plan.held[dest].intersect(need);
    if (dest == me || piece.empty()) continue;
    post(comm, index(grad, region(piece, need)), dest, kHaloGradient);
  }
  const Box& mine = plan.held[me];
  const Box own = mine.intersect(need);
  if (!own.empty() && same_box(own, mine)) {
    // index copies: the result never shares the caller's gradient.
    result_ = index(grad, region(own, need));
  } else {
    result_ = zeros(held_shape, grad.dtype(), grad.device());
    if (!own.empty()) index_put_(result_, region(own, mine), index(grad, region(own, need)));
  }
}

Tensor HaloGradientExchange::finish() {
  if (finished_) return result_;
  finished_ = true;
  WaitTimer timer;
  const int me = comm_.rank();
  const Box& mine = plan_.held[me];
  for (int source = 0; source < comm_.size(); ++source) {
    const Box piece = mine.intersect(plan_.needed[source]);
    if (source == me || piece.empty()) continue;
    const Tensor part = take(comm_, source, kHaloGradient, plan_.op, result_, box_shape(piece, result_.size(1)));
    const IndexList where = region(piece, mine);
    index_put_(result_, where, add(index(result_, where), part));
  }
  return result_;
}

HaloStats halo_stats() { return {g_wait_seconds.load(), g_bytes_sent.load(), g_messages.load()}; }

void reset_halo_stats() {
  g_wait_seconds = 0;
  g_bytes_sent = 0;
  g_messages = 0;
}

namespace functions {

namespace {

class ExchangeBoxes final : public CommunicationNode {
 public:
  ExchangeBoxes(Communicator& comm, ExchangePlan plan, double fill, bool always_record)
      : CommunicationNode(comm, std::nullopt, always_record ? Participation::always : Participation::once_recorded),
        plan_(std::move(plan)),
        fill_(fill) {}
  std::string name() const override { return plan_.op; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    remember_inputs(in);
    HaloExchange exchange(*comm_, plan_, in[0], fill_);
    const Tensor y = exchange.finish();
    // An output never shares its input's storage (a later in-place op would change both).
    return {y.shares_storage_with(in[0]) ? y.clone() : y};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    HaloGradientExchange exchange(*comm_, plan_, gy[0], inputs_[0].shape);
    return {exchange.finish()};
  }

 private:
  ExchangePlan plan_;
  double fill_;
};

}  // namespace

Variable exchange_boxes(Communicator& comm, const ExchangePlan& plan, const Variable& x, double fill,
                        bool always_record) {
  plan.check(comm.size());
  if (plan.moves_nothing()) return x;
  return call<ExchangeBoxes>({x}, comm, plan, fill, always_record)[0];
}

}  // namespace functions

}  // namespace tandem
