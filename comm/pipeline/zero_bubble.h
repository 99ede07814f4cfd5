// Zero-bubble pipeline schedules (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, and
// "Pipeline Parallelism with Controllable Memory", 2024): each microbatch's backward is split into
// B, the gradient of the stage's input that the previous stage waits for, and W, the gradient of
// its weights that nobody waits for; the W actions fill the time a rank would otherwise wait.
//
// Each order is what a list scheduler makes with equal forward, B and W times and a free link,
// under a memory limit per rank: whenever a rank is free it runs, in this order of preference,
//   - the next forward of one of its stages whose input is there (the deepest stage first), if
//     the memory limit allows another microbatch in flight;
//   - the next backward (B) whose gradient is there (the oldest microbatch, the deepest stage on
//     ties);
//   - the oldest weight action (W) still to run;
// and otherwise waits for the next input. Every stage runs its forwards, Bs and Ws in increasing
// microbatch order (validate()'s ordering rule, and weight gradients summed as 1F1B sums them).
//
// With equal times (T_F = T_B = T_W) and a step that ends with every rank (tandem's steps end in
// one exchange and the optimizer), the bubble rate (the ranks' idle time over their compute) is:
//   1F1B   (P-1)/M         (P-1) (T_F+T_B+T_W) idle per rank
//   zb-h1  (P-1)/(3M)      1F1B's peak memory (P microbatches on the first rank)
//   zb-h2  (P-1)/(3M)      0 within each rank's own span from M >= 2P on: the paper's "zero
//                          bubble", which needs the next step to start while this one ends
//                          (its optimizer post-validation); here the last rank cannot start
//                          before P-1 forwards have passed, so the step keeps (P-1) T_F per rank.
//                          Memory: 2P-1 microbatches on the first rank.
//   zbv    (P-1)/(6M)      two half-size stages per rank in a V (rank 0 holds the first and the
//                          last stage): the forward reaches the last rank after P-1 half-stages,
//                          half of zb-h1's wait. 1F1B's peak memory (2P half-size stages).
// The simulator reproduces these exactly (tests/comm/pipeline/zero_bubble_test). The memory limits
// count microbatches, as the papers do assuming W keeps no more than B did; where a microbatch
// keeps more from B to W (an MLP keeps each layer's output gradient as well as its input) the
// peak in bytes exceeds 1F1B's (docs/performance.md, "Zero-bubble schedules"). With T_W < T_F
// zb-h2 gains on zb-h1 (the paper's (P-1)(T_F+T_B-2T_W) against (P-1)(T_F+T_B-T_W)).
//
//   Schedule s = zbv(4, 8);       // rank r holds stages r and 7 - r
//   std::vector<int> mine = s.stages_of_rank(rank);
#pragma once

#include "comm/pipeline/schedule.h"

namespace tandem {
namespace pipeline {

// One stage per rank; rank r keeps at most P - r microbatches between forward and B (1F1B's
// limit) and at most P between forward and W. Any ranks >= 1 and microbatches >= 1.
Schedule zb_h1(int ranks, int microbatches);

// One stage per rank; rank r keeps at most 2P - 1 - 2r microbatches between forward and B and
// 2P - 1 between forward and W. Any ranks >= 1 and microbatches >= 1 (zero bubble within each
// rank's span needs microbatches >= 2 * ranks).
Schedule zb_h2(int ranks, int microbatches);

// Two stages per rank in a V: stage s on rank s for s < P, on rank 2P - 1 - s after (stage_ranks);
// at most 2P stage-microbatches between forward and W on a rank. Any ranks >= 1 and
// microbatches >= 1.
Schedule zbv(int ranks, int microbatches);

}  // namespace pipeline
}  // namespace tandem
