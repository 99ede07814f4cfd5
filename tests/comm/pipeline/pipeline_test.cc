// The pipeline runtime (comm/pipeline/pipeline.h) on 2, 3 and 4 ranks: for every schedule and
// microbatch count, the parameter gradients of one step, and the parameters after three
// optimizer steps, equal the same model computed in one process on the whole batch (f64, to
// 1e-10); a sequence stage takes microbatches of different lengths; recomputation changes
// nothing; under bf16 autocast the activations cross the stages in bf16 and the gradients equal
// one process running the same microbatches under the same autocast; and every kind of bad input is the same clear
// error on every rank, after which the pipeline still runs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "comm/pipeline/layout.h"
#include "comm/pipeline/pipeline.h"
#include "comm/pipeline/pipeline_training.h"
#include "comm/pipeline/profile.h"
#include "comm/pipeline/zero_bubble.h"
#include "comm/trace/flight_recorder.h"
#include "core/deterministic.h"
#include "data/iterator.h"
#include "data/tuple_dataset.h"
#include "layers/links/linear.h"
#include "layers/links/n_step_lstm.h"
#include "layers/optimizers/sgd.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;

namespace {

constexpr std::int64_t kIn = 5, kWidth = 6, kClasses = 3;

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

std::shared_ptr<Linear> seeded_linear(std::int64_t in, std::int64_t out, std::uint64_t seed) {
  auto l = std::make_shared<Linear>(in, out, LinearOptions{false, {}, {}, DType::f64});
  Generator gen(seed);
  l->W().set_data(randn({out, in}, gen, 0, 0.5, DType::f64));
  l->b().set_data(randn({out}, gen, 0, 0.2, DType::f64));
  return l;
}

// Stage s of an MLP of `stages` stages: tanh(W x + b), the last one a linear classifier whose
// loss is the softmax cross-entropy against the targets. Built alike on every rank from the seed.
class MlpStage : public Chain {
 public:
  MlpStage(int stage, int stages)
      : last_(stage == stages - 1),
        l(add_link("l", seeded_linear(stage == 0 ? kIn : kWidth, last_ ? kClasses : kWidth, 100 + stage))) {}
  Variables forward_many(const Variables& xs) override {
    if (!last_) return {F::tanh((*l)(xs.at(0)))};
    return {F::softmax_cross_entropy((*l)(xs.at(0)), xs.at(1))};
  }
  bool last_;
  std::shared_ptr<Linear> l;
};

std::vector<Tensor> make_batch(std::int64_t n, std::uint64_t seed) {
  Generator gen(seed);
  Tensor x = randn({n, kIn}, gen, 0, 1, DType::f64);
  Tensor t({n}, DType::i32);
  for (std::int64_t i = 0; i < n; ++i) t.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7 + seed) % kClasses);
  return {x, t};
}

// The whole model in one process: every stage, in order, on the whole batch.
struct Reference {
  explicit Reference(int stages) {
    for (int s = 0; s < stages; ++s) links.push_back(std::make_shared<MlpStage>(s, stages));
  }
  double loss_and_backward(const std::vector<Tensor>& batch) {
    Variable h(batch[0]);
    for (std::size_t s = 0; s + 1 < links.size(); ++s) h = links[s]->forward_many({h})[0];
    Variable loss = links.back()->forward_many({h, Variable(batch[1])})[0];
    loss.backward();
    return loss.data().item();
  }
  std::vector<std::shared_ptr<MlpStage>> links;
};

std::vector<LinkPtr> my_stages(int stages, int ranks, int rank) {
  std::vector<LinkPtr> mine;
  for (int s = rank; s < stages; s += ranks) mine.push_back(std::make_shared<MlpStage>(s, stages));
  return mine;
}

// This rank's stages where the schedule places them (zbv's V).
std::vector<LinkPtr> my_stages(const pipeline::Schedule& schedule, int rank) {
  std::vector<LinkPtr> mine;
  for (int s : schedule.stages_of_rank(rank)) mine.push_back(std::make_shared<MlpStage>(s, schedule.stages));
  return mine;
}

void require_close(const Tensor& got, const Tensor& want, const std::string& what, double tol = 1e-10) {
  INFO(what);
  REQUIRE(got.defined());
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": " << g[i] << " vs " << w[i]);
    REQUIRE(std::abs(g[i] - w[i]) <= tol * (1 + std::abs(w[i])));
  }
}

// This rank's stage parameters against the reference's.
void require_same_params(const pipeline::Pipeline& pipe, const Reference& ref, bool gradients) {
  for (int s : pipe.stage_ids()) {
    auto got = pipe.stage(s)->namedparams();
    auto want = ref.links[static_cast<std::size_t>(s)]->namedparams();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const std::string what = "stage " + std::to_string(s) + " " + got[i].first;
      if (gradients) require_close(got[i].second.grad(), want[i].second.grad(), what + " gradient");
      else require_close(got[i].second.data(), want[i].second.data(), what);
    }
  }
}

struct Case {
  std::string schedule;
  int stages_per_rank;
  int microbatches;
  bool recompute;
};

std::vector<Case> cases(int p) {
  std::vector<Case> out;
  for (const std::string suffix : {"", "-dw"}) {  // "-dw": weight gradients deferred (schedule.h)
    for (int m : {1, p, 2 * p + 1}) {
      out.push_back({"gpipe" + suffix, 1, m, false});
      out.push_back({"1f1b" + suffix, 1, m, false});
    }
    for (int m : {p, 2 * p}) out.push_back({"interleaved" + suffix, 2, m, false});
    out.push_back({"1f1b" + suffix, 1, p, true});
    out.push_back({"interleaved" + suffix, 2, p, true});
  }
  // Zero bubble (zero_bubble.h): weight actions per microbatch.
  for (int m : {p, 2 * p, 2 * p + 1}) {
    out.push_back({"zb-h1", 1, m, false});
    out.push_back({"zb-h2", 1, m, false});
    out.push_back({"zbv", 2, m, false});
  }
  out.push_back({"zb-h1", 1, 2 * p, true});
  out.push_back({"zbv", 2, 2 * p + 1, true});
  return out;
}

bool has_weight_actions(const std::string& schedule) {
  return schedule.rfind("zb", 0) == 0 || (schedule.size() > 3 && schedule.substr(schedule.size() - 3) == "-dw");
}

}  // namespace

TEST_CASE("pipeline: one step's gradients equal one process for every schedule and microbatch count") {
  const CommunicatorPtr comm = world();
  const int p = comm->size();
  for (const Case& c : cases(p)) {
    const int stages = p * c.stages_per_rank;
    INFO(c.schedule << ", " << stages << " stages, " << c.microbatches << " microbatches"
                    << (c.recompute ? ", recompute" : ""));
    pipeline::PipelineOptions options;
    options.recompute = c.recompute;
    const pipeline::Schedule schedule = pipeline::schedule_by_name(c.schedule, p, c.stages_per_rank, c.microbatches);
    auto pipe = std::make_shared<pipeline::Pipeline>(comm, schedule, my_stages(schedule, comm->rank()), options);
    const std::vector<Tensor> batch = make_batch(4 * p + 3, 7);  // uneven microbatches
    const pipeline::StepResult result = pipe->step(batch);

    Reference ref(stages);
    const double loss = ref.loss_and_backward(batch);
    REQUIRE(std::abs(result.loss - loss) <= 1e-12);
    REQUIRE(result.examples == 4 * p + 3);
    require_same_params(*pipe, ref, true);
    // Weight actions: every stage's backwards queued its weight's gradient, and its weight actions ran.
    const bool deferred = has_weight_actions(c.schedule);
    const pipeline::StepProfile& profile = pipe->last_profile();
    REQUIRE(profile.queued_bytes.size() == (deferred ? pipe->stage_ids().size() : 0));
    for (const auto& [stage, bytes] : profile.queued_bytes) REQUIRE(bytes > 0);
    const auto weight_actions = std::count_if(profile.actions.begin(), profile.actions.end(), [](const auto& a) {
      return a.action.kind == pipeline::ActionKind::weight;
    });
    REQUIRE(weight_actions == static_cast<long>(deferred ? pipe->stage_ids().size() * c.microbatches : 0));
  }
}

TEST_CASE("pipeline: parameters after three optimizer steps equal one process") {
  const CommunicatorPtr comm = world();
  const int p = comm->size();
  for (const auto& [name, per_rank] :
       std::vector<std::pair<std::string, int>>{{"gpipe", 1}, {"1f1b", 1}, {"1f1b-dw", 1}, {"zb-h1", 1}, {"zbv", 2}}) {
    INFO(name);
    const pipeline::Schedule schedule = pipeline::schedule_by_name(name, p, per_rank, 2 * p + 1);
    auto pipe = std::make_shared<pipeline::Pipeline>(comm, schedule, my_stages(schedule, comm->rank()));
    MomentumSGD opt(0.1, 0.9);
    opt.setup(pipe);
    Reference ref(schedule.stages);
    auto whole = std::make_shared<ChainList>();
    for (auto& l : ref.links) whole->append(l);
    MomentumSGD ref_opt(0.1, 0.9);
    ref_opt.setup(whole);
    for (int step = 0; step < 3; ++step) {
      const std::vector<Tensor> batch = make_batch(5 * p + 2, 11 + step);
      pipe->cleargrads();
      pipe->step(batch);
      opt.update();
      whole->cleargrads();
      ref.loss_and_backward(batch);
      ref_opt.update();
    }
    require_same_params(*pipe, ref, false);
  }
}

TEST_CASE("pipeline: evaluate runs forwards only and reports the last stage's observation on every rank") {
  const CommunicatorPtr comm = world();
  const int p = comm->size();
  auto pipe =
      std::make_shared<pipeline::Pipeline>(comm, pipeline::one_f_one_b(p, p + 1), my_stages(p, p, comm->rank()));
  const std::vector<Tensor> batch = make_batch(3 * p + 1, 5);
  const pipeline::StepResult result = pipe->evaluate(batch);
  Reference ref(p);
  double want;
  {
    NoGradGuard no_grad;
    Variable h(batch[0]);
    for (int s = 0; s + 1 < p; ++s) h = ref.links[static_cast<std::size_t>(s)]->forward_many({h})[0];
    want = ref.links.back()->forward_many({h, Variable(batch[1])})[0].data().item();
  }
  REQUIRE(std::abs(result.loss - want) <= 1e-12);
  for (const auto& [name, param] : pipe->namedparams()) REQUIRE_FALSE(param.grad().defined());
}

namespace {

// A sequence model: stage 0 an NStepLSTM over a microbatch of sequences (of different lengths),
// giving each sequence's final hidden state; then tanh layers; the last a linear regression
// against the targets (mean squared error).
class SequenceStage : public Chain {
 public:
  SequenceStage(int stage, int stages) : stage_(stage), last_(stage == stages - 1) {
    if (stage == 0) {
      lstm = add_link("lstm", std::make_shared<NStepLSTM>(1, 3, kWidth, 0.0, DType::f64));
      Generator gen(300);
      for (auto& [name, param] : lstm->namedparams()) param.set_data(randn(param.shape(), gen, 0, 0.4, DType::f64));
    }
    if (stage > 0) l = add_link("l", seeded_linear(kWidth, last_ ? 2 : kWidth, 200 + stage));
  }
  Variables forward_many(const Variables& xs) override {
    Variable h;
    if (stage_ == 0) {
      const Variables sequences(xs.begin(), xs.end() - (last_ ? 1 : 0));
      h = F::reshape(lstm->forward(Variable(), Variable(), sequences).hy,
                     {static_cast<std::int64_t>(sequences.size()), kWidth});
    } else {
      h = xs[0];
    }
    if (stage_ > 0) h = last_ ? (*l)(h) : F::tanh((*l)(h));
    if (last_) return {F::mean_squared_error(h, xs.back())};
    return {h};
  }
  int stage_;
  bool last_;
  std::shared_ptr<NStepLSTM> lstm;
  std::shared_ptr<Linear> l;
};

}  // namespace

TEST_CASE("pipeline: microbatches of different sequence lengths through an NStepLSTM stage equal one process") {
  const CommunicatorPtr comm = world();
  const int p = comm->size();
  const int m_count = p + 1;
  // Microbatch m holds m + 1 sequences; their lengths differ within and across microbatches.
  Generator gen(9);
  std::vector<pipeline::Microbatch> microbatches;
  std::vector<Tensor> all_sequences, all_targets;
  for (int m = 0; m < m_count; ++m) {
    pipeline::Microbatch mb;
    for (int i = 0; i <= m; ++i) {
      mb.inputs.push_back(randn({2 + (3 * m + 2 * i) % 7, 3}, gen, 0, 1, DType::f64));
      all_sequences.push_back(mb.inputs.back());
    }
    mb.targets.push_back(randn({m + 1, 2}, gen, 0, 1, DType::f64));
    all_targets.push_back(mb.targets.back());
    mb.examples = m + 1;
    microbatches.push_back(mb);
  }
  for (const auto& [name, per_rank] :
       std::vector<std::pair<std::string, int>>{{"gpipe", 1}, {"1f1b", 1}, {"zb-h1", 1}, {"zb-h2", 1}, {"zbv", 2}}) {
    INFO(name);
    const pipeline::Schedule schedule = pipeline::schedule_by_name(name, p, per_rank, m_count);
    const int stages = schedule.stages;
    std::vector<LinkPtr> mine;
    for (int s : schedule.stages_of_rank(comm->rank())) mine.push_back(std::make_shared<SequenceStage>(s, stages));
    auto pipe = std::make_shared<pipeline::Pipeline>(comm, schedule, mine);
    const pipeline::StepResult result = pipe->step(microbatches);

    std::vector<std::shared_ptr<SequenceStage>> ref;
    for (int s = 0; s < stages; ++s) ref.push_back(std::make_shared<SequenceStage>(s, stages));
    Variables xs;
    for (const Tensor& t : all_sequences) xs.emplace_back(t);
    if (stages == 1) xs.emplace_back(concat(all_targets, 0));
    Variable h = ref[0]->forward_many(xs)[0];
    for (int s = 1; s < stages; ++s)
      h = ref[static_cast<std::size_t>(s)]->forward_many(
          s == stages - 1 ? Variables{h, Variable(concat(all_targets, 0))} : Variables{h})[0];
    h.backward();
    REQUIRE(std::abs(result.loss - h.data().item()) <= 1e-12);
    for (int s : pipe->stage_ids()) {
      auto got = pipe->stage(s)->namedparams();
      auto want = ref[static_cast<std::size_t>(s)]->namedparams();
      for (std::size_t i = 0; i < got.size(); ++i)
        require_close(got[i].second.grad(), want[i].second.grad(), "stage " + std::to_string(s) + " " + got[i].first);
    }
  }
}

namespace {

// tanh(W x + b) with dropout: the recomputed forward must draw the same mask.
class DropoutStage : public MlpStage {
 public:
  using MlpStage::MlpStage;
  Variables forward_many(const Variables& xs) override {
    if (last_) return MlpStage::forward_many(xs);
    return {F::dropout(F::tanh((*l)(xs.at(0))), 0.5)};
  }
};

}  // namespace

TEST_CASE("pipeline: recomputation draws the same dropout masks and gives the same gradients") {
  const CommunicatorPtr comm = world();
  const int p = comm->size();
  std::map<std::string, Tensor> grads[2];
  for (bool recompute : {false, true}) {
    std::vector<LinkPtr> mine;
    for (int s = comm->rank(); s < p; s += p) mine.push_back(std::make_shared<DropoutStage>(s, p));
    pipeline::PipelineOptions options;
    options.recompute = recompute;
    auto pipe = std::make_shared<pipeline::Pipeline>(comm, pipeline::one_f_one_b(p, 2 * p), mine, options);
    manual_seed(42);
    pipe->step(make_batch(4 * p, 3));
    for (const auto& [name, param] : pipe->namedparams()) grads[recompute][name] = param.grad();
  }
  for (const auto& [name, g] : grads[0]) require_close(grads[1][name], g, name, 0);
}

namespace {

// Stage 0 misbehaves as told; the others are MlpStages.
class FaultyStage : public MlpStage {
 public:
  enum class Fault { none, returns_nothing, changes_width };
  FaultyStage(int stage, int stages, Fault fault) : MlpStage(stage, stages), fault_(fault) {}
  Variables forward_many(const Variables& xs) override {
    ++calls_;
    if (fault_ == Fault::returns_nothing && calls_ == 2) return {};
    Variables ys = MlpStage::forward_many(xs);
    if (fault_ == Fault::changes_width && calls_ == 2) return {F::concat({ys[0], ys[0]}, 1)};
    return ys;
  }
  Fault fault_;
  int calls_ = 0;
};

std::vector<LinkPtr> faulty_stages(int p, int rank, FaultyStage::Fault fault) {
  std::vector<LinkPtr> mine;
  for (int s = rank; s < p; s += p)
    mine.push_back(std::make_shared<FaultyStage>(s, p, s == 0 ? fault : FaultyStage::Fault::none));
  return mine;
}

// After a failed step the pipeline must still run: one more step, checked against one process.
void require_next_step_works(pipeline::Pipeline& pipe, int p) {
  pipe.cleargrads();
  const std::vector<Tensor> batch = make_batch(2 * p + 1, 23);
  pipe.step(batch);
  Reference ref(p);
  ref.loss_and_backward(batch);
  require_same_params(pipe, ref, true);
}

}  // namespace

TEST_CASE("pipeline: a failure on one rank is the same error on every rank, and the next step runs") {
  const CommunicatorPtr comm = world();
  const int p = comm->size();
  for (const std::string name : {"gpipe", "1f1b", "1f1b-dw"}) {
    INFO(name);
    {
      auto pipe =
          std::make_shared<pipeline::Pipeline>(comm, pipeline::schedule_by_name(name, p, 1, 3),
                                               faulty_stages(p, comm->rank(), FaultyStage::Fault::returns_nothing));
      // On every rank: the rank, the action and why.
      REQUIRE_THROWS_WITH(pipe->step(make_batch(6, 1)),
                          Contains("rank 0, forward of microbatch 1 on stage 0") && Contains("returned nothing"));
      require_next_step_works(*pipe, p);
    }
    {
      // Stage 0 returns twice the width for microbatch 1: stage 1's Linear cannot take it.
      auto pipe =
          std::make_shared<pipeline::Pipeline>(comm, pipeline::schedule_by_name(name, p, 1, 3),
                                               faulty_stages(p, comm->rank(), FaultyStage::Fault::changes_width));
      REQUIRE_THROWS_WITH(pipe->step(make_batch(6, 1)),
                          Contains("rank 1, forward of microbatch 1 on stage 1") && Contains("f64[2, 12]"));
      require_next_step_works(*pipe, p);
    }
    {
      auto pipe = std::make_shared<pipeline::Pipeline>(comm, pipeline::schedule_by_name(name, p, 1, 8),
                                                       my_stages(p, p, comm->rank()));
      REQUIRE_THROWS_WITH(pipe->step(make_batch(5, 1)), Contains("8 microbatches from a batch of 5 example(s)"));
      pipe->cleargrads();
      const std::vector<Tensor> batch = make_batch(9, 4);
      pipe->step(batch);
      Reference ref(p);
      ref.loss_and_backward(batch);
      require_same_params(*pipe, ref, true);
    }
  }
}

TEST_CASE("pipeline: schedules that do not fit are errors on every rank before anything runs") {
  const CommunicatorPtr comm = world();
  const int p = comm->size();
  REQUIRE_THROWS_WITH(
      pipeline::Pipeline(comm, pipeline::one_f_one_b(p + 1, 4), my_stages(p, p, comm->rank())),
      Contains("is for " + std::to_string(p + 1) + " rank(s), but the communicator has " + std::to_string(p)));
  // Rank 0 runs GPipe, the others 1F1B.
  const pipeline::Schedule schedule = comm->rank() == 0 ? pipeline::gpipe(p, 4) : pipeline::one_f_one_b(p, 4);
  REQUIRE_THROWS_WITH(pipeline::Pipeline(comm, schedule, my_stages(p, p, comm->rank())),
                      Contains("the ranks were given different schedules"));
  // A rank given the wrong number of stage links.
  std::vector<LinkPtr> stages = my_stages(p, p, comm->rank());
  if (comm->rank() == p - 1) stages.push_back(stages[0]);
  REQUIRE_THROWS_WITH(pipeline::Pipeline(comm, pipeline::gpipe(p, 2), stages),
                      Contains("rank " + std::to_string(p - 1) + " holds 1 stage(s)"));
  // A zero-bubble schedule whose last rank runs a weight action before its backward: the same
  // error on every rank, naming the rank and the action, before any message.
  pipeline::Schedule early = pipeline::zb_h1(p, 2);
  std::vector<pipeline::Action>& last = early.actions[static_cast<std::size_t>(p - 1)];
  const auto w0 = std::find(last.begin(), last.end(), pipeline::weight(p - 1, 0));
  last.erase(w0);
  last.insert(last.begin() + 1, pipeline::weight(p - 1, 0));  // F0 W0 B0 ...
  REQUIRE_THROWS_WITH(pipeline::Pipeline(comm, early, my_stages(early, comm->rank())),
                      Contains("rank " + std::to_string(p - 1) +
                               ", action 1 (weight gradients of microbatch 0 on "
                               "stage " +
                               std::to_string(p - 1) + ") comes before the backward of microbatch 0"));
}

TEST_CASE("pipeline x data parallelism: the layout's pipelines with averaged gradients equal one process") {
  const CommunicatorPtr comm = world();
  // 4 ranks: 2 pipelines of 2; 2 ranks: 2 pipelines of 1 rank holding both stages (through
  // memory); 3 ranks: 3 pipelines of 1.
  const int data_parallel = comm->size() % 2 == 0 ? 2 : comm->size();
  const pipeline::PipelineLayout layout = pipeline::make_pipeline_layout(comm, data_parallel);
  const int p = layout.stage_ranks;
  REQUIRE(layout.pipeline->size() == p);
  REQUIRE(layout.data->size() == data_parallel);
  const int v = p == 1 ? 2 : 1;  // a pipeline of one rank holds two stages
  std::vector<pipeline::Schedule> schedules = {
      v == 1 ? pipeline::one_f_one_b(p, 3) : pipeline::interleaved_1f1b(p, v, 3), pipeline::zbv(p, 3)};
  if (v == 1) schedules.push_back(pipeline::zb_h1(p, 3));
  for (const pipeline::Schedule& schedule : schedules) {
    INFO(schedule.describe());
    const int stages = schedule.stages;
    auto pipe = std::make_shared<pipeline::Pipeline>(layout.pipeline, schedule, my_stages(schedule, layout.stage_rank));
    auto opt = create_multi_node_optimizer(std::make_shared<SGD>(0.5), layout.data);
    opt->setup(pipe);
    Reference ref(stages);
    auto whole = std::make_shared<ChainList>();
    for (auto& l : ref.links) whole->append(l);
    SGD ref_opt(0.5);
    ref_opt.setup(whole);
    const std::int64_t share = 7;
    for (int step = 0; step < 2; ++step) {
      // The whole batch; each pipeline takes its own share of it.
      const std::vector<Tensor> batch = make_batch(share * data_parallel, 31 + step);
      std::vector<Tensor> mine;
      for (const Tensor& field : batch)
        mine.push_back(field.slice_rows(share * layout.pipeline_index, share * (layout.pipeline_index + 1)));
      pipe->cleargrads();
      pipe->step(mine);
      opt->update();
      whole->cleargrads();
      ref.loss_and_backward(batch);
      ref_opt.update();
    }
    require_same_params(*pipe, ref, false);
  }
}

TEST_CASE("pipeline updater and evaluator: the Trainer's steps equal one process, reported on every rank") {
  const CommunicatorPtr comm = world();
  const int p = comm->size();
  const std::vector<Tensor> data = make_batch(40, 17);
  auto dataset = std::make_shared<TupleDataset>(data);
  auto pipe = std::make_shared<pipeline::Pipeline>(comm, pipeline::one_f_one_b(p, p), my_stages(p, p, comm->rank()));
  auto opt = std::make_shared<SGD>(0.3);
  opt->setup(pipe);
  // Every rank iterates the same batches (same seed).
  auto updater =
      pipeline::create_pipeline_updater(std::make_shared<SerialIterator>(dataset, 10, true, true, 5), opt, pipe);
  Reference ref(p);
  auto whole = std::make_shared<ChainList>();
  for (auto& l : ref.links) whole->append(l);
  SGD ref_opt(0.3);
  ref_opt.setup(whole);
  SerialIterator ref_iter(dataset, 10, true, true, 5);
  for (int i = 0; i < 3; ++i) {
    const Observation observed = updater->update();
    whole->cleargrads();
    const double loss = ref.loss_and_backward(ref_iter.next());
    ref_opt.update();
    REQUIRE(observed.count("main/loss") == 1);
    REQUIRE(std::abs(observed.at("main/loss") - loss) <= 1e-12);
  }
  require_same_params(*pipe, ref, false);
  // The evaluator over 40 examples in batches of 15 (the last has 10): the mean loss of the model.
  auto evaluator =
      pipeline::create_pipeline_evaluator(std::make_shared<SerialIterator>(dataset, 15, false, false), pipe);
  const Observation metrics = evaluator->evaluate();
  double want;
  {
    NoGradGuard no_grad;
    Variable h(data[0]);
    for (int s = 0; s + 1 < p; ++s) h = ref.links[static_cast<std::size_t>(s)]->forward_many({h})[0];
    want = ref.links.back()->forward_many({h, Variable(data[1])})[0].data().item();
  }
  REQUIRE(std::abs(metrics.at("loss") - want) <= 1e-12);
}

TEST_CASE("profile: measured costs and timeline of a real step; 1F1B keeps less alive than GPipe") {
  const CommunicatorPtr comm = world();
  const int p = comm->size();
  const int m = 4 * p;
  std::int64_t peak[2];
  for (int which = 0; which < 2; ++which) {
    const pipeline::Schedule schedule = which == 0 ? pipeline::gpipe(p, m) : pipeline::one_f_one_b(p, m);
    auto pipe = std::make_shared<pipeline::Pipeline>(comm, schedule, my_stages(p, p, comm->rank()));
    pipe->step(make_batch(8 * m, 3));
    const pipeline::StepProfile& profile = pipe->last_profile();
    REQUIRE(profile.actions.size() == static_cast<std::size_t>(2 * m));
    REQUIRE(profile.compute_s.size() == profile.actions.size());
    peak[which] = profile.peak_bytes;

    const pipeline::MeasuredStep measured = pipeline::measure_last_step(*pipe, pipeline::LinkModel{});
    REQUIRE(measured.options.stage_costs.size() == static_cast<std::size_t>(p));
    REQUIRE(measured.peak_bytes.size() == static_cast<std::size_t>(p));
    for (int s = 0; s < p; ++s) {
      const pipeline::StageCost& cost = measured.options.stage_costs[static_cast<std::size_t>(s)];
      CHECK(cost.forward_s > 0);
      CHECK(cost.backward_s > 0);
      CHECK(cost.stored_bytes > 0);
      // 8 examples of kWidth doubles (the last stage sends nothing).
      CHECK(cost.activation_bytes == (s + 1 < p ? 8 * kWidth * 8 : 0));
    }
    // The simulator runs on what was measured.
    const pipeline::SimulationResult predicted = pipeline::simulate(schedule, measured.options);
    CHECK(predicted.step_s > 0);
    const std::string command = pipeline::simulate_command(schedule, measured.options);
    CHECK_THAT(command, Contains("bazel run //tools:simulate_pipeline -- --schedule " +
                                 std::string(which == 0 ? "gpipe" : "1f1b") + " --ranks " + std::to_string(p)) &&
                            Contains(" --microbatches " + std::to_string(m) + " --forward-ms "));

    const pipeline::SimulationResult real = pipeline::measured_result(*pipe);
    REQUIRE(real.ranks.size() == static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) {
      REQUIRE(real.ranks[static_cast<std::size_t>(r)].actions.size() ==
              schedule.actions[static_cast<std::size_t>(r)].size());
      for (std::size_t i = 0; i < schedule.actions[static_cast<std::size_t>(r)].size(); ++i)
        CHECK(real.ranks[static_cast<std::size_t>(r)].actions[i].action ==
              schedule.actions[static_cast<std::size_t>(r)][i]);
    }
    CHECK(real.step_s > 0);
  }
  // Rank 0 keeps all 4P microbatches under GPipe, at most P under 1F1B.
  if (comm->rank() == 0) CHECK(peak[0] > 2 * peak[1]);
}

TEST_CASE("make_parallel_layout: tensor x pipeline x data groups, and a split that does not divide") {
  const CommunicatorPtr comm = world();
  const int size = comm->size(), rank = comm->rank();
  // Every factorisation tensor x pipeline x data of this size.
  for (int tp = 1; tp <= size; ++tp)
    for (int pp = 1; tp * pp <= size; ++pp) {
      if (size % (tp * pp) != 0) continue;
      INFO("tp " << tp << " pp " << pp);
      const pipeline::ParallelLayout layout = pipeline::make_parallel_layout(comm, tp, pp);
      const int dp = size / (tp * pp);
      REQUIRE(layout.data_parallel == dp);
      REQUIRE(rank == (layout.data_rank * pp + layout.stage_rank) * tp + layout.tensor_rank);
      REQUIRE(layout.tensor->size() == tp);
      REQUIRE(layout.tensor->rank() == layout.tensor_rank);
      REQUIRE(layout.pipeline->size() == pp);
      REQUIRE(layout.pipeline->rank() == layout.stage_rank);
      REQUIRE(layout.data->size() == dp);
      REQUIRE(layout.data->rank() == layout.data_rank);
      // Each group holds the world ranks that differ from this one in its own coordinate only.
      const auto members = [&](Communicator& group) {
        std::vector<double> all;
        for (const Tensor& t : group.allgather(from_vector(std::vector<double>{double(rank)}, {1})))
          all.push_back(t.to_vector<double>()[0]);
        return all;
      };
      std::vector<double> want_tensor, want_pipeline, want_data;
      for (int t = 0; t < tp; ++t) want_tensor.push_back((layout.data_rank * pp + layout.stage_rank) * tp + t);
      for (int p = 0; p < pp; ++p) want_pipeline.push_back((layout.data_rank * pp + p) * tp + layout.tensor_rank);
      for (int d = 0; d < dp; ++d) want_data.push_back((d * pp + layout.stage_rank) * tp + layout.tensor_rank);
      CHECK(members(*layout.tensor) == want_tensor);
      CHECK(members(*layout.pipeline) == want_pipeline);
      CHECK(members(*layout.data) == want_data);
    }
  REQUIRE_THROWS_WITH(pipeline::make_parallel_layout(comm, size + 1, 1),
                      Contains("cannot be split as tensor parallel " + std::to_string(size + 1)));
}

namespace {

// An f32 copy of stage s (autocast leaves f64 as it is).
std::shared_ptr<MlpStage> f32_stage(int s, int stages) {
  auto stage = std::make_shared<MlpStage>(s, stages);
  stage->to(DType::f32);
  return stage;
}

}  // namespace

TEST_CASE("pipeline under bf16 autocast: bf16 activations between stages, gradients equal one process") {
  const CommunicatorPtr comm = world();
  const int p = comm->size();
  const int microbatches = 2 * p;
  for (const std::string schedule : {"gpipe", "1f1b"}) {
    INFO(schedule << ", " << p << " stages, " << microbatches << " microbatches");
    std::vector<LinkPtr> mine;
    for (int s = comm->rank(); s < p; s += p) mine.push_back(f32_stage(s, p));
    auto pipe =
        std::make_shared<pipeline::Pipeline>(comm, pipeline::schedule_by_name(schedule, p, 1, microbatches), mine);
    std::vector<Tensor> batch = make_batch(3 * microbatches, 11);
    batch[0] = batch[0].to(DType::f32);
    pipeline::StepResult result;
    std::int64_t bf16_output_bytes = 0;
    {
      const AutocastScope autocast(DType::bf16);
      result = pipe->step(batch);
      bf16_output_bytes = pipe->last_profile().output_bytes.begin()->second;
    }
    // The same step in f32: every stage but the last sends twice the bytes.
    pipe->cleargrads();
    pipe->step(batch);
    if (comm->rank() != p - 1) REQUIRE(pipe->last_profile().output_bytes.begin()->second == 2 * bf16_output_bytes);
    pipe->cleargrads();
    {
      const AutocastScope autocast(DType::bf16);
      const pipeline::StepResult again = pipe->step(batch);
      REQUIRE(again.loss == result.loss);  // the step repeats bit for bit
    }

    // One process, the same microbatches in order, each loss weighted by its share of the batch.
    std::vector<std::shared_ptr<MlpStage>> ref;
    for (int s = 0; s < p; ++s) ref.push_back(f32_stage(s, p));
    double loss = 0;
    {
      const AutocastScope autocast(DType::bf16);
      for (const pipeline::Microbatch& mb : pipeline::split_batch(batch, microbatches, 1)) {
        Variable h(mb.inputs[0]);
        for (int s = 0; s + 1 < p; ++s) h = ref[static_cast<std::size_t>(s)]->forward_many({h})[0];
        Variable l = ref.back()->forward_many({h, Variable(mb.targets[0])})[0];
        const double share = static_cast<double>(mb.examples) / static_cast<double>(batch[0].size(0));
        loss += l.data().item() * share;
        F::mul(l, share).backward();
      }
    }
    REQUIRE(std::abs(result.loss - loss) <= 1e-6 * (1 + std::abs(loss)));
    for (int s : pipe->stage_ids()) {
      auto got = pipe->stage(s)->namedparams();
      auto want = ref[static_cast<std::size_t>(s)]->namedparams();
      for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("stage " << s << " " << got[i].first);
        REQUIRE(got[i].second.grad().dtype() == DType::f32);
        require_close(got[i].second.grad(), want[i].second.grad(), "gradient", 1e-6);
      }
    }
  }
}

namespace {

// This rank's parameter gradients after one step of `schedule` on the MLP, in stage order.
std::vector<std::vector<double>> step_gradients(const CommunicatorPtr& comm, const pipeline::Schedule& schedule,
                                                const std::vector<Tensor>& batch) {
  auto pipe = std::make_shared<pipeline::Pipeline>(comm, schedule, my_stages(schedule, comm->rank()));
  pipe->cleargrads();
  reset_gradient_groups();
  pipe->step(batch);
  std::vector<std::vector<double>> grads;
  for (int s : pipe->stage_ids())
    for (const auto& [name, param] : pipe->stage(s)->namedparams()) grads.push_back(param.grad().to_vector<double>());
  reset_gradient_groups();
  return grads;
}

// zbv's placement without weight actions: every forward, then every backward, in microbatch order.
pipeline::Schedule v_gpipe(int p, int m) {
  pipeline::Schedule s = pipeline::zbv(p, m);
  s.name = "v-gpipe";
  for (int r = 0; r < p; ++r) {
    const std::vector<int> held = s.stages_of_rank(r);  // {r, 2p - 1 - r}
    std::vector<pipeline::Action>& list = s.actions[static_cast<std::size_t>(r)];
    list.clear();
    for (int stage : held)
      for (int mb = 0; mb < m; ++mb) list.push_back(pipeline::forward(stage, mb));
    for (auto stage = held.rbegin(); stage != held.rend(); ++stage)
      for (int mb = 0; mb < m; ++mb) list.push_back(pipeline::backward(*stage, mb));
  }
  return s;
}

}  // namespace

TEST_CASE("zero bubble: gradients bit-identical to 1F1B, in deterministic mode and by default") {
  const CommunicatorPtr comm = world();
  const int p = comm->size();
  for (const bool det : {true, false}) {
    set_deterministic(det);
    for (int m : {p, 2 * p, 2 * p + 1}) {
      INFO((det ? "deterministic" : "default") << ", " << m << " microbatches");
      const std::vector<Tensor> batch = make_batch(3 * m, 5);  // equal microbatches (deterministic mode)
      const auto base = step_gradients(comm, pipeline::one_f_one_b(p, m), batch);
      REQUIRE(step_gradients(comm, pipeline::zb_h1(p, m), batch) == base);
      REQUIRE(step_gradients(comm, pipeline::zb_h2(p, m), batch) == base);
      // zbv's 2P stages in its V, against the same stages and placement without weight actions.
      REQUIRE(step_gradients(comm, pipeline::zbv(p, m), batch) == step_gradients(comm, v_gpipe(p, m), batch));
      // A -dw schedule computes a stage's weights in one product: bit-identical only in deterministic mode.
      if (det)
        REQUIRE(step_gradients(comm, pipeline::defer_weight_gradients(pipeline::one_f_one_b(p, m)), batch) == base);
    }
  }
  set_deterministic(false);
}

TEST_CASE("zero bubble: the flight recorder names the line that called Pipeline::step") {
  const CommunicatorPtr comm = world();
  const int p = comm->size();
  if (p < 2) return;
  trace::FlightRecorder& recorder = trace::FlightRecorder::instance();
  const std::size_t capacity = recorder.capacity();
  recorder.reset(4096);
  const pipeline::Schedule schedule = pipeline::zb_h1(p, 2 * p);
  auto pipe = std::make_shared<pipeline::Pipeline>(comm, schedule, my_stages(schedule, comm->rank()));
  const int line = __LINE__ + 1;
  pipe->step(make_batch(4 * p, 3));
  std::int64_t pipeline_messages = 0;
  for (const trace::FlightEntry& e : recorder.entries()) {
    if (e.stage < 0) continue;  // the step's final exchange is outside any action
    INFO(e.op << " stage " << e.stage << " microbatch " << e.microbatch << " at " << e.site.str());
    REQUIRE(e.site.known());
    REQUIRE(std::string(e.site.file).find("pipeline_test.cc") != std::string::npos);
    REQUIRE(e.site.line == line);
    ++pipeline_messages;
  }
  REQUIRE(pipeline_messages > 0);
  recorder.reset(capacity);
}
