// Dropout inside a tensor-parallel region (Megatron-LM's model-parallel RNG tracker, made exact):
// each rank holds its share of a tensor along `axis`, and its mask is its share of the mask that
// F::dropout would draw for the whole tensor from the same generator state. So the ranks draw
// different masks inside the region (they hold different elements), the same ones outside it
// (plain F::dropout on a replicated tensor, the generator replicated by the same seed), and a
// split run with dropout computes exactly what the unsplit run does, at any number of ranks.
// The generator must be in the same state on every rank (it is, when every rank seeds it alike
// and draws from it alike). Each rank draws the whole tensor's uniform numbers (Philox: one
// seed taken from the generator, element i a function of (seed, i)) and keeps its share: the
// price of exactness is the whole mask's random numbers on every rank.
#pragma once

#include <cstdint>

#include "autograd/variable.h"
#include "comm/transport/communicator.h"
#include "core/random.h"

namespace tandem::functions {

// In train mode: x (this rank's share along `axis`) with each element zeroed with probability
// ratio and the rest scaled by 1 / (1 - ratio), as F::dropout; in test mode x unchanged.
Variable dropout_in_parallel_region(Communicator& comm, const Variable& x, double ratio, std::int64_t axis = -1,
                                    Generator* generator = nullptr);

}  // namespace tandem::functions
