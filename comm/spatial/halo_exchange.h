// Moving parts of a batch of feature maps [N, C, H, W] between the ranks of a spatially parallel
// group: the halo exchange of a convolution (each rank needs the borders of its neighbours'
// tiles, or more when a window reaches past the nearest neighbour) and every change of layout
// (tiles to the whole image on one rank, tiles to whole images of some samples, one tiling to
// another) are the same operation: every rank holds one box of the batch, every rank needs one
// box, and each rank sends each other rank the intersection of what it holds with what that
// rank needs. Every rank computes the same plan from the layouts, so nothing is negotiated.
// Elements of a needed box that no rank holds (the padding outside the image) get a fill value.
//
// The adjoint (the backward): the gradient of each needed element goes back to its holder, and
// a held element receives the sum of the gradients of all its copies, its own first, then the
// others' in rank order.
//
// Both directions are split in two: the constructor posts the sends (isend, which never waits for
// the receiver) and lays out what this rank has itself; finish() receives the rest. A caller
// overlaps the exchange with work that needs only its own part (the interior of a convolution)
// by doing that work in between. Messages travel on kSpatialTag as layer messages labelled
// "halo" or "halo gradient"; what arrives is checked against the plan (dtype and shape), so a
// rank that runs a different plan gets an error naming both ranks, never wrong numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "comm/spatial/spatial_layout.h"
#include "comm/transport/communicator.h"

namespace tandem {

inline constexpr int kSpatialTag = 1441;

// Samples [n0, n1) of a batch, with rows and columns `rect` (every channel).
struct Box {
  std::int64_t n0 = 0, n1 = 0;
  Rect rect;
  std::int64_t samples() const { return n1 > n0 ? n1 - n0 : 0; }
  bool empty() const { return samples() == 0 || rect.empty(); }
  Box intersect(const Box& o) const;
  std::string str() const;  // "samples [0, 2), rows [0, 12) x cols [0, 64)"
};

// What every rank of the group holds and needs. held boxes must not overlap.
struct ExchangePlan {
  std::vector<Box> held, needed;
  // The operation, for errors and messages: "spatial convolution_2d".
  std::string op;
  // Checks the plan against a group of `ranks` ranks (sizes, disjoint held boxes).
  void check(int ranks) const;
  // Whether every rank needs exactly what it holds (nothing moves, nothing is filled).
  bool moves_nothing() const;
};

// The forward half. local: this rank's held box, [samples, C, rows, cols].
class HaloExchange {
 public:
  HaloExchange(Communicator& comm, const ExchangePlan& plan, const Tensor& local, double fill);
  // The needed box with this rank's own part and the fill; the others' parts arrive in finish().
  const Tensor& buffer() const { return buffer_; }
  // Receives every other rank's part into the buffer, and returns it.
  Tensor finish();
  // The others' parts as they arrived (in rank order), after finish(): with the local input they
  // rebuild the buffer (assemble), so that a layer may keep them rather than the whole buffer.
  const std::vector<Tensor>& received() const { return received_; }
  // The buffer of `plan` on rank `rank` from its local input and the parts it received.
  static Tensor assemble(const ExchangePlan& plan, int rank, const Tensor& local, const std::vector<Tensor>& received,
                         double fill);

 private:
  Communicator& comm_;
  const ExchangePlan& plan_;
  Tensor buffer_;
  std::vector<Tensor> received_;
  bool finished_ = false;
};

// The backward half. grad: the gradient of this rank's needed box. The result has the shape of
// this rank's held box, `held_shape`.
class HaloGradientExchange {
 public:
  HaloGradientExchange(Communicator& comm, const ExchangePlan& plan, const Tensor& grad, const Shape& held_shape);
  Tensor finish();

 private:
  Communicator& comm_;
  const ExchangePlan& plan_;
  Tensor result_;
  bool finished_ = false;
};

// Wall time spent waiting in finish() (forward and backward) and bytes sent, since the process
// started (or the last reset): what a benchmark reads to tell how much of the exchange the
// interior's compute hid.
struct HaloStats {
  double wait_seconds = 0;
  std::int64_t bytes_sent = 0;
  std::int64_t messages = 0;
};
HaloStats halo_stats();
void reset_halo_stats();

namespace functions {

// Differentiable: this rank's needed box of the batch whose held boxes the ranks pass, elements
// outside every held box set to `fill`. Every rank of comm must call it with the same plan.
// A plan that moves nothing returns x itself. It is recorded when x requires a gradient, which must then hold on every
// rank; with always_record it is recorded whenever gradients are (ranks whose x may differ in that: a scatter from one
// rank).
Variable exchange_boxes(Communicator& comm, const ExchangePlan& plan, const Variable& x, double fill = 0,
                        bool always_record = false);

}  // namespace functions

}  // namespace tandem
