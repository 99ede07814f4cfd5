// Ring attention (the ring of comm/context_parallel/context_parallel.h) as one differentiable
// function. Rank r holds the positions layout.runs(r) of q, k and v; at step s it attends its
// query runs to the key/value runs of rank r - s, each (query run, key run) pair one fused
// attention call (core/ops/attention.h) at those runs' global positions, skipped where the mask
// hides the whole pair; the results merge by their log-sum-exp. Keys and values move to rank
// r + 1 while a step computes (isend before the step's attention, recv after). Backward runs the
// same ring with the merged output and log-sum-exp, the keys' and values' gradients travelling
// with them and arriving home after the last step.
#pragma once

#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "comm/context_parallel/sequence_layout.h"
#include "comm/transport/communicator.h"
#include "core/ops/attention.h"

namespace tandem::functions {

// mask: causal, window and (optionally) segment ids [B, T] of the whole sequence; its
// query_start and key_start are ignored (the layout gives the positions). layout.ranks() ==
// comm.size(). q [B, Hq, T_r, d], k [B, Hkv, T_r, d], v [B, Hkv, T_r, dv].
Variable ring_attention(Communicator& comm, const SequenceLayout& layout, const Variable& q, const Variable& k,
                        const Variable& v, const AttentionMask& mask, double scale, const AttentionDropout& dropout);

// The (query run, key run) pairs rank `rank` attends at ring step `step` (keys and values of rank
// rank - step), leaving out those the mask hides entirely: the fused attention calls ring
// attention makes there, for measuring how evenly a layout spreads the work.
std::vector<std::pair<PositionRun, PositionRun>> ring_attention_blocks(const SequenceLayout& layout,
                                                                       const AttentionMask& mask, int rank, int step);

}  // namespace tandem::functions
