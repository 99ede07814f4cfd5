// What the multi-rank trainers share (the model-, data- and dual-parallel MNIST trainers and the
// parallel CNN): where each rank writes, resuming from the newest snapshot that every rank
// completed, and the final line.
#pragma once

#include <string>

#include "comm/transport/communicator.h"
#include "examples/common/flags.h"
#include "training/trainer.h"

namespace tandem::examples {

// This rank's output directory: --out on rank 0, <--out>/rank<r> on rank r > 0.
std::string rank_out(const Flags& flags, int rank);

// --resume: empty, nothing; 'latest': the trainer loads the newest snapshot that every rank
// completed (latest_complete_snapshot: a collective, so every rank calls this) and rank 0
// prints "resumed at iteration N". Anything else is an error naming `program`.
void resume(Trainer& trainer, Communicator& comm, const Flags& flags, const std::string& program);

// Rank 0 prints "final test accuracy: A  loss: L" (the metrics "accuracy" and "loss").
void print_final_metrics(const Observation& metrics, int rank);

}  // namespace tandem::examples
