// create_mnbn_model on 2 and 3 ranks: a model with BatchNormalization layers, converted, trains
// data-parallel on per-rank batches exactly as the unconverted model trains in one process on
// the concatenated batch (f64, 1e-10); the conversion keeps sizes, hyperparameters, values and
// names (snapshots load either way), and reaches a layer however its chain calls it.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "comm/multi_node_links/create_mnbn_model.h"
#include "comm/multi_node_links/multi_node_batch_normalization.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "core/error.h"
#include "layers/links/batch_normalization.h"
#include "layers/links/linear.h"
#include "layers/optimizers/sgd.h"
#include "layers/serializers/serializers.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;
using test_util::values;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

std::shared_ptr<BatchNormalization> bn(std::int64_t size) {
  return std::make_shared<BatchNormalization>(size, 0.8, 1e-3, DType::f64);
}

// Calls its first BatchNormalization through a member pointer (no converter can reach it) and
// its last through a ChainList (the converter replaces the child): both must end up multi-node.
class Net : public Chain {
 public:
  Net() {
    LinearOptions options;
    options.dtype = DType::f64;
    l1 = add_link("l1", std::make_shared<Linear>(4, 5, options));
    norm = add_link("norm", bn(5));
    l2 = add_link("l2", std::make_shared<Linear>(5, 3, options));
    tail = add_link("tail", std::make_shared<ChainList>());
    tail->append(bn(3));
  }
  Variable forward(const Variable& x) override { return (*tail)((*l2)(F::relu((*norm)(F::tanh((*l1)(x)))))); }

  std::shared_ptr<Linear> l1, l2;
  std::shared_ptr<BatchNormalization> norm;
  std::shared_ptr<ChainList> tail;
};

// The same initial model on every rank and in the reference, with gamma, beta and the running
// statistics away from their defaults, so that the conversion must carry them over.
std::shared_ptr<Net> make_net() {
  manual_seed(11);
  auto net = std::make_shared<Net>();
  std::uint64_t seed = 20;
  for (auto& [name, p] : net->namedparams())
    if (name.find("norm") != std::string::npos || name.find("tail") != std::string::npos)
      p.set_data(test_util::uniform(p.shape(), seed++, 0.5, 1.5, DType::f64));
  for (auto& [name, tensor] : net->namedpersistents()) {
    if (is_floating(tensor->dtype())) {
      tensor->copy_(test_util::uniform(tensor->shape(), seed++, 0.5, 1.5, DType::f64));
    } else {
      tensor->copy_(full({}, 7, tensor->dtype()));
    }
  }
  return net;
}

std::map<std::string, std::vector<double>> state_values(Link& link) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [name, tensor] : link_state(link)) out[name] = values(tensor);
  return out;
}

Tensor labels(std::int64_t count, std::uint64_t seed) {
  std::vector<std::int32_t> t(count);
  for (std::int64_t i = 0; i < count; ++i) t[i] = static_cast<std::int32_t>((i * 5 + seed) % 3);
  return from_vector(t, {count});
}

void require_close(const std::vector<double>& got, const std::vector<double>& want, double tolerance) {
  REQUIRE(got.size() == want.size());
  const std::int64_t bad = test_util::first_mismatch(got, want, tolerance, tolerance);
  INFO(test_util::mismatch_message(got, want, bad));
  REQUIRE(bad == -1);
}

std::string file_for(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/create_mnbn_" + name + "_rank" + std::to_string(world()->rank()) +
         ".npz";
}

}  // namespace

TEST_CASE("create_mnbn_model replaces every BatchNormalization, keeping its settings, values and names") {
  auto comm = world();
  auto reference = make_net();
  auto original = make_net();
  const std::shared_ptr<BatchNormalization> member = original->norm;
  auto model = create_mnbn_model(original, comm);
  REQUIRE(model == original);  // converted in place
  // In the tree, at the same paths: the multi-node layer with the same size, decay, eps, dtype.
  for (const LinkPtr& link : {model->child("norm"), (*model->tail)[0]}) {
    auto mnbn = std::dynamic_pointer_cast<MultiNodeBatchNormalization>(link);
    REQUIRE(mnbn != nullptr);
    CHECK(mnbn->decay() == 0.8);
    CHECK(mnbn->eps() == 1e-3);
    CHECK(mnbn->persistent("avg_mean").dtype() == DType::f64);
  }
  CHECK(model->child("norm")->persistent("avg_mean").shape() == Shape{5});
  CHECK((*model->tail)[0]->persistent("avg_var").shape() == Shape{3});
  // The chain's own pointer still names the old layer, which now runs the new one.
  CHECK(model->norm == member);
  CHECK(member->replacement() == model->child("norm"));
  // The same Variables and buffers, not copies: the two can never drift apart.
  CHECK(member->gamma().same_as(model->child("norm")->param("gamma")));
  CHECK(member->persistent("avg_var").shares_storage_with(model->child("norm")->persistent("avg_var")));
  // Names and values as before the conversion.
  CHECK(state_values(*model) == state_values(*reference));

  SECTION("snapshots load either way") {
    const std::string converted_file = file_for("converted"), plain_file = file_for("plain");
    save_npz(converted_file, *model);
    auto plain = std::make_shared<Net>();
    load_npz(converted_file, *plain);
    CHECK(state_values(*plain) == state_values(*reference));
    save_npz(plain_file, *reference);
    auto converted = create_mnbn_model(std::make_shared<Net>(), comm);
    load_npz(plain_file, *converted);
    CHECK(state_values(*converted) == state_values(*reference));
  }
  SECTION("converting again changes nothing") {
    const LinkPtr before = model->child("norm");
    create_mnbn_model(model, comm);
    CHECK(model->child("norm") == before);
  }
}

TEST_CASE("create_mnbn_model: trained data-parallel, the model equals one process on the concatenated batch") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  auto model = create_mnbn_model(make_net(), comm);
  auto reference = make_net();
  auto optimizer = create_multi_node_optimizer(std::make_shared<SGD>(0.2), comm);
  optimizer->setup(model);
  SGD reference_optimizer(0.2);
  reference_optimizer.setup(reference);
  constexpr std::int64_t kLocal = 3;
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    std::vector<Tensor> xs, ts;
    for (int q = 0; q < n; ++q) {
      xs.push_back(test_util::uniform({kLocal, 4}, 100 + 10 * step + q, -2, 2, DType::f64));
      ts.push_back(labels(kLocal, step + q));
    }
    Variable loss, reference_loss;
    optimizer->update([&] { return loss = F::softmax_cross_entropy((*model)(Variable(xs[r])), Variable(ts[r])); });
    reference_optimizer.update([&] {
      return reference_loss = F::softmax_cross_entropy((*reference)(Variable(concat(xs, 0))), Variable(concat(ts, 0)));
    });
    // Equal per-rank batches: the mean of the ranks' mean losses is the whole batch's.
    require_close(values(comm->allreduce(loss.data(), AllreduceOp::mean)), values(reference_loss.data()), 1e-10);
  }
  // Parameters, running statistics (of the global batch) and the batch counts.
  const auto got = state_values(*model), want = state_values(*reference);
  REQUIRE(got.size() == want.size());
  for (const auto& [name, v] : want) {
    INFO(name);
    REQUIRE(got.count(name) == 1);
    require_close(got.at(name), v, 1e-10);
  }
  CHECK(got.at("norm/N") == std::vector<double>{9});
  // In test mode the converted model is the reference's, on each rank's own examples.
  TrainModeGuard test_mode(false);
  const Tensor x = test_util::uniform({2, 4}, 300 + r, -2, 2, DType::f64);
  require_close(values((*model)(Variable(x)).data()), values((*reference)(Variable(x)).data()), 1e-10);
}

TEST_CASE("create_mnbn_model: a BatchNormalization gives its replacement; a shared layer gets one") {
  auto comm = world();
  auto layer = bn(4);
  layer->persistent("avg_mean").copy_(test_util::uniform({4}, 5, -1, 1, DType::f64));
  std::shared_ptr<BatchNormalization> converted = create_mnbn_model(layer, comm);
  REQUIRE(std::dynamic_pointer_cast<MultiNodeBatchNormalization>(converted) != nullptr);
  CHECK(converted != layer);
  CHECK(layer->replacement() == converted);
  CHECK(values(converted->persistent("avg_mean")) == values(layer->persistent("avg_mean")));

  auto chain = std::make_shared<Chain>();
  auto shared = bn(2);
  chain->add_link("a", shared);
  chain->add_link("b", shared);
  create_mnbn_model(chain, comm);
  CHECK(chain->child("a") == chain->child("b"));
  CHECK(std::dynamic_pointer_cast<MultiNodeBatchNormalization>(chain->child("a")) != nullptr);
}

TEST_CASE("create_mnbn_model: a BatchNormalization subclass with state of its own is an error naming it") {
  struct CountingBN : BatchNormalization {
    CountingBN() : BatchNormalization(2) { add_persistent("calls", zeros({}, DType::i64)); }
    std::string type_name() const override { return "CountingBN"; }
  };
  auto chain = std::make_shared<Chain>();
  auto blocks = chain->add_link("blocks", std::make_shared<ChainList>());
  blocks->append(std::make_shared<CountingBN>());
  REQUIRE_THROWS_WITH(create_mnbn_model(chain, world()),
                      Contains("create_mnbn_model: the CountingBN at 'blocks/0' has the persistent buffers "
                               "(avg_mean, avg_var, N, calls) but MultiNodeBatchNormalization has (avg_mean, "
                               "avg_var, N): it cannot take its place"));
}
