// Weights packed once: a product whose right-hand side serves again unchanged (a layer's weights
// across a pipeline's microbatches or across inference batches, an LSTM's recurrent weights
// across its time steps) runs on a copy of it packed into oneDNN's blocked layout, made once per
// version of the tensor's storage (core/storage.h: any write gives a new version, so a packed copy
// is never stale). Packing reads and writes the whole matrix, so it pays only over several
// products; how many is measured per shape class on this machine (the product on the plain
// matrix as it runs today, on the packed one, and the packing itself: core/cpu/measured_choice.h),
// never assumed. The first product of a version always runs plain, so a weight updated after each
// use (plain training, one product per step) never pays for a copy; from the second on, a copy is
// made once the products it can still expect reach the measured break-even: as many as the last
// version of a right-hand side of the same shape served (a pipeline's microbatches, an LSTM's
// steps), at least as many as this version has served so far (inference).
//
// Only weights are followed (Storage::mark_weight: a model's parameters, which autograd marks when
// a function reads them, and the LSTM's recurrent matrix): a tensor that a loop happens to use
// again (the same input batches, cycled) would otherwise get a copy of its own, each kept until the
// tensor is freed, as the MLP benchmark's input batches did (docs/performance.md, "Peak memory
// against LibTorch").
//
// Results: the packed product computes the same sums in another blocking, so it may round
// differently (f32) from the plain one; both are exact to f32's precision.
//
// Environment:
//   TANDEM_PACKED_WEIGHTS=auto|off|always   auto (default): as above; off (or 0): never;
//                                            always: from the second product of a version on,
//                                            weight or not, whatever the measurement says (tests)
//   TANDEM_PACKED_WEIGHTS_MB=n               the most memory packed copies hold (default 1024);
//                                            the least recently used copy goes first
#pragma once

#include <cstdint>

namespace tandem {

class Tensor;

namespace cpu {

// A product run the usual way: c [m, n] = (or += when accumulate) op(a) op(b), with a stored
// [m, k] ([k, m] when ta), b stored [k, n] ([n, k] when tb), all contiguous.
using PlainProduct = void (*)(const float* a, const float* b, float* c, std::int64_t m, std::int64_t n,
                              std::int64_t k, bool ta, bool tb, bool accumulate);

// Runs that product with b (the tensor b, f32 on the CPU, whose data is `b`'s) packed, when the
// rule above says so, and returns true; returns false, having run nothing, when the caller should
// run `plain` itself. `plain` is also what the measurement times packing against.
bool gemm_packed_rhs(const float* a, const Tensor& b, float* c, std::int64_t m, std::int64_t n, std::int64_t k,
                     bool ta, bool tb, bool accumulate, PlainProduct plain);

// Whether such a product's right-hand side can be packed here: oneDNN asks for a blocked layout
// for it. Where its kernels for this shape and instruction set read the plain layout (on an AVX2
// machine, a b that is not transposed), a copy would be the same matrix, and products run plain.
bool packs_rhs(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, bool accumulate);

struct PackedWeightStats {
  std::int64_t packs = 0;            // packed copies made, since the start or the last clear
  std::int64_t packed_products = 0;  // products run on a packed copy, likewise
  std::int64_t bytes = 0;            // held by packed copies now
  std::int64_t followed = 0;         // right-hand sides whose products are counted now
};
PackedWeightStats packed_weight_stats();

// Drops every packed copy and count (tests; a program never needs it).
void clear_packed_weights();

}  // namespace cpu
}  // namespace tandem
