// How a data-parallel optimizer averages gradients and where it keeps its memory
// (create_multi_node_optimizer(optimizer, comm, DataParallelOptions), comm/data_parallel/multi_node_optimizer.h).
#pragma once

#include <optional>

#include "core/dtype.h"

namespace tandem {

struct DataParallelOptions {
  // Start averaging a bucket of gradients as soon as backward has finished them, while backward
  // goes on (PyTorch DDP). false: every bucket after backward, at update.
  bool overlap = true;
  // Gradients travel in buckets of about this many MiB (consecutive parameters of one dtype in
  // reverse order of registration at first; zero = 0 with overlap then takes the order backward
  // finished them at the first update). Smaller buckets start earlier; each costs a header
  // exchange. 0: one bucket per dtype.
  double bucket_mb = 4;
  // Sharding over the ranks (ZeRO): 0 none; 1 the optimizer state (each rank updates its slice of
  // every bucket, then the slices are allgathered); 2 also the gradients (reduce-scatter instead
  // of allreduce: a rank keeps the averaged gradients of its slices only); 3 also the parameters
  // (each rank keeps its slices; a link's are gathered whole while its functions run).
  int zero = 0;
  // zero = 3: when a link is gathered, the next link of the pass starts travelling (FSDP's forward
  // and backward prefetch), so that its gather overlaps this link's computation where the transport
  // moves data by itself (RDMA, NCCL). Off by default: MPI over shared memory or TCP moves a
  // started collective only inside MPI calls, and there a prefetch is a gather held one link
  // longer, which made the step slower on 2 ranks of one machine (bench/data_parallel_bench, zero3
  // with and without it: docs/performance.md, "Data parallelism per ZeRO stage").
  bool prefetch = false;
  // With overlap: while backward computes, a helper thread moves the started buckets
  // (comm/transport/background_progress.h). It runs where MPI was started at MPI_THREAD_MULTIPLE,
  // which tandem does when the launch spans more than one host (TANDEM_MPI_PROGRESS=auto): across 2
  // simulated hosts at 1 Gbit/s, batch 1024 per rank, it made the overlapped step much faster than
  // averaging after backward, where without it overlap bought little (docs/performance.md, "Data
  // parallelism across hosts"). Elsewhere it does nothing.
  bool background_progress = true;
  // ChainerMN's double_buffering: the gradients averaged at step t are applied at step t+1,
  // while step t+1's are averaged behind its forward and backward. Stale by one step by design
  // (ChainerMN's rule); the first update applies nothing. Needs zero = 0 and implies no
  // overlap.
  bool double_buffering = false;
  // A parameter that no rank gave a gradient in a step: skipped (its gradient stays undefined,
  // as ChainerMN does), or zeros with zero_fill. One that only some ranks gave a gradient is
  // always averaged with zeros from the others.
  bool zero_fill = false;
  // ChainerMN's allreduce_grad_dtype: the gradients are cast to it as they are packed into the
  // buckets, averaged, and cast back (bf16 or f16 halve an f32 model's bytes on the wire), in
  // every mode above. Not in deterministic mode, whose sums are exact.
  std::optional<DType> allreduce_grad_dtype;
};

}  // namespace tandem
