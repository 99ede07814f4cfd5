// What the multi-rank trainers share (the model-, data- and dual-parallel MNIST trainers and the
// parallel CNN): where each rank writes, resuming from the newest snapshot that every rank
// completed, and the final line.
#pragma once

#include <string>

#include "comm/checkpoint/checkpoint_writer.h"
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

// Sharded checkpoints (comm/checkpoint, docs/checkpoints.md): --checkpoint-interval,
// --checkpoint-dir, --checkpoint-keep, --checkpoint-async, --resume-checkpoint, --init-checkpoint,
// --checkpoint-ignore.
void add_checkpoint_flags(Flags& flags);
// The writer on the trainer (with --checkpoint-interval; null without), then --init-checkpoint
// (the model's weights only) and --resume-checkpoint (latest, or a step_<N> directory): both
// collectives, so every rank calls this after the trainer's other extensions are added. Rank 0
// prints where it resumed from. `layout` describes the run's layout in the checkpoints' manifests.
std::shared_ptr<CheckpointWriter> setup_checkpoints(Trainer& trainer, const CommunicatorPtr& comm, const Flags& flags,
                                                    const std::string& program, const std::string& layout);
// Rank 0: "checkpoints: N saved ..." with the stalls (nothing without a writer or a save).
void print_checkpoint_summary(const CheckpointWriter* writer, int rank);

// Rank 0 prints "final test accuracy: A  loss: L" (the metrics "accuracy" and "loss").
void print_final_metrics(const Observation& metrics, int rank);

}  // namespace tandem::examples
