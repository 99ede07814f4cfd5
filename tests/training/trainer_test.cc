// The trainer: triggers, logs, evaluation, and snapshot/resume that continues exactly.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "autograd/functions.h"
#include "core/ops.h"
#include "data/data.h"
#include "layers/links/classifier.h"
#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"
#include "layers/serializers/serializers.h"
#include "training/extensions/evaluator.h"
#include "training/extensions/reporting.h"
#include "training/trainer.h"
#include "tests/training/test_util.h"

using namespace tandem;
using test_util::fresh_dir;
using test_util::read_all;

namespace {

// 120 examples of 5 features; labels from a fixed linear rule.
std::pair<DatasetPtr, DatasetPtr> toy_data() {
  Generator gen(11);
  const Tensor x = randn({150, 5}, gen);
  const Tensor t = argmax(matmul(x, randn({5, 3}, gen)), 1).to(DType::i32);
  auto all = std::make_shared<TupleDataset>(std::vector<Tensor>{x, t});
  auto [train, test] = split_dataset(all, 120);
  return {train, test};
}

struct Setup {
  std::shared_ptr<Classifier> model;
  std::shared_ptr<Adam> optimizer;
  std::shared_ptr<LogReport> log;
  std::unique_ptr<Trainer> trainer;
};

// How the updater and the evaluator reach the model: through the loss and evaluation functions
// (classifier_loss, classifier_eval), or directly (the model is the loss, as in Chainer).
enum class Form { functions, direct };

Setup make_trainer(Trigger stop, const std::string& out, DatasetPtr train, DatasetPtr test,
                   Form form = Form::functions, std::int64_t in_size = 5) {
  Setup s;
  manual_seed(5);  // same initial weights in every setup
  s.model = std::make_shared<Classifier>(std::make_shared<Linear>(in_size, 3));
  s.optimizer = std::make_shared<Adam>(0.05);
  s.optimizer->setup(s.model);
  auto iterator = std::make_shared<SerialIterator>(train, 16, true, true, 3);
  auto test_iterator = std::make_shared<SerialIterator>(test, 10, false, false);
  std::shared_ptr<StandardUpdater> updater;
  if (form == Form::direct) {
    updater = std::make_shared<StandardUpdater>(iterator, s.optimizer);
    s.trainer = std::make_unique<Trainer>(updater, stop, out, s.model);
    s.trainer->extend(std::make_shared<Evaluator>(test_iterator, s.model));
  } else {
    updater = std::make_shared<StandardUpdater>(iterator, s.optimizer, classifier_loss(s.model));
    s.trainer = std::make_unique<Trainer>(updater, stop, out, s.model);
    s.trainer->extend(std::make_shared<Evaluator>(test_iterator, classifier_eval(s.model)));
  }
  s.log = std::make_shared<LogReport>();
  s.trainer->extend(s.log);
  s.trainer->extend(std::make_shared<SnapshotWriter>());
  return s;
}

std::vector<float> flat_params(const Link& link) {
  std::vector<float> out;
  for (const Variable& p : link.params())
    for (float v : p.data().to_vector<float>()) out.push_back(v);
  return out;
}

}  // namespace

TEST_CASE("the trainer logs per-epoch means and validation results, and learns", "[trainer]") {
  auto [train, test] = toy_data();
  const std::string out = fresh_dir("log_run");
  Setup s = make_trainer(Trigger::epochs(6), out, train, test);
  s.trainer->run();
  const auto& log = s.log->log();
  REQUIRE(log.size() == 6);
  for (std::size_t i = 0; i < log.size(); ++i) {
    REQUIRE(log[i].at("epoch") == static_cast<double>(i + 1));
    REQUIRE(log[i].count("main/loss"));
    REQUIRE(log[i].count("main/accuracy"));
    REQUIRE(log[i].count("validation/main/loss"));
    REQUIRE(log[i].count("validation/main/accuracy"));
  }
  // 120 examples in batches of 16 (wrapping across epochs): epoch e ends at iteration ceil(120 e / 16).
  REQUIRE(log[0].at("iteration") == 8);
  REQUIRE(log[1].at("iteration") == 15);
  REQUIRE(log.back().at("main/loss") < log.front().at("main/loss"));
  REQUIRE(log.back().at("validation/main/accuracy") > 0.8);
  const std::string json = read_all(out + "/log");
  REQUIRE(json.front() == '[');
  REQUIRE(json.find("\"validation/main/accuracy\"") != std::string::npos);
  REQUIRE(latest_snapshot(out) == out + "/snapshot_iter_45.npz");
}

TEST_CASE("a run resumed from a snapshot ends exactly where an uninterrupted run does", "[trainer]") {
  auto [train, test] = toy_data();
  Setup whole = make_trainer(Trigger::epochs(4), fresh_dir("whole"), train, test);
  whole.trainer->run();

  const std::string out = fresh_dir("interrupted");
  {
    Setup first = make_trainer(Trigger::epochs(2), out, train, test);
    first.trainer->run();
  }
  Setup second = make_trainer(Trigger::epochs(4), out, train, test);
  second.trainer->load_snapshot(latest_snapshot(out));
  REQUIRE(second.trainer->iteration() == 15);
  second.trainer->run();

  REQUIRE(flat_params(*second.model) == flat_params(*whole.model));
  REQUIRE(second.optimizer->t() == whole.optimizer->t());
  const auto& a = whole.log->log();
  const auto& b = second.log->log();
  REQUIRE(b.size() == 2);  // the entries of this process; the file holds all four
  for (std::size_t i = 0; i < b.size(); ++i) {
    REQUIRE(b[i].at("iteration") == a[i + 2].at("iteration"));
    REQUIRE(b[i].at("main/loss") == a[i + 2].at("main/loss"));
    REQUIRE(b[i].at("validation/main/loss") == a[i + 2].at("validation/main/loss"));
  }
  const std::string json = read_all(out + "/log");
  REQUIRE(std::count(json.begin(), json.end(), '{') == 4);
}

TEST_CASE("the log file is a JSON list with one entry a line, NaN and Infinity written as Python writes them",
          "[trainer]") {
  // Reports values that JSON cannot hold as numbers, and a key that needs escaping.
  struct Odd : Extension {
    std::string name() const override { return "Odd"; }
    int priority() const override { return 300; }  // before LogReport
    void operator()(Trainer& trainer) override {
      trainer.observation()["odd/nan"] = std::nan("");
      trainer.observation()["odd/inf"] = INFINITY;
      trainer.observation()["odd/-inf"] = -INFINITY;
      trainer.observation()["odd/third"] = 1.0 / 3;
      trainer.observation()["odd/small"] = -1.5e-7;
      trainer.observation()["odd/\"quoted\"\t\\"] = 2;
    }
  };
  auto [train, test] = toy_data();
  const std::string out = fresh_dir("log_format");
  Setup s = make_trainer(Trigger::epochs(2), out, train, test);
  s.trainer->extend(std::make_shared<Odd>());
  s.trainer->run();
  const std::string json = read_all(out + "/log");
  std::vector<std::string> lines;
  std::istringstream in(json);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "[");
  CHECK(lines[3] == "]");
  for (int i : {1, 2}) {
    INFO(lines[i]);
    CHECK(lines[i].rfind("  {\"elapsed_time\": ", 0) == 0);
    CHECK(lines[i].back() == (i == 1 ? ',' : '}'));
    CHECK_THAT(lines[i], Catch::Contains(", \"epoch\": " + std::to_string(i) + ", \"iteration\": "));
    CHECK_THAT(lines[i], Catch::Contains("\"odd/\\\"quoted\\\"\\t\\\\\": 2, \"odd/-inf\": -Infinity, "
                                         "\"odd/inf\": Infinity, \"odd/nan\": NaN, \"odd/small\": -1.5e-07, "
                                         "\"odd/third\": 0.333333333, \"validation/main/accuracy\": "));
  }
}

TEST_CASE("iteration triggers and an iteration stop", "[trainer]") {
  auto [train, test] = toy_data();
  Setup s = make_trainer(Trigger::iterations(20), fresh_dir("iterations"), train, test);
  auto every5 = std::make_shared<LogReport>(Trigger::iterations(5), "log5");
  s.trainer->extend(every5);
  s.trainer->run();
  REQUIRE(s.trainer->iteration() == 20);
  REQUIRE(every5->log().size() == 4);
  REQUIRE(every5->log()[1].at("iteration") == 10);
}

TEST_CASE("snapshot loading and evaluation errors are clear", "[trainer]") {
  auto [train, test] = toy_data();
  const std::string out = fresh_dir("errors");
  Setup s = make_trainer(Trigger::epochs(1), out, train, test);
  write_npz(out + "/not_a_snapshot.npz", {{"x", zeros({1})}});
  REQUIRE_THROWS_WITH(s.trainer->load_snapshot(out + "/not_a_snapshot.npz"), Catch::Contains("not_a_snapshot.npz"));
  Evaluator repeating(std::make_shared<SerialIterator>(test, 7, true, false), classifier_eval(s.model));
  REQUIRE_THROWS_WITH(repeating.evaluate(), Catch::Contains("repeat"));
  REQUIRE_THROWS_AS(Trainer(nullptr, Trigger::epochs(1), out, s.model), Error);
}

TEST_CASE("the model as the loss: StandardUpdater(it, optimizer) and Evaluator(it, model)", "[trainer]") {
  auto [train, test] = toy_data();
  Setup with_functions = make_trainer(Trigger::epochs(3), fresh_dir("functions"), train, test);
  with_functions.trainer->run();
  Setup direct = make_trainer(Trigger::epochs(3), fresh_dir("direct"), train, test, Form::direct);
  direct.trainer->run();
  // The same steps, the same reports ("main/loss", "main/accuracy" and their validation twins).
  REQUIRE(flat_params(*direct.model) == flat_params(*with_functions.model));
  const auto& a = with_functions.log->log();
  const auto& b = direct.log->log();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    for (const char* key : {"main/loss", "main/accuracy", "validation/main/loss", "validation/main/accuracy"})
      REQUIRE(b[i].at(key) == a[i].at(key));
  }
}

namespace {

// Consumes its input and returns a size-0 "delegate" output, as comm's send does; its backward
// gives the input a gradient of ones.
class DelegateMaker : public FunctionNode {
 public:
  explicit DelegateMaker(int* backward_runs) : backward_runs_(backward_runs) {}
  std::string name() const override { return "delegate_maker"; }
  bool always_run_backward() const override { return true; }
  bool zero_fill_grad_outputs() const override { return false; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    shape_ = in[0].shape();
    return {zeros({0}, in[0].dtype())};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>&) override {
    ++*backward_runs_;
    return {ones(shape_)};
  }

 private:
  int* backward_runs_;
  Shape shape_;
};

// A rank of a model-parallel model without the loss: no input; returns the delegate variable.
class DelegateRank : public Link {
 public:
  explicit DelegateRank(int* backward_runs) : backward_runs_(backward_runs) { add_param("W", zeros({2})); }
  Variables forward_many(const Variables& xs) override {
    REQUIRE(xs.empty());
    return {call<DelegateMaker>({param("W")}, backward_runs_)[0]};
  }

 private:
  int* backward_runs_;
};

}  // namespace

TEST_CASE("a model that returns a delegate variable is updated through it and reports nothing", "[trainer]") {
  int backward_runs = 0;
  auto model = std::make_shared<DelegateRank>(&backward_runs);
  auto optimizer = std::make_shared<Adam>(0.1);
  optimizer->setup(model);
  // Batches without fields, as an empty dataset gives a rank that reads no data.
  struct NoFields : Dataset {
    std::int64_t size() const override { return 6; }
    Example get(std::int64_t) const override { return {}; }
    Example get_batch(const std::vector<std::int64_t>&) const override { return {}; }
  };
  StandardUpdater updater(std::make_shared<SerialIterator>(std::make_shared<NoFields>(), 3), optimizer);
  const Observation observation = updater.update();
  REQUIRE(observation.empty());  // no loss and no observation of its own
  REQUIRE(backward_runs == 1);   // backward() on the delegate ran this rank's part
  REQUIRE(model->param("W").data().to_vector<float>()[0] < 0);  // the update followed its gradient
  Evaluator evaluator(std::make_shared<SerialIterator>(std::make_shared<NoFields>(), 3, false, false), model);
  REQUIRE(evaluator.evaluate().empty());
  REQUIRE(backward_runs == 1);  // no backward under evaluation
}

TEST_CASE("a trainer with lazily shaped layers resumes without a forward pass", "[trainer]") {
  auto [train, test] = toy_data();
  Setup whole = make_trainer(Trigger::epochs(4), fresh_dir("lazy_whole"), train, test, Form::direct, -1);
  whole.trainer->run();
  const std::string out = fresh_dir("lazy_interrupted");
  {
    Setup first = make_trainer(Trigger::epochs(2), out, train, test, Form::direct, -1);
    first.trainer->run();
  }
  Setup second = make_trainer(Trigger::epochs(4), out, train, test, Form::direct, -1);
  REQUIRE(second.model->namedparams().size() == 1);  // W waits for its shape
  second.trainer->load_snapshot(latest_snapshot(out));
  REQUIRE(second.model->namedparams().size() == 2);
  second.trainer->run();
  REQUIRE(flat_params(*second.model) == flat_params(*whole.model));
  REQUIRE(second.optimizer->t() == whole.optimizer->t());
}

TEST_CASE("with gradient accumulation, an epoch that ends in a step's first batch still fires epoch triggers",
          "[trainer]") {
  // 120 examples in batches of 16, 2 a step: epoch 2 ends with batch 15 exactly, the first batch of
  // step 8, after which the iterator's own flag is down again.
  auto [train, test] = toy_data();
  manual_seed(5);
  auto model = std::make_shared<Classifier>(std::make_shared<Linear>(5, 3));
  auto optimizer = std::make_shared<Adam>(0.05);
  optimizer->setup(model);
  auto updater = std::make_shared<StandardUpdater>(std::make_shared<SerialIterator>(train, 16, true, true, 3),
                                                   optimizer, classifier_loss(model));
  updater->set_accumulation(2);
  Trainer trainer(updater, Trigger::epochs(2), fresh_dir("accumulated-epochs"), model);
  auto log = std::make_shared<LogReport>();
  trainer.extend(log);
  trainer.run();
  REQUIRE(log->log().size() == 2);
  CHECK(log->log()[0].at("iteration") == 4);  // batch 8 of 16 examples crosses 120
  CHECK(log->log()[1].at("iteration") == 8);
  CHECK(log->log()[1].at("epoch") == 2);
}

TEST_CASE("StandardUpdater with a loss scaler: the same steps as without, the scale and skips reported",
          "[trainer][loss_scaler]") {
  auto [train, test] = toy_data();
  // A power-of-two scale changes no bit of an f32 step (scaled and unscaled exactly).
  std::vector<std::vector<float>> params;
  for (bool scaled : {false, true}) {
    manual_seed(5);
    auto model = std::make_shared<Classifier>(std::make_shared<Linear>(5, 3));
    auto adam = std::make_shared<Adam>(0.05);
    adam->setup(model);
    if (scaled) adam->set_loss_scaler(std::make_shared<LossScaler>());
    StandardUpdater updater(std::make_shared<SerialIterator>(train, 16, true, true, 3), adam,
                            classifier_loss(model));
    Observation last;
    for (int i = 0; i < 4; ++i) last = updater.update();
    REQUIRE(last.count("main/loss_scale") == (scaled ? 1u : 0u));
    if (scaled) {
      REQUIRE(last.at("main/loss_scale") == 65536);
      REQUIRE(last.at("main/skipped_steps") == 0);
    }
    params.push_back(flat_params(*model));
  }
  REQUIRE(params[0] == params[1]);
}
