// Activation checkpointing: a region of the forward whose intermediate activations are not kept
// for backward but made again there (Chen et al., "Training Deep Nets with Sublinear Memory
// Cost"; PyTorch's torch.utils.checkpoint, Megatron-LM's recompute). checkpoint(fn, inputs) runs
// fn without recording, keeps only its inputs, and in backward runs fn again with recording on,
// then its backward: the same gradients for the memory of the inputs, at the cost of one more
// forward of the region.
//
// The same, bit for bit: the recompute sees what the forward saw. The random streams fn draws from
// (global_generator() and any generators named) are set back to their state at the forward, and
// after the recompute to their state at the backward, so dropout keeps the same elements and the
// streams go on as without checkpointing; the train mode and the autocast scope are the
// forward's. Parameters read inside fn get their gradients from the recompute's backward. A link
// that changes state in forward (batch normalisation's running averages) changes it again in the
// recompute, as in PyTorch and Megatron.
//
// Communication inside fn (a tensor-parallel allreduce, ring attention) runs again in backward, at
// the same point of every rank's backward, since every rank recomputes the same region. The
// recompute's backward runs inside the outer one without telling the backward observers again;
// the outer backward counts the parameters the region read (recorded in forward) as used by the
// checkpoint, so a data-parallel optimizer with overlap hears that a parameter's gradient is final
// only once the region's share is in, wherever else the parameter is read.
#pragma once

#include <functional>
#include <vector>

#include "autograd/variable.h"
#include "core/random.h"

namespace tandem {

using CheckpointFunction = std::function<Variables(const Variables&)>;

// fn's outputs for `inputs`, without fn's intermediate activations kept for backward. Inputs may
// be of any dtype (integer ones get no gradient); outputs are fn's. A region none of whose inputs
// needs a gradient (token ids into an embedding) runs as if not checkpointed. generators: streams fn draws
// from besides global_generator() (a link's own Generator).
Variables checkpoint(const CheckpointFunction& fn, const Variables& inputs,
                     const std::vector<Generator*>& generators = {});

// One input, one output.
Variable checkpoint(const std::function<Variable(const Variable&)>& fn, const Variable& input,
                    const std::vector<Generator*>& generators = {});

}  // namespace tandem
