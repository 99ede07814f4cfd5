// allreduce_persistent and the AllreducePersistent extension on 2 and 3 ranks: every rank's
// floating buffers become the mean that one process computes from all ranks' values; integer
// buffers and parameters stay as they were; ranks whose models differ fail together.
//
// Checks use CHECK where a failure must not skip a rank's part of a later collective.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "comm/multi_node_training/allreduce_persistent.h"
#include "core/error.h"
#include "core/ops.h"
#include "data/data.h"
#include "layers/links/batch_normalization.h"
#include "layers/links/classifier.h"
#include "layers/links/linear.h"
#include "layers/optimizers/sgd.h"
#include "tests/core/test_util.h"
#include "training/trainer.h"

using namespace tandem;
using Catch::Matchers::Contains;
using test_util::values;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// This rank's own directory for a trainer's files (it writes none here, but creates it).
std::string out_dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/allreduce_persistent_test/" + name + "/rank" +
         std::to_string(world()->rank());
}

std::shared_ptr<Linear> linear(std::int64_t in, std::int64_t out) {
  LinearOptions options;
  options.dtype = DType::f64;
  return std::make_shared<Linear>(in, out, options);
}

// Linear, an f64 BatchNormalization, and a ChainList holding an f32 and an f64 one: floating
// buffers of two dtypes at two depths, and an integer N in each BatchNormalization.
std::shared_ptr<Chain> make_model() {
  auto model = std::make_shared<Chain>();
  model->add_link("l1", linear(3, 4));
  model->add_link("bn1", std::make_shared<BatchNormalization>(4, 0.9, 2e-5, DType::f64));
  auto blocks = model->add_link("blocks", std::make_shared<ChainList>());
  blocks->append(std::make_shared<BatchNormalization>(2, 0.9, 2e-5, DType::f32));
  blocks->append(std::make_shared<BatchNormalization>(3, 0.9, 2e-5, DType::f64));
  return model;
}

// Rank q's value of the k-th buffer: distinct per rank and buffer, in the buffer's dtype.
Tensor rank_value(int q, std::size_t k, const Tensor& like) {
  return test_util::uniform(like.shape(), 1000 * (q + 1) + k, -3, 5, like.dtype());
}

// The mean over `size` ranks of rank_value, as one process computes it (in f64, rank order).
std::vector<double> one_process_mean(int size, std::size_t k, const Tensor& like) {
  std::vector<double> sum(like.numel(), 0.0);
  for (int q = 0; q < size; ++q) {
    const std::vector<double> v = values(rank_value(q, k, like));
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += v[i];
  }
  for (double& s : sum) s /= size;
  return sum;
}

std::map<std::string, std::vector<double>> snapshot(const std::vector<std::pair<std::string, Tensor*>>& buffers) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [name, tensor] : buffers) out[name] = values(*tensor);
  return out;
}

}  // namespace

TEST_CASE("allreduce_persistent: floating buffers become the mean over ranks, integers and parameters stay") {
  auto comm = world();
  const int rank = comm->rank(), size = comm->size();
  manual_seed(3 + rank);  // parameters that differ per rank, to see that they are not averaged
  auto model = make_model();
  auto buffers = model->namedpersistents();
  std::size_t k = 0;
  for (auto& [name, tensor] : buffers) {
    if (is_floating(tensor->dtype())) {
      tensor->copy_(rank_value(rank, k++, *tensor));
    } else {
      tensor->copy_(full({}, 5 + 10 * rank, tensor->dtype()));  // N: a count this rank's own
    }
  }
  std::map<std::string, std::vector<double>> params_before;
  for (const auto& [name, p] : model->namedparams()) params_before[name] = values(p.data());

  allreduce_persistent(*comm, *model);

  k = 0;
  for (const auto& [name, tensor] : model->namedpersistents()) {
    INFO(name << " " << tensor->description());
    if (!is_floating(tensor->dtype())) {
      CHECK(values(*tensor) == std::vector<double>{5.0 + 10 * rank});
      continue;
    }
    const std::vector<double> want = one_process_mean(size, k++, *tensor);
    // f64: equal but for the order of the additions; f32: the mean summed in f32.
    const double tolerance = tensor->dtype() == DType::f64 ? 1e-12 : 1e-6;
    const std::vector<double> got = values(*tensor);
    CHECK(test_util::first_mismatch(got, want, tolerance, tolerance) == -1);
  }
  CHECK(k == 6);  // avg_mean and avg_var of three BatchNormalizations
  for (const auto& [name, p] : model->namedparams()) CHECK(values(p.data()) == params_before[name]);

  // Every rank holds the same buffers now: all-gathered, each equals rank 0's, bit for bit.
  for (const auto& [name, tensor] : model->namedpersistents()) {
    if (!is_floating(tensor->dtype())) continue;
    const std::vector<Tensor> all = comm->allgather(*tensor);
    for (int q = 1; q < size; ++q) CHECK(values(all[q]) == values(all[0]));
  }
}

TEST_CASE("AllreducePersistent averages a trained BatchNormalization's statistics at the end of each epoch") {
  auto comm = world();
  const int rank = comm->rank(), size = comm->size();
  // Each rank trains its own classifier on its own 8 examples (batches of 4: 2 iterations per
  // epoch), so the running statistics differ per rank before the extension runs.
  Generator gen(20 + rank);
  const Tensor x = randn({8, 3}, gen, 0, 1, DType::f64);
  const Tensor t = argmax(matmul(x, randn({3, 2}, gen, 0, 1, DType::f64)), 1).to(DType::i32);
  auto data = std::make_shared<TupleDataset>(std::vector<Tensor>{x, t});
  manual_seed(30);
  auto predictor = std::make_shared<ChainList>();
  predictor->append(linear(3, 4));
  predictor->append(std::make_shared<BatchNormalization>(4, 0.9, 2e-5, DType::f64));
  predictor->append(linear(4, 2));
  auto model = std::make_shared<Classifier>(predictor);
  auto optimizer = std::make_shared<SGD>(0.1);
  optimizer->setup(model);
  auto iterator = std::make_shared<SerialIterator>(data, 4, true, false);
  auto updater = std::make_shared<StandardUpdater>(iterator, optimizer, classifier_loss(model));
  Trainer trainer(updater, Trigger::epochs(2), out_dir("trainer"), model);

  auto extension = std::make_shared<AllreducePersistent>(model, comm);
  CHECK(extension->default_trigger().unit == Trigger::Unit::epoch);
  CHECK(extension->default_trigger().period == 1);
  CHECK(extension->priority() > 300);  // before the evaluators
  trainer.extend(extension);

  // Probes on either side of it (priorities 302 and 300) record the buffers as it finds and leaves them.
  struct Probe : Extension {
    Probe(std::shared_ptr<Link> model, int priority) : model(std::move(model)), order(priority) {}
    std::string name() const override { return "Probe" + std::to_string(order); }
    int priority() const override { return order; }
    void operator()(Trainer& trainer) override {
      iterations.push_back(trainer.iteration());
      seen.push_back(snapshot(model->namedpersistents()));
    }
    std::shared_ptr<Link> model;
    int order;
    std::vector<std::int64_t> iterations;
    std::vector<std::map<std::string, std::vector<double>>> seen;
  };
  auto before = std::make_shared<Probe>(model, 302), after = std::make_shared<Probe>(model, 300);
  trainer.extend(before, Trigger::epochs(1));
  trainer.extend(after, Trigger::epochs(1));
  trainer.run();

  REQUIRE(before->iterations == std::vector<std::int64_t>{2, 4});
  REQUIRE(after->iterations == before->iterations);
  for (std::size_t epoch = 0; epoch < 2; ++epoch) {
    INFO("epoch " << epoch + 1);
    // The statistics did differ per rank before the extension ran.
    const Tensor mine = from_vector(before->seen[epoch]["predictor/1/avg_mean"]);
    const std::vector<Tensor> all_means = comm->allgather(mine);
    CHECK(values(all_means[size - 1]) != values(all_means[0]));
    for (const auto& [name, local] : before->seen[epoch]) {
      INFO(name);
      if (name == "predictor/1/N") {  // an integer: untouched, and equal anyway (2 batches per epoch)
        CHECK(after->seen[epoch][name] == local);
        CHECK(local == std::vector<double>{2.0 * (epoch + 1)});
        continue;
      }
      // One process's mean of every rank's buffer as the extension found it.
      const std::vector<Tensor> all = comm->allgather(from_vector(local));
      std::vector<double> want(local.size(), 0.0);
      for (const Tensor& q : all)
        for (std::size_t i = 0; i < want.size(); ++i) want[i] += values(q)[i];
      for (double& w : want) w /= size;
      CHECK(test_util::first_mismatch(after->seen[epoch][name], want, 1e-12, 1e-12) == -1);
    }
  }
}

TEST_CASE("allreduce_persistent: ranks whose models differ fail together, before any buffer changes") {
  auto comm = world();
  const int rank = comm->rank(), last = comm->size() - 1;
  const auto bn = [](std::int64_t size) { return std::make_shared<BatchNormalization>(size, 0.9, 2e-5, DType::f64); };
  auto model = std::make_shared<Chain>();
  SECTION("a buffer of another shape on the last rank") { model->add_link("bn", bn(rank == last ? 5 : 4)); }
  SECTION("a buffer of another name on the last rank") { model->add_link(rank == last ? "norm" : "bn", bn(4)); }
  SECTION("no floating buffer at all on rank 0") {
    if (rank == 0) {
      model->add_link("l1", linear(4, 4));
    } else {
      model->add_link("bn", bn(4));
    }
  }
  SECTION("an f32 buffer besides the f64 ones on the last rank only") {
    model->add_link("bn", bn(4));
    if (rank == last) model->add_link("extra", std::make_shared<BatchNormalization>(2));
  }
  for (auto& [name, tensor] : model->namedpersistents())
    if (is_floating(tensor->dtype())) tensor->copy_(full(tensor->shape(), 1 + rank, tensor->dtype()));
  const auto before = snapshot(model->namedpersistents());
  const std::string error = error_of([&] { allreduce_persistent(*comm, *model); });
  CHECK_THAT(error, Contains("allreduce_persistent on rank " + std::to_string(rank)) &&
                        Contains("the ranks' models differ in their floating-point persistent buffers"));
  CHECK(snapshot(model->namedpersistents()) == before);
  comm->barrier();  // and the communicator still works
}

TEST_CASE("allreduce_persistent: a model without floating buffers on every rank is a no-op") {
  auto comm = world();
  Chain model;
  model.add_link("l1", linear(2, 2));
  allreduce_persistent(*comm, model);
  comm->barrier();
}
