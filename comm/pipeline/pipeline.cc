#include "comm/pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include <nlohmann/json.hpp>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/weight_gradient_queue.h"
#include "comm/protocol/activations_and_gradients.h"
#include "core/deterministic.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/random.h"
#include "core/storage.h"
#include "core/timeline.h"

namespace tandem {
namespace pipeline {

using Json = nlohmann::json;

std::vector<Microbatch> split_batch(const std::vector<Tensor>& batch, int microbatches, int input_fields) {
  const int fields = static_cast<int>(batch.size());
  TANDEM_CHECK(fields > 0, "pipeline: the batch has no fields");
  const int inputs = input_fields < 0 ? fields - 1 : input_fields;
  TANDEM_CHECK(inputs >= 1 && inputs <= fields, "pipeline: input_fields ", input_fields, " for a batch of ", fields,
               " field(s): stage 0 needs at least one and at most ", fields);
  for (const Tensor& field : batch)
    TANDEM_CHECK(field.defined() && field.dim() >= 1,
                 "pipeline: every field of a batch needs a first axis to split; got ",
                 field.defined() ? field.description() : std::string("an undefined tensor"));
  const std::int64_t n = batch[0].shape()[0];
  for (int f = 1; f < fields; ++f)
    TANDEM_CHECK(batch[f].shape()[0] == n, "pipeline: the batch's fields differ in length: field 0 is ",
                 batch[0].description(), ", field ", f, " is ", batch[f].description());
  TANDEM_CHECK(microbatches >= 1 && microbatches <= n, "pipeline: ", microbatches, " microbatches from a batch of ", n,
               " example(s): each microbatch needs at least one example; use at most ", n,
               " microbatches or a larger batch");
  std::vector<Microbatch> out(static_cast<std::size_t>(microbatches));
  std::int64_t begin = 0;
  for (int m = 0; m < microbatches; ++m) {
    const std::int64_t size = n / microbatches + (m < n % microbatches ? 1 : 0);
    Microbatch& mb = out[static_cast<std::size_t>(m)];
    for (int f = 0; f < fields; ++f)
      (f < inputs ? mb.inputs : mb.targets).push_back(batch[f].slice_rows(begin, begin + size));
    mb.examples = size;
    begin += size;
  }
  return out;
}

// --- construction ------------------------------------------------------------------------------

namespace {

std::uint64_t schedule_digest(const Schedule& schedule) {
  Fnv1a64 h;
  h.mix(static_cast<std::uint64_t>(schedule.ranks)).mix(static_cast<std::uint64_t>(schedule.stages));
  h.mix(static_cast<std::uint64_t>(schedule.microbatches)).mix(schedule.combine_weights ? 1u : 0u);
  for (int r : schedule.stage_ranks) h.mix(static_cast<std::uint64_t>(r));
  for (const auto& list : schedule.actions) {
    h.mix(list.size());
    for (const Action& a : list)
      h.mix(static_cast<std::uint64_t>(a.kind))
          .mix(static_cast<std::uint64_t>(a.stage))
          .mix(static_cast<std::uint64_t>(a.microbatch));
  }
  return h.digest();
}

// Every rank's JSON document, in rank order (one allgather).
std::vector<Json> exchange_documents(Communicator& comm, const Json& mine) {
  std::vector<Json> all;
  for (const Tensor& t : comm.allgather(protocol::text_tensor(mine.dump())))
    all.push_back(Json::parse(protocol::tensor_text(t)));
  return all;
}

}  // namespace

Pipeline::Pipeline(CommunicatorPtr comm, Schedule schedule, std::vector<LinkPtr> stages, PipelineOptions options)
    : schedule_(std::move(schedule)), options_(options) {
  TANDEM_CHECK(comm != nullptr, "Pipeline: a communicator is required");
  const int rank = comm->rank();
  // Every rank checks what it was given; the ranks then share their verdicts and schedules, so a
  // mistake on one rank is the same error on every rank (never a hang in the first step).
  std::string problem;
  try {
    TANDEM_CHECK(schedule_.ranks == comm->size(), "the schedule ", schedule_.describe(), " is for ", schedule_.ranks,
                 " rank(s), but the communicator has ", comm->size());
    check_deadlock_free(schedule_);  // validates it too
    stage_ids_ = schedule_.stages_of_rank(rank);
    std::string held;
    for (int s : stage_ids_) held += tandem::detail::concat(held.empty() ? "" : ", ", s);
    TANDEM_CHECK(stages.size() == stage_ids_.size(), "rank ", rank, " holds ", stage_ids_.size(), " stage(s) of ",
                 schedule_.describe(), " (", held.empty() ? std::string("none") : "stages " + held, ") but was given ",
                 stages.size(), " link(s)");
    for (std::size_t i = 0; i < stages.size(); ++i)
      TANDEM_CHECK(stages[i] != nullptr, "rank ", rank, " was given no link (null) for stage ", stage_ids_[i]);
    for (std::size_t i = 1; i < stages.size(); ++i)
      TANDEM_CHECK(stages[i]->device() == stages[0]->device(), "rank ", rank,
                   "'s stages must be on one device, but stage ", stage_ids_[0], " is on ", stages[0]->device().str(),
                   " and stage ", stage_ids_[i], " on ", stages[i]->device().str());
  } catch (const std::exception& e) { problem = e.what(); }
  Json mine = {{"schedule", schedule_.describe()}, {"digest", schedule_digest(schedule_)}, {"problem", problem}};
  const std::vector<Json> all = exchange_documents(*comm, mine);
  std::string problems;
  for (int r = 0; r < comm->size(); ++r) {
    const std::string p = all[r]["problem"];
    if (!p.empty()) problems += tandem::detail::concat(problems.empty() ? "" : "; ", "rank ", r, ": ", p);
  }
  TANDEM_CHECK(problems.empty(), "Pipeline: ", problems);
  for (int r = 1; r < comm->size(); ++r)
    TANDEM_CHECK(all[r]["digest"] == all[0]["digest"], "Pipeline: the ranks were given different schedules: rank 0 ",
                 all[0]["schedule"].get<std::string>(), ", rank ", r, " ", all[r]["schedule"].get<std::string>(),
                 " (or the same sizes with different action lists)");
  // The pipeline lives where its stages are: add_child moves a child to its parent's device, and
  // a new Link is on the CPU, so without this a rank's stages moved to a GPU before the pipeline
  // was built would silently go back to the CPU (and train there).
  if (!stages.empty()) to(stages.front()->device());
  for (std::size_t i = 0; i < stages.size(); ++i) {
    add_child(std::to_string(stage_ids_[i]), stages[i]);
    stages_[stage_ids_[i]] = stages[i];
  }
  for (const Action& a : schedule_.actions[static_cast<std::size_t>(rank)])
    if (a.kind == ActionKind::weight) weight_stages_.insert(a.stage);  // this stage's backwards queue
  comm_ = comm->split(0, rank);
  comm_->set_timeout(comm->timeout());
}

const LinkPtr& Pipeline::stage(int stage_id) const {
  auto it = stages_.find(stage_id);
  TANDEM_CHECK(it != stages_.end(), "Pipeline: rank ", comm_->rank(), " does not hold stage ", stage_id);
  return it->second;
}

bool Pipeline::holds_stage(int stage_id) const { return stages_.count(stage_id) != 0; }

// --- one step ----------------------------------------------------------------------------------

struct Pipeline::Slot {
  Variables inputs, outputs;         // kept from forward to backward (not with recompute)
  std::vector<Tensor> saved_inputs;  // with recompute: only these
  std::vector<bool> saved_takes_gradient;
  std::optional<Generator> generator;  // with recompute: the state the forward started from
  double weight = 0;                   // the last stage: examples_m / examples
};

// The flight recorder names the caller's line for every message of the step (call_site.h).
StepResult Pipeline::step(const std::vector<Tensor>& batch, CallSite site) {
  const CallSiteScope scope(site);
  return run(nullptr, &batch, true);
}
StepResult Pipeline::step(const std::vector<Microbatch>& microbatches, CallSite site) {
  const CallSiteScope scope(site);
  return run(&microbatches, nullptr, true);
}
StepResult Pipeline::evaluate(const std::vector<Tensor>& batch, CallSite site) {
  const CallSiteScope scope(site);
  return run(nullptr, &batch, false);
}
StepResult Pipeline::evaluate(const std::vector<Microbatch>& microbatches, CallSite site) {
  const CallSiteScope scope(site);
  return run(&microbatches, nullptr, false);
}

void Pipeline::reset_step_state() {
  slots_.clear();
  local_activations_.clear();
  local_gradients_.clear();
  sent_.assign(static_cast<std::size_t>(2 * schedule_.stages), 0);
  received_.assign(static_cast<std::size_t>(2 * schedule_.stages), 0);
  weight_queues_.clear();
  loss_sum_ = 0;
  observation_sum_.clear();
  current_action_ = "preparing the step";
  profile_ = StepProfile{};
}

StepResult Pipeline::run(const std::vector<Microbatch>* given, const std::vector<Tensor>* batch, bool training) {
  reset_step_state();
  const auto start = std::chrono::steady_clock::now();
  profile_.start_clock_s = std::chrono::duration<double>(start.time_since_epoch()).count();
  std::vector<Microbatch> split;
  std::string failure;
  bool primary = false;
  examples_ = -1;
  try {
    if (batch != nullptr && !batch->empty()) {
      // Evaluation splits a short batch (the last of an epoch) into fewer microbatches.
      int count = schedule_.microbatches;
      if (!training && batch->at(0).defined() && batch->at(0).dim() >= 1)
        count = static_cast<int>(std::min<std::int64_t>(count, batch->at(0).shape()[0]));
      split = split_batch(*batch, count, options_.input_fields);
      given = &split;
    }
    evaluation_microbatches_ = schedule_.microbatches;
    if (given != nullptr && !given->empty()) {
      TANDEM_CHECK(static_cast<int>(given->size()) == schedule_.microbatches || !training, "pipeline: ", given->size(),
                   " microbatches given to ", schedule_.describe());
      evaluation_microbatches_ = static_cast<int>(given->size());
      examples_ = 0;
      for (const Microbatch& mb : *given) {
        TANDEM_CHECK(mb.examples >= 1,
                     "pipeline: every microbatch needs at least one example (its weight in the mean "
                     "loss); got ",
                     mb.examples);
        examples_ += mb.examples;
        TANDEM_CHECK(!training || !deterministic() || mb.examples == given->front().examples,
                     "pipeline (deterministic mode): microbatches of ", given->front().examples, " and ", mb.examples,
                     " examples; each microbatch is a gradient group of the mean, and they must be equal in size");
      }
    }
    static const std::vector<Microbatch> none;
    microbatches_ = given != nullptr ? given : &none;
    run_actions(training, start);
    // Deterministic mode: each microbatch is a gradient group (core/deterministic.h), on every stage.
    if (training && deterministic())
      for (int m = 0; m < schedule_.microbatches; ++m) record_gradient_group();
  } catch (const protocol::Aborted& abort) { failure = abort.failure; } catch (const std::exception& e) {
    failure = tandem::detail::concat("rank ", comm_->rank(), ", ", current_action_, ": ", e.what());
    primary = true;
  }
  microbatches_ = nullptr;
  if (!failure.empty()) {
    slots_.clear();
    local_activations_.clear();
    local_gradients_.clear();
    weight_queues_.clear();
    // Whoever waits on a channel from this rank gets the abort instead of waiting forever.
    for (const Channel& c : outgoing_channels()) {
      protocol::send_abort(*comm_, failure, {c.peer, c.tag, -1, false});
      ++sent_[static_cast<std::size_t>(c.tag)];
    }
  }
  StepResult result = finish_step(failure, primary, examples_);
  profile_.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

void Pipeline::run_actions(bool training, std::chrono::steady_clock::time_point start) {
  const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const Device device = stages_.begin()->second->device();
  // Bytes alive beyond the parameters' gradients, which the first backward may create.
  const auto activation_bytes = [&] {
    std::int64_t bytes = live_storage_bytes(device);
    for (const Variable& p : params())
      if (p.grad().defined()) bytes -= static_cast<std::int64_t>(p.grad().nbytes());
    return bytes;
  };
  const std::int64_t base_bytes = activation_bytes();
  const auto timed = [&](const Action& action, auto&& body) {
    current_action_ = action.describe();
    compute_s_ = 0;
    const double begin = seconds();
    body();
    profile_.actions.push_back(TimedAction{action, begin, seconds()});
    profile_.compute_s.push_back(compute_s_);
    profile_.peak_bytes = std::max(profile_.peak_bytes, activation_bytes() - base_bytes);
  };
  if (training) {
    const std::vector<Action>& list = schedule_.actions[static_cast<std::size_t>(comm_->rank())];
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& action = list[i];
      timed(action, [&] {
        // The flight recorder's entries and the timeline's spans say which stage and microbatch
        // they served.
        const timeline::StageScope context(action.stage, action.microbatch);
        const char* what = action.kind == ActionKind::forward    ? "forward"
                           : action.kind == ActionKind::backward ? "backward"
                                                                 : "weight gradients";
        const timeline::SpanScope span(
            "pipeline", timeline::enabled()
                            ? tandem::detail::concat(what, " stage ", action.stage, " microbatch ", action.microbatch)
                            : std::string());
        if (action.kind == ActionKind::forward) run_forward(action.stage, action.microbatch, true);
        else if (action.kind == ActionKind::backward) run_backward(action.stage, action.microbatch);
        else {
          // A run of one stage's weight actions is one product per weight where the schedule says so
          // (combine_weights), outside deterministic mode: each passes its queue on, the last computes.
          const bool pass_on = schedule_.combine_weights && !deterministic() && i + 1 < list.size() &&
                               list[i + 1].kind == ActionKind::weight && list[i + 1].stage == action.stage;
          run_weight(action.stage, action.microbatch, pass_on ? list[i + 1].microbatch : -1);
        }
      });
    }
    return;
  }
  // Evaluation: forwards only, microbatch by microbatch, this rank's stages in order. Every rank
  // runs (microbatch, stage) in the same increasing order, so every receive's sender comes first.
  NoGradGuard no_grad;
  TrainModeGuard eval_mode(false);
  for (int m = 0; m < evaluation_microbatches_; ++m)
    for (int s : stage_ids_) timed(pipeline::forward(s, m), [&] { run_forward(s, m, false); });
}

Variables Pipeline::stage_inputs(int stage, int microbatch, bool training) {
  const Device device = this->stage(stage)->device();
  Variables inputs;
  if (stage == 0) {
    TANDEM_CHECK(!microbatches_->empty(), "stage 0 has no batch: pass the batch (or the microbatches) on rank ",
                 comm_->rank());
    for (const Tensor& t : (*microbatches_)[static_cast<std::size_t>(microbatch)].inputs)
      inputs.emplace_back(t.to(device));
    return inputs;
  }
  const int from = schedule_.rank_of_stage(stage - 1);
  std::vector<Tensor> tensors;
  std::vector<bool> takes_gradient;
  if (from == comm_->rank()) {
    auto it = local_activations_.find({stage, microbatch});
    TANDEM_CHECK(it != local_activations_.end(), "the output of stage ", stage - 1, " for microbatch ", microbatch,
                 " is not there");
    tensors = std::move(it->second.first);
    takes_gradient = std::move(it->second.second);
    local_activations_.erase(it);
  } else {
    const int tag = 2 * (stage - 1);
    int consumed = 0;
    try {
      protocol::Received got = protocol::recv_list(*comm_, {from, tag, microbatch}, false, "pipeline: receive",
                                                   tandem::detail::concat("the activation of microbatch ", microbatch,
                                                                          " from stage ", stage - 1, " on rank ", from),
                                                   &consumed);
      tensors = std::move(got.tensors);
      takes_gradient = std::move(got.takes_gradient);
    } catch (...) {
      received_[static_cast<std::size_t>(tag)] += consumed;
      throw;
    }
    received_[static_cast<std::size_t>(tag)] += consumed;
  }
  for (std::size_t i = 0; i < tensors.size(); ++i)
    inputs.emplace_back(tensors[i].to(device), training && takes_gradient[i]);
  return inputs;
}

Variables Pipeline::call_stage(int stage, int microbatch, const Variables& inputs) {
  const bool last = stage == schedule_.stages - 1;
  Variables xs = inputs;
  const LinkPtr& link = this->stage(stage);
  if (last) {
    TANDEM_CHECK(!microbatches_->empty(),
                 "the last stage has no batch for its targets: pass the batch (or the "
                 "microbatches) on rank ",
                 comm_->rank());
    for (const Tensor& t : (*microbatches_)[static_cast<std::size_t>(microbatch)].targets)
      xs.emplace_back(t.to(link->device()));
  }
  Variables ys = link->forward_many(xs);
  if (last) {
    TANDEM_CHECK(ys.size() == 1 && ys[0].defined() && ys[0].numel() == 1 && is_floating(ys[0].dtype()),
                 "the last stage (", link->type_name(), ") must return the loss, one floating scalar; it returned ",
                 ys.size(), " output(s)", ys.size() == 1 && ys[0].defined() ? ": " + ys[0].description() : "");
    return ys;
  }
  TANDEM_CHECK(!ys.empty(), "stage ", stage, " (", link->type_name(),
               ") returned nothing: a stage before the last must return what the next stage takes");
  for (std::size_t i = 0; i < ys.size(); ++i)
    TANDEM_CHECK(ys[i].defined(), "stage ", stage, " (", link->type_name(), ") returned an undefined output ", i);
  return ys;
}

void Pipeline::deliver(int from_stage, int to_stage, int microbatch, const std::vector<Tensor>& tensors,
                       const std::vector<bool>& takes_gradient, bool gradients) {
  if (tensors.empty()) return;
  const int to = schedule_.rank_of_stage(to_stage);
  if (to == comm_->rank()) {
    (gradients ? local_gradients_ : local_activations_)[{to_stage, microbatch}] = {tensors, takes_gradient};
    return;
  }
  const int tag = gradients ? 2 * to_stage + 1 : 2 * from_stage;
  const protocol::Channel channel{to, tag, microbatch, false};  // isend: this rank goes on computing
  if (gradients) {
    protocol::send_gradients(*comm_, tensors, channel);
  } else {
    protocol::send_activations(*comm_, tensors, takes_gradient, channel, true);
  }
  sent_[static_cast<std::size_t>(tag)] += static_cast<std::int64_t>(tensors.size());
}

namespace {

// Adds the seconds from its construction to its destruction to `total`.
class ComputeTimer {
 public:
  explicit ComputeTimer(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~ComputeTimer() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  ComputeTimer(const ComputeTimer&) = delete;
  ComputeTimer& operator=(const ComputeTimer&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

void Pipeline::run_forward(int stage, int microbatch, bool training) {
  const bool last = stage == schedule_.stages - 1;
  const Device device = this->stage(stage)->device();
  const std::int64_t bytes_before = live_storage_bytes(device);
  auto slot = std::make_shared<Slot>();
  Variables inputs = stage_inputs(stage, microbatch, training);
  ComputeTimer timer(compute_s_);
  if (training && options_.recompute) {
    for (const Variable& x : inputs) {
      slot->saved_inputs.push_back(x.data());
      slot->saved_takes_gradient.push_back(x.requires_grad());
    }
    slot->generator = global_generator();
  }
  Variables outputs = call_stage(stage, microbatch, inputs);
  if (last) {
    const Microbatch& mb = (*microbatches_)[static_cast<std::size_t>(microbatch)];
    slot->weight = static_cast<double>(mb.examples) / static_cast<double>(examples_);
    loss_sum_ += slot->weight * outputs[0].data().item();
    for (const auto& [name, value] : this->stage(stage)->observation()) observation_sum_[name] += slot->weight * value;
  } else {
    std::vector<Tensor> tensors;
    std::vector<bool> takes_gradient;
    std::int64_t bytes = 0;
    for (const Variable& y : outputs) {
      tensors.push_back(y.data());
      takes_gradient.push_back(training && y.requires_grad());
      bytes += static_cast<std::int64_t>(y.data().nbytes());
    }
    std::int64_t& most = profile_.output_bytes[stage];
    most = std::max(most, bytes);
    deliver(stage, stage + 1, microbatch, tensors, takes_gradient, false);
  }
  if (!training) return;
  if (!options_.recompute) {
    slot->inputs = std::move(inputs);
    slot->outputs = std::move(outputs);
  } else {
    inputs.clear();
    outputs.clear();
  }
  slots_[{stage, microbatch}] = slot;
  std::int64_t& stored = profile_.stored_bytes[stage];
  stored = std::max(stored, live_storage_bytes(device) - bytes_before);
}

std::vector<Tensor> Pipeline::take_gradients(int stage, int microbatch, std::size_t expected) {
  if (expected == 0) return {};
  const int from = schedule_.rank_of_stage(stage + 1);
  std::vector<Tensor> grads;
  if (from == comm_->rank()) {
    auto it = local_gradients_.find({stage, microbatch});
    TANDEM_CHECK(it != local_gradients_.end(), "the gradient from stage ", stage + 1, " for microbatch ", microbatch,
                 " is not there");
    grads = std::move(it->second.first);
    local_gradients_.erase(it);
  } else {
    const int tag = 2 * stage + 1;
    int consumed = 0;
    try {
      grads = protocol::recv_list(*comm_, {from, tag, microbatch}, true, "pipeline: receive",
                                  tandem::detail::concat("the gradient of microbatch ", microbatch, " from stage ",
                                                         stage + 1, " on rank ", from),
                                  &consumed)
                  .tensors;
    } catch (...) {
      received_[static_cast<std::size_t>(tag)] += consumed;
      throw;
    }
    received_[static_cast<std::size_t>(tag)] += consumed;
  }
  TANDEM_CHECK(grads.size() == expected, "stage ", stage + 1, " sent ", grads.size(), " gradient(s) for the ", expected,
               " output(s) of stage ", stage, " that take one");
  return grads;
}

void Pipeline::run_backward(int stage, int microbatch) {
  auto it = slots_.find({stage, microbatch});
  TANDEM_CHECK(it != slots_.end(), "no forward of microbatch ", microbatch, " on stage ", stage, " to go back through");
  const std::shared_ptr<Slot> slot = it->second;
  slots_.erase(it);
  Variables inputs = std::move(slot->inputs);
  Variables outputs = std::move(slot->outputs);
  std::optional<ComputeTimer> timer(std::in_place, compute_s_);
  // A stage with weight actions leaves its weight gradients to them (weight_gradient_queue.h).
  WeightGradientQueue* queue = weight_stages_.count(stage) ? &weight_queues_[{stage, microbatch}] : nullptr;
  std::optional<WeightGradientQueue::Scope> deferring;
  if (queue != nullptr) deferring.emplace(*queue);
  if (options_.recompute) {
    // The forward again, from the same inputs and the same random state (dropout's masks).
    for (std::size_t i = 0; i < slot->saved_inputs.size(); ++i)
      inputs.emplace_back(slot->saved_inputs[i], static_cast<bool>(slot->saved_takes_gradient[i]));
    Generator after = global_generator();
    global_generator() = *slot->generator;
    try {
      outputs = call_stage(stage, microbatch, inputs);
    } catch (...) {
      global_generator() = after;
      throw;
    }
    global_generator() = after;
  }
  if (stage == schedule_.stages - 1) {
    const Variable& loss = outputs[0];
    // Deterministic mode: the microbatch's own mean loss; the optimizer divides by the groups.
    // A loss scaler (mixed_f16) multiplies the seed by its scale.
    const double seed = (deterministic() ? 1.0 : slot->weight) * (loss_scaler_ ? loss_scaler_->scale() : 1.0);
    tandem::backward({loss}, {full({}, seed, loss.dtype(), loss.device())});
  } else {
    Variables roots;
    for (const Variable& y : outputs)
      if (y.requires_grad()) roots.push_back(y);
    timer.reset();  // the wait for the gradient is not computation
    std::vector<Tensor> grads = take_gradients(stage, microbatch, roots.size());
    timer.emplace(compute_s_);
    for (std::size_t i = 0; i < roots.size(); ++i) {
      TANDEM_CHECK(grads[i].dtype() == roots[i].dtype() && grads[i].shape() == roots[i].shape(), "stage ", stage + 1,
                   " sent a gradient ", grads[i].description(), " for output ", i, " of stage ", stage, ", which is ",
                   roots[i].description());
      grads[i] = grads[i].to(roots[i].device());
    }
    if (!roots.empty()) tandem::backward(roots, grads);
  }
  if (queue != nullptr) {
    std::int64_t& most = profile_.queued_bytes[stage];
    most = std::max(most, queue->queued_bytes());
  }
  if (stage == 0) return;
  std::vector<Tensor> input_grads;
  for (const Variable& x : inputs) {
    if (!x.requires_grad()) continue;
    input_grads.push_back(x.grad().defined() ? x.grad() : zeros_like(x.data()));
  }
  deliver(stage, stage - 1, microbatch, input_grads, std::vector<bool>(input_grads.size(), false), true);
}

void Pipeline::run_weight(int stage, int microbatch, int pass_to) {
  auto queue = weight_queues_.find({stage, microbatch});
  TANDEM_CHECK(queue != weight_queues_.end(), "no weight gradients queued for microbatch ", microbatch, " of stage ",
               stage, " on this rank");
  const ComputeTimer timer(compute_s_);
  if (pass_to >= 0) weight_queues_[{stage, pass_to}].absorb(std::move(queue->second));
  else queue->second.flush();
  weight_queues_.erase(queue);
}

// --- the end of a step -------------------------------------------------------------------------

std::vector<Pipeline::Channel> Pipeline::outgoing_channels() const {
  std::vector<Channel> out;
  const int rank = comm_->rank();
  for (int s : stage_ids_) {
    if (s + 1 < schedule_.stages && schedule_.rank_of_stage(s + 1) != rank)
      out.push_back({schedule_.rank_of_stage(s + 1), 2 * s});
    if (s > 0 && schedule_.rank_of_stage(s - 1) != rank)
      out.push_back({schedule_.rank_of_stage(s - 1), 2 * (s - 1) + 1});
  }
  return out;
}

std::vector<Pipeline::Channel> Pipeline::incoming_channels() const {
  std::vector<Channel> in;
  const int rank = comm_->rank();
  for (int s : stage_ids_) {
    if (s > 0 && schedule_.rank_of_stage(s - 1) != rank) in.push_back({schedule_.rank_of_stage(s - 1), 2 * (s - 1)});
    if (s + 1 < schedule_.stages && schedule_.rank_of_stage(s + 1) != rank)
      in.push_back({schedule_.rank_of_stage(s + 1), 2 * s + 1});
  }
  return in;
}

StepResult Pipeline::finish_step(const std::string& failure, bool primary, std::int64_t examples) {
  const bool has_last = holds_stage(schedule_.stages - 1);
  Json mine = {{"failure", failure}, {"primary", primary}, {"sent", sent_}, {"examples", examples}};
  if (has_last && failure.empty()) {
    mine["loss"] = loss_sum_;
    mine["observation"] = observation_sum_;
  }
  const std::vector<Json> all = exchange_documents(*comm_, mine);
  std::string failures, secondary;
  for (int r = 0; r < comm_->size(); ++r) {
    const std::string f = all[r]["failure"];
    if (f.empty()) continue;
    std::string& list = all[r]["primary"].get<bool>() ? failures : secondary;
    if (list.find(f) == std::string::npos) list += (list.empty() ? "" : "; ") + f;
  }
  if (failures.empty()) failures = secondary;
  if (!failures.empty()) {
    // Take every message still on its way to this rank, so that the channels start the next
    // step empty (and no message is left unreceived at the end of the job).
    for (const Channel& c : incoming_channels()) {
      const std::int64_t sent = all[c.peer]["sent"][c.tag];
      for (std::int64_t& got = received_[static_cast<std::size_t>(c.tag)]; got < sent; ++got)
        protocol::drop_message(*comm_, c.peer, c.tag);
    }
    comm_->wait_sends();
    TANDEM_FAIL("pipeline: ", schedule_.describe(), ": the step failed (every rank stopped it): ", failures);
  }
  comm_->wait_sends();
  std::int64_t agreed = -1;
  for (int r = 0; r < comm_->size(); ++r) {
    const std::int64_t e = all[r]["examples"];
    if (e < 0) continue;
    TANDEM_CHECK(agreed < 0 || e == agreed, "pipeline: the ranks were given batches of different sizes (rank ", r, ": ",
                 e, " examples, another rank: ", agreed, "): every rank must pass the same batch");
    agreed = e;
  }
  const Json& last = all[static_cast<std::size_t>(schedule_.rank_of_stage(schedule_.stages - 1))];
  StepResult result;
  result.loss = last["loss"];
  result.observation = last["observation"].get<StepObservation>();
  result.examples = agreed;
  return result;
}

}  // namespace pipeline
}  // namespace tandem
