// The pipeline runtime: runs a schedule (schedule.h) over the ranks of a communicator, each rank
// computing its own stages, microbatch by microbatch, in the order its action list says.
//
//   // every rank: its stage, and the same schedule
//   auto pipe = std::make_shared<pipeline::Pipeline>(comm, pipeline::one_f_one_b(comm->size(), 8),
//                                                    std::vector<LinkPtr>{my_stage});
//   optimizer.setup(pipe);                        // the pipeline is a Link of this rank's stages
//   pipe->cleargrads();
//   pipeline::StepResult r = pipe->step(batch);   // every rank passes the same batch
//   optimizer.update();                           // r.loss: the batch's mean loss, on every rank
//
// A stage is an ordinary Link, written as in one process: no send, recv, delegate variable or
// shape declaration. Stage 0 takes the microbatch's inputs (forward_many: the batch's fields
// except the last, by default); stage s > 0 takes what stage s - 1 returned (any number of
// tensors, any dtypes and shapes, which may differ from one microbatch to the next: a sequence
// stage may get a longer microbatch next); the last stage takes those followed by the
// microbatch's targets (the last field: labels) and returns the loss, a scalar (a Classifier
// does). The tensors between stages travel with their dtype and shape, so nothing is declared.
//
// A step computes the same gradients as one unsplit step on the whole batch: the loss is the
// mean over the batch's examples, so microbatch m's loss is weighted by its share of them
// (examples_m / examples). Gradients are accumulated into the stages' parameters (not cleared:
// call cleargrads first, as the pipeline updater does). The graph is cut at each stage boundary
// and each microbatch: a stage's input is a leaf whose gradient goes back to the previous stage
// when the schedule runs that microbatch's backward there. Stages hold no graph between steps.
//
// Weight actions (zero-bubble schedules, zero_bubble.h; defer_weight_gradients, schedule.h): a
// stage's backward (B) computes the gradients of its inputs (what the previous stage waits for)
// and of every parameter except linear functions' weights, which it queues for that microbatch;
// the microbatch's weight action (W) computes those and frees what was queued
// (autograd/weight_gradient_queue.h). Where the schedule combines weights (a -dw schedule,
// Schedule::combine_weights) a run of one stage's adjacent weight actions is computed as one
// product per weight over their microbatches, outside deterministic mode. Gradients: the
// zero-bubble schedules' are bit-identical to 1F1B's (zbv's to its stages without weight
// actions), by default and in deterministic mode (core/deterministic.h): each W adds its
// microbatch's product to the gradient as 1F1B's backward does, in the same order. A -dw
// schedule's are bit-identical in deterministic mode (each weight's gradient is the order-free
// sum of the same products), equal to rounding otherwise. With an overlapping data-parallel
// optimizer registered (a backward observer) nothing is queued and the weight actions have
// nothing to do.
//
// Communication: exactly what schedule.h says. Activations and gradients go out with isend, so a
// rank goes on computing while they travel (completed in order, and all of them by the end of
// the step); receives block until the message is there. With recompute, forward keeps only the
// stage's inputs (and the random generator's state, so dropout draws the same mask again) and
// backward runs the forward again with the graph, then its backward: the same gradients for
// less memory. (A link that updates state in forward, batch normalisation's running averages,
// updates it again when the forward is recomputed, as in Megatron and PyTorch's checkpoint.)
//
// Errors. Constructing a pipeline is collective: every rank checks the schedule (validate, and
// the simulator's deadlock proof) and the ranks compare their schedules, so a schedule for a
// different number of ranks, or ranks given different schedules, is an error on every rank
// before anything runs. A failure during a step on any rank (a stage that returns nothing or
// the wrong kind of output, a stage that cannot take what the previous one sent, more
// microbatches than examples, a message of the wrong microbatch) stops the step on every rank:
// the failing rank sends an abort down every channel it sends on, a rank blocked on a channel
// gets it instead of waiting forever and passes it on, then the ranks exchange their outcomes,
// receive (and drop) every message still in flight, and each throws the same tandem::Error
// naming the rank, stage, microbatch and action that failed and why. The communicator is then
// clean: the next step can run.
//
// Every step also ends with a small exchange among the pipeline's ranks (one allgather of a few
// hundred bytes): it carries the loss and observation from the last stage to every rank and the
// failure check above.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "autograd/weight_gradient_queue.h"
#include "comm/pipeline/schedule.h"
#include "comm/pipeline/simulator.h"
#include "comm/transport/communicator.h"
#include "core/call_site.h"
#include "layers/link.h"
#include "layers/optimizers/loss_scaler.h"

namespace tandem {
namespace pipeline {

// One microbatch: what stage 0 takes, what the last stage takes after the previous stage's
// outputs, and its weight in the batch's mean loss.
struct Microbatch {
  std::vector<Tensor> inputs;
  std::vector<Tensor> targets;
  std::int64_t examples = 0;
};

// Splits the batch's fields along the first axis into `microbatches` parts whose sizes differ by
// at most one (the larger first, as numpy.array_split): fields [0, input_fields) become the
// inputs, the rest the targets. Errors: no fields, fields of different lengths, more
// microbatches than examples, input_fields out of range.
std::vector<Microbatch> split_batch(const std::vector<Tensor>& batch, int microbatches, int input_fields);

struct PipelineOptions {
  // Stage 0 takes the first input_fields fields of a batch, the last stage the rest; -1: all but
  // the last.
  int input_fields = -1;
  // Activation recomputation (see above), for every stage of this rank.
  bool recompute = false;
};

using StepObservation = std::map<std::string, double>;

struct StepResult {
  double loss = 0;              // the batch's mean loss (the weighted sum of microbatch losses)
  StepObservation observation;  // the last stage's observation(), weighted the same way
  std::int64_t examples = 0;
};

// What the last step did on this rank, for profiling and for checking the simulator (profile.h):
// each action with its start and end (seconds from the start of the step, waits for messages
// included), the time the stage computed in it (waits left out), and per stage the bytes of its
// outputs, of what a microbatch keeps from its forward to its backward and of what its backward
// queues for a weight action (each the largest over microbatches), and the most bytes alive above the step's start
// after any action, the parameters' gradients left out (the first backward of a step may create them).
struct StepProfile {
  std::vector<TimedAction> actions;
  std::vector<double> compute_s;             // per action
  std::map<int, std::int64_t> output_bytes;  // by stage
  std::map<int, std::int64_t> stored_bytes;  // by stage
  std::map<int, std::int64_t> queued_bytes;  // by stage: what a backward queues for a weight action
  std::int64_t peak_bytes = 0;
  double step_s = 0;         // this rank's step, to the end of the exchange
  double start_clock_s = 0;  // when it started, on std::chrono::steady_clock (one clock per host)
};

class Pipeline : public Link {
 public:
  // stages: this rank's stages in increasing order, schedule.stages_of_rank(rank) (for interleaved
  // schedules rank r holds r, r + ranks, ...; for zbv r and 2 * ranks - 1 - r). Collective over comm's ranks, which
  // must all pass schedules that agree. The pipeline communicates on its own split of comm, so
  // its messages never meet the user's.
  Pipeline(CommunicatorPtr comm, Schedule schedule, std::vector<LinkPtr> stages, PipelineOptions options = {});
  std::string type_name() const override { return "Pipeline"; }

  // One training step over the batch, split into the schedule's microbatches. Every rank passes
  // the batch (ranks without the first or last stage only check its size; they may pass {}).
  StepResult step(const std::vector<Tensor>& batch, CallSite site = CallSite::current());
  // A step over microbatches the caller made (e.g. grouped by sequence length).
  StepResult step(const std::vector<Microbatch>& microbatches, CallSite site = CallSite::current());
  // Forward only, microbatched, without a graph and outside training mode (evaluation), in any
  // number of microbatches: a batch of fewer examples than the schedule's microbatches (the last
  // of an epoch) goes in one microbatch per example. A rank that passes no batch runs the
  // schedule's count, so pass the batch on every rank when the last one may be short.
  StepResult evaluate(const std::vector<Tensor>& batch, CallSite site = CallSite::current());
  StepResult evaluate(const std::vector<Microbatch>& microbatches, CallSite site = CallSite::current());

  const Schedule& schedule() const { return schedule_; }
  Communicator& communicator() const { return *comm_; }
  // This rank's stages (global stage numbers) and links.
  const std::vector<int>& stage_ids() const { return stage_ids_; }
  const LinkPtr& stage(int stage_id) const;
  bool holds_stage(int stage_id) const;
  const StepProfile& last_profile() const { return profile_; }
  bool recompute() const { return options_.recompute; }
  // Loss scaling (mixed_f16): each microbatch's backward starts from the scaler's current scale
  // (times the microbatch's weight), as Optimizer::update(lossfun) scales its loss; give it the
  // optimizer's scaler (Optimizer::set_loss_scaler), which unscales and decides the step.
  void set_loss_scaler(std::shared_ptr<const LossScaler> scaler) { loss_scaler_ = std::move(scaler); }

 private:
  struct Slot;
  struct Channel {
    int peer, tag;
  };
  StepResult run(const std::vector<Microbatch>* given, const std::vector<Tensor>* batch, bool training);
  void run_actions(bool training, std::chrono::steady_clock::time_point start);
  void run_forward(int stage, int microbatch, bool training);
  void run_backward(int stage, int microbatch);
  // Computes microbatch's weight gradients on stage, or with pass_to >= 0 hands them to that
  // microbatch's weight action (a run of weight actions computed together).
  void run_weight(int stage, int microbatch, int pass_to);
  Variables stage_inputs(int stage, int microbatch, bool training);
  Variables call_stage(int stage, int microbatch, const Variables& inputs);
  void deliver(int from_stage, int to_stage, int microbatch, const std::vector<Tensor>& tensors,
               const std::vector<bool>& takes_gradient, bool gradients);
  std::vector<Tensor> take_gradients(int stage, int microbatch, std::size_t expected);
  void reset_step_state();
  // The channels this rank sends on and receives on (the other stage on another rank).
  std::vector<Channel> outgoing_channels() const;
  std::vector<Channel> incoming_channels() const;
  StepResult finish_step(const std::string& failure, bool primary, std::int64_t examples);

  CommunicatorPtr comm_;
  Schedule schedule_;
  PipelineOptions options_;
  std::shared_ptr<const LossScaler> loss_scaler_;
  std::vector<int> stage_ids_;
  std::map<int, LinkPtr> stages_;
  // The stages of this rank whose weight gradients the schedule's weight actions compute, and what
  // each microbatch's backward queued for its weight action, by (stage, microbatch).
  std::set<int> weight_stages_;
  std::map<std::pair<int, int>, WeightGradientQueue> weight_queues_;
  StepProfile profile_;

  // The state of one step.
  const std::vector<Microbatch>* microbatches_ = nullptr;
  std::int64_t examples_ = 0;
  std::map<std::pair<int, int>, std::shared_ptr<Slot>> slots_;  // (stage, microbatch)
  // Between two stages on this rank (one rank holding every stage): by (receiving stage, microbatch).
  std::map<std::pair<int, int>, std::pair<std::vector<Tensor>, std::vector<bool>>> local_activations_, local_gradients_;
  std::vector<std::int64_t> sent_, received_;  // messages per tag
  double loss_sum_ = 0;
  StepObservation observation_sum_;
  std::string current_action_;
  double compute_s_ = 0;  // of the current action
  int evaluation_microbatches_ = 0;
};

}  // namespace pipeline
}  // namespace tandem
