// Data parallelism as people run it today (create_multi_node_optimizer with DataParallelOptions,
// comm/data_parallel/multi_node_optimizer.h): gradients averaged in buckets that start while
// backward runs, accumulation over several backward passes, and the optimizer state and
// gradients sharded over the ranks (ZeRO stages 1 and 2).
//
// What every rank agrees on, so that nothing hangs and nothing is averaged wrongly:
// - The buckets follow from the parameter list alone (gradient_buckets.h), and each bucket's
//   header carries a digest of its parameters: ranks whose models differ fail at the first one.
// - Each bucket carries a census (gradient_buckets.h): which ranks have which gradient (a
//   parameter used on some ranks only is averaged with zeros from the others; one used on none
//   is skipped, or zeros with zero_fill), which ranks ran backward since their last update and
//   at which update they are (a rank that skipped a backward, or a whole step, is an error on
//   every rank that names it), and NaN/Inf gradients under check_finite.
// - Buckets start in one order on every rank: bucket b only after buckets 0..b-1, the rest at
//   the end of backward, or at update when a rank ran no backward.
// - The buckets first take the parameters in reverse registration order. Unsharded with overlap
//   (zero = 0, no double buffering), the first update then fixes them in the order rank 0's
//   first syncing backward finished the gradients (PyTorch DDP's rebuilt buckets): every rank
//   takes rank 0's order (one broadcast), so a model that registers its links in another order
//   than it runs them still starts its first bucket early. Sharded stages keep the first order:
//   their optimizer state is laid out by it from the first update (and zero = 3 from setup).
// - A second backward before the update (without NoGradientSync) makes the sums already started
//   incomplete. Sharded (zero >= 1), its gradients travel in a second round that the update adds
//   to the first; unsharded, the first round is dropped (its collectives still complete) and the
//   accumulated gradients travel again, a wasted round: wrap all backward passes but the last in
//   NoGradientSync. Every syncing backward counts, so every rank must run the same number.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/backward_observer.h"  // NoGradientSync
#include "comm/data_parallel/data_parallel_options.h"
#include "comm/transport/communicator.h"
#include "layers/optimizers/optimizer.h"

namespace tandem {

// Installs the data-parallel gradient sync on `optimizer` (see the top of this file).
void install_data_parallel_sync(const std::shared_ptr<Optimizer>& optimizer, CommunicatorPtr comm,
                                const DataParallelOptions& options);

// zero = 3: while the returned handle lives, every parameter of the optimizer's target is whole
// and readable (to save, print or compare them); when it goes, the ranks take their stripes back
// from the values then. Collective over the data-parallel ranks. Null (nothing to do) for an
// optimizer whose parameters are not sharded.
std::shared_ptr<void> gather_parameters(Optimizer& optimizer);

// The buckets of the optimizer's data-parallel sync in the order they start, each the names of
// its parameters (empty before the plan exists, or without a data-parallel sync): to see what
// travels together, and when.
std::vector<std::vector<std::string>> data_parallel_buckets(Optimizer& optimizer);

}  // namespace tandem
