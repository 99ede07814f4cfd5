// A whole training run in the sharded checkpoint format (sharded_checkpoint.h), loadable under
// another layout: tensor, pipeline (another split of the layers into stages), data-parallel
// degree (uneven ones included), ZeRO stage and expert placement.
//
// A checkpoint of step N holds, under global names that do not depend on the layout:
//   model/<name>             parameters and persistent buffers. A pipeline's stage ids are left
//                            out of the names (its stages must name their layers uniquely, as the
//                            char LM's block<b> do); an expert is named by its global index; a
//                            tensor-parallel parameter is one tensor of the unsplit shape
//   optimizer/<name>/<key>   each parameter's state ("m", "v", an f32 "master"), whole however
//                            ZeRO sliced it; optimizer/t, optimizer/epoch,
//                            optimizer/loss_scaler/<key> (mixed_f16)
//   iterator/...             the iterator's epoch, position, order and shuffling stream, when
//                            every rank iterates the same global batches (each replica training
//                            on its rows): the data order then continues under any layout; else
//   iterator/rank<r>/...     each rank's (a scattered dataset), which resumes only on as many ranks
//   trainer/iteration        the step; trainer/elapsed_time (rank 0's)
//   random/rank<r>           each rank's default random stream (dropout, later initialisers)
//   kernel_choices/rank<r>   the kernels each rank computed with (core/kernel_choices.h)
//   extensions/<name>/...    the state of rank 0's extensions (the log)
// and info "layout" (what the trainer says of its layout), "world" (the number of ranks).
//
// Loading under the same number of ranks restores each rank's random stream and kernel choices;
// under another, every rank takes the streams if all ranks had the same one, and otherwise the
// load is an error (a stream cannot be split or joined) unless "random/" is ignored; kernel
// choices then follow the fixed rules of the new layout's shapes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/checkpoint/sharded_checkpoint.h"
#include "comm/transport/communicator.h"
#include "training/trainer.h"

namespace tandem {

// The global name of every parameter and persistent buffer of `model`, by its path in the model,
// and where this rank's value sits in it (a tensor-parallel split); see above.
struct GlobalName {
  std::string name;    // without "model/"
  std::string origin;  // the pipeline stage it comes from ("" outside a pipeline, or tied)
  int split_axis = -1, split_index = 0, split_count = 1;
  // A copy of a parameter tied across pipeline stages (comm/pipeline/tied_stage.h) that another
  // stage's copy stands for in a checkpoint: loaded, not saved.
  bool saved = true;
};
std::map<std::string, GlobalName> global_parameter_names(const Link& model);

// Every piece of the run's state this rank holds (model, optimizer, iterator, trainer, random
// streams, kernel choices, rank 0's extensions). While the result lives, a ZeRO-3 run's
// parameters are whole (the handle holds them).
struct TrainingState {
  std::vector<ShardEntry> entries;
  std::shared_ptr<void> whole_parameters;
};
TrainingState training_state(Communicator& comm, Trainer& trainer);

// A synchronous save of the run at its current iteration into <root>/step_<iteration>;
// returns the directory.
std::string save_training_checkpoint(Communicator& comm, Trainer& trainer, const std::string& root,
                                     std::map<std::string, std::string> info = {},
                                     const CheckpointSaveOptions& options = {});

// Loads a checkpoint (a step_<N> directory) into the run, before Trainer::run(); returns its
// step. Collective.
std::int64_t load_training_checkpoint(Communicator& comm, Trainer& trainer, const std::string& directory,
                                      const CheckpointLoadOptions& options = {}, CheckpointLoadStats* stats = nullptr);

// Only the model's parameters and buffers (model/...) of a checkpoint, into `model` under any
// layout: a model initialised from a checkpoint (or from weights imported with //tools:checkpoint
// from-safetensors), its training starting afresh. Collective. A ZeRO-3 run holds
// Trainer::gather_parameters() around it.
void load_model_checkpoint(Communicator& comm, Link& model, const std::string& directory);

}  // namespace tandem
