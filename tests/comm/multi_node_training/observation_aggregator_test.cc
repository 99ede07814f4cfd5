// ObservationAggregator on 2 and 3 ranks: each rank reports its own value of "main/value" every
// iteration (a known function of rank and iteration), and the aggregate written at each
// comm_trigger must equal what one process computes from all ranks' values, exactly (the same
// additions in the same order). Also: LogReport sees the aggregated values, a custom aggregator,
// a rank that misses the key (an error on every rank), no rank reporting it, and resuming.
//
// Checks use CHECK where a failure must not skip a rank's part of a later collective.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "comm/multi_node_training/observation_aggregator.h"
#include "core/error.h"
#include "core/ops.h"
#include "data/data.h"
#include "layers/links/linear.h"
#include "layers/optimizers/sgd.h"
#include "training/extensions/reporting.h"
#include "training/trainer.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

template <typename Fn>
std::string error_of(Fn&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Rank q's value at iteration i (from 1): nothing that sums exactly, so the order of the
// additions shows. Only correctly rounded steps on exact operands (no a * b + c that the compiler
// could fuse here and not there), so that every call site gets the same bits.
double value(int q, std::int64_t i) { return (q % 2 ? -1 : 1) * std::sqrt(2.0 + i + 3.0 * q) / (1.5 + q); }

// Whether rank q reports "main/value" at iteration i.
using Presence = std::function<bool(int q, std::int64_t i)>;

// Records the observation of every iteration, as the last extensions (priority 100) see it.
struct Recorder : Extension {
  std::string name() const override { return "Recorder"; }
  Trigger default_trigger() const override { return Trigger::iterations(1); }
  void operator()(Trainer& trainer) override { seen.push_back(trainer.observation()); }
  std::vector<Observation> seen;  // seen[i - 1]: iteration i
};

struct Run {
  std::unique_ptr<Trainer> trainer;
  std::shared_ptr<Recorder> recorder = std::make_shared<Recorder>();
  std::shared_ptr<std::int64_t> iteration = std::make_shared<std::int64_t>(0);  // of the loss function
};

// A trainer whose loss function reports value(rank, i) as "main/value" (where present says so),
// stopping after `iterations`; its files go to this rank's own directory.
Run make_run(const std::string& name, std::int64_t iterations, Presence present = nullptr) {
  const int rank = world()->rank();
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string out = std::string(tmp ? tmp : "/tmp") + "/observation_aggregator_test/" + name + "/rank" +
                          std::to_string(rank);
  auto data = std::make_shared<TupleDataset>(std::vector<Tensor>{zeros({4, 1}, DType::f64)});
  LinearOptions options;
  options.dtype = DType::f64;
  auto model = std::make_shared<Linear>(1, 1, options);
  auto optimizer = std::make_shared<SGD>(0.1);
  optimizer->setup(model);
  Run run;
  LossFunction loss = [model, rank, present, iteration = run.iteration](const Example& batch) {
    const std::int64_t i = ++*iteration;
    LossResult result;
    result.loss = F::sum((*model)(Variable(batch[0])));
    if (!present || present(rank, i)) result.observation["value"] = value(rank, i);
    return result;
  };
  auto iterator = std::make_shared<SerialIterator>(data, 1, true, false);
  auto updater = std::make_shared<StandardUpdater>(iterator, optimizer, loss);
  run.trainer = std::make_unique<Trainer>(updater, Trigger::iterations(iterations), out, model);
  run.trainer->extend(run.recorder);
  return run;
}

// What one process computes from every rank's values of iterations [first, last]: ChainerMN's
// mean of all of them, summed rank by rank, each rank's in iteration order.
double one_process_mean(int size, std::int64_t first, std::int64_t last) {
  double sum = 0;
  for (int q = 0; q < size; ++q)
    for (std::int64_t i = first; i <= last; ++i) sum += value(q, i);
  return sum / static_cast<double>(size * (last - first + 1));
}

std::optional<double> lookup(const Observation& observation, const std::string& key) {
  const auto it = observation.find(key);
  return it == observation.end() ? std::nullopt : std::optional<double>(it->second);
}

}  // namespace

TEST_CASE("ObservationAggregator writes the mean of every rank's values at each comm_trigger") {
  auto comm = world();
  const int rank = comm->rank(), size = comm->size();
  Run run = make_run("mean", 6);
  ObservationAggregatorOptions options;
  options.comm_trigger = Trigger::iterations(3);
  run.trainer->extend(std::make_shared<ObservationAggregator>(comm, "main/value", "main/value_mean", options));
  run.trainer->run();
  REQUIRE(run.recorder->seen.size() == 6);
  for (std::int64_t i = 1; i <= 6; ++i) {
    INFO("iteration " << i);
    const Observation& seen = run.recorder->seen[i - 1];
    CHECK(lookup(seen, "main/value") == value(rank, i));  // this rank's own, untouched
    if (i % 3 != 0) {
      CHECK(!lookup(seen, "main/value_mean"));
    } else {
      CHECK(lookup(seen, "main/value_mean") == one_process_mean(size, i - 2, i));
    }
  }
}

TEST_CASE("ObservationAggregator: by default the value is replaced, and LogReport averages the aggregates") {
  auto comm = world();
  const int size = comm->size();
  Run run = make_run("replace", 4);
  auto aggregator = std::make_shared<ObservationAggregator>(comm, "main/value");
  CHECK(aggregator->priority() > 200);  // its observe() runs before LogReport's
  run.trainer->extend(aggregator);
  auto log = std::make_shared<LogReport>(Trigger::iterations(2));
  run.trainer->extend(log);
  run.trainer->run();
  for (std::int64_t i = 1; i <= 4; ++i)
    CHECK(lookup(run.recorder->seen[i - 1], "main/value") == one_process_mean(size, i, i));
  // LogReport's mean over its interval of the aggregated values, as one process computes it.
  REQUIRE(log->log().size() == 2);
  for (std::int64_t entry = 0; entry < 2; ++entry) {
    INFO("log entry " << entry);
    double sum = 0;
    for (std::int64_t i = 2 * entry + 1; i <= 2 * entry + 2; ++i) sum += one_process_mean(size, i, i);
    CHECK(lookup(log->log()[entry], "main/value") == sum / 2);
  }
}

TEST_CASE("ObservationAggregator: a custom aggregator gets every rank's values, in rank order") {
  auto comm = world();
  const int size = comm->size();
  Run run = make_run("custom", 4);
  std::vector<ObservationHistories> calls;
  ObservationAggregatorOptions options;
  options.comm_trigger = Trigger::iterations(2);
  options.aggregator = [&calls](const ObservationHistories& histories) {
    calls.push_back(histories);
    double most = -INFINITY;
    for (const auto& values : histories)
      for (double v : values) most = std::max(most, v);
    return most;
  };
  run.trainer->extend(std::make_shared<ObservationAggregator>(comm, "main/value", "main/value_max", options));
  run.trainer->run();
  REQUIRE(calls.size() == 2);
  for (std::int64_t call = 0; call < 2; ++call) {
    INFO("aggregation " << call);
    ObservationHistories want(size);
    double most = -INFINITY;
    for (int q = 0; q < size; ++q) {
      for (std::int64_t i = 2 * call + 1; i <= 2 * call + 2; ++i) {
        want[q].push_back(value(q, i));
        most = std::max(most, value(q, i));
      }
    }
    CHECK(calls[call] == want);
    CHECK(lookup(run.recorder->seen[2 * call + 1], "main/value_max") == most);
  }
}

TEST_CASE("ObservationAggregator: a rank that misses the key is an error on every rank, naming it") {
  auto comm = world();
  const int rank = comm->rank(), last = comm->size() - 1;
  ObservationAggregatorOptions options;
  options.comm_trigger = Trigger::iterations(3);
  SECTION("the last rank skips iteration 2") {
    Run run = make_run("skip", 3, [last](int q, std::int64_t i) { return !(q == last && i == 2); });
    run.trainer->extend(std::make_shared<ObservationAggregator>(comm, "main/value", "main/mean", options));
    const std::string error = error_of([&] { run.trainer->run(); });
    const std::string others = last == 1 ? "rank 0" : "ranks 0 and 1";
    CHECK(error == "ObservationAggregator at iteration 3: the ranks reported 'main/value' a different number of "
                   "times since the last aggregation (rank " + std::to_string(last) + ": 2 times; " + others +
                   ": 3 times); every rank must report it at the same iterations");
  }
  SECTION("rank 0 never reports it") {
    Run run = make_run("never", 3, [](int q, std::int64_t) { return q != 0; });
    run.trainer->extend(std::make_shared<ObservationAggregator>(comm, "main/value", "main/mean", options));
    const std::string error = error_of([&] { run.trainer->run(); });
    const std::string others = last == 1 ? "rank 1" : "ranks 1 and 2";
    CHECK_THAT(error, Contains("(rank 0: 0 times; " + others + ": 3 times)"));
  }
  (void)rank;
  comm->barrier();  // every rank got here: nobody waits in a collective
}

TEST_CASE("ObservationAggregator: when no rank reports the key, nothing is written") {
  auto comm = world();
  Run run = make_run("none", 2, [](int, std::int64_t) { return false; });
  run.trainer->extend(std::make_shared<ObservationAggregator>(comm, "main/value", "main/mean"));
  run.trainer->run();
  for (const Observation& seen : run.recorder->seen) CHECK(!lookup(seen, "main/mean"));
}

TEST_CASE("ObservationAggregator: the values kept between exchanges survive a snapshot and resume") {
  auto comm = world();
  const int size = comm->size();
  ObservationAggregatorOptions options;
  options.comm_trigger = Trigger::iterations(4);
  Run first = make_run("resume", 2);
  first.trainer->extend(std::make_shared<ObservationAggregator>(comm, "main/value", "main/mean", options));
  first.trainer->run();
  const std::string path = first.trainer->out() + "/snapshot_iter_2.npz";
  first.trainer->save_snapshot(path);

  Run resumed = make_run("resume", 4);
  resumed.trainer->extend(std::make_shared<ObservationAggregator>(comm, "main/value", "main/mean", options));
  resumed.trainer->load_snapshot(path);
  *resumed.iteration = 2;
  resumed.trainer->run();
  REQUIRE(resumed.recorder->seen.size() == 2);  // iterations 3 and 4
  CHECK(!lookup(resumed.recorder->seen[0], "main/mean"));
  CHECK(lookup(resumed.recorder->seen[1], "main/mean") == one_process_mean(size, 1, 4));
}
