// Link, Chain, ChainList, Linear, Classifier and Identity.
#include <catch2/catch.hpp>

#include "autograd/functions.h"
#include "core/ops.h"
#include "cuda/cuda.h"
#include "layers/links/batch_normalization.h"
#include "layers/links/classifier.h"
#include "layers/links/identity.h"
#include "layers/links/linear.h"

using namespace tandem;

namespace {

class MLP : public Chain {
 public:
  MLP() {
    l1 = add_link("l1", std::make_shared<Linear>(-1, 5));
    l2 = add_link("l2", std::make_shared<Linear>(5, 3));
  }
  Variable forward(const Variable& x) override { return (*l2)(F::relu((*l1)(x))); }
  std::shared_ptr<Linear> l1, l2;
};

}  // namespace

TEST_CASE("parameter names are paths through the chain", "[link]") {
  auto model = std::make_shared<Classifier>(std::make_shared<MLP>());
  // l1's W is lazy: not listed until the first forward fixes its shape.
  std::vector<std::string> names;
  for (auto& [name, p] : model->namedparams(true)) names.push_back(name);
  REQUIRE(names == std::vector<std::string>{"predictor/l1/W", "predictor/l1/b", "predictor/l2/W", "predictor/l2/b"});
  REQUIRE(model->namedparams().size() == 3);
  REQUIRE(model->count_params() == 5 + 15 + 3);

  Generator gen(0);
  Variable x(randn({4, 2, 3}, gen));
  Variable t(from_vector<std::int32_t>({0, 1, 2, 0}));
  Variable loss = model->forward(x, t);
  REQUIRE(model->namedparams().size() == 4);
  REQUIRE(model->count_params() == 6 * 5 + 5 + 15 + 3);
  auto l1 = model->get<MLP>("predictor")->l1;
  REQUIRE(l1->W().shape() == Shape{5, 6});
  REQUIRE(l1->in_size() == 6);

  loss.backward();
  for (auto& p : model->params()) REQUIRE(p.grad().defined());
  model->cleargrads();
  for (auto& p : model->params()) REQUIRE_FALSE(p.grad().defined());
  auto obs = model->observation();
  REQUIRE(obs.count("loss"));
  REQUIRE(obs.at("accuracy") >= 0.0);
  REQUIRE(obs.at("accuracy") <= 1.0);
}

TEST_CASE("a Classifier is a Link that takes (x, t) and reports its loss and accuracy", "[link]") {
  manual_seed(1);
  auto classifier = std::make_shared<Classifier>(std::make_shared<MLP>());
  Generator gen(2);
  const Variable x(randn({4, 6}, gen));
  const Variable t(from_vector<std::int32_t>({0, 1, 2, 0}));
  const double direct = classifier->forward(x, t).data().item();
  // Through the Link interface, as the updater and the evaluator call it.
  std::shared_ptr<Link> model = classifier;
  const Variables outputs = model->forward_many({x, t});
  REQUIRE(outputs.size() == 1);
  REQUIRE(outputs[0].data().item() == direct);
  REQUIRE((*model)(x, t).data().item() == direct);
  const auto observation = model->observation();
  REQUIRE(observation.at("loss") == direct);
  REQUIRE(observation.count("accuracy"));
  REQUIRE_THROWS_WITH(model->forward_many({x}), Catch::Contains("Classifier") && Catch::Contains("(x, t)"));
  REQUIRE_THROWS_WITH(model->forward(x), Catch::Contains("Classifier"));
  // Other links report nothing, and take no input only when they say so.
  REQUIRE(classifier->predictor()->observation().empty());
  REQUIRE_THROWS_WITH(classifier->predictor()->forward(), Catch::Contains("was given 0"));
}

TEST_CASE("Identity returns its inputs", "[link]") {
  Identity identity;
  const Variable x(ones({2, 3}), true);
  const Variable t(zeros({4}));
  REQUIRE(identity(x).same_as(x));
  const Variables both = identity.forward_many({x, t});
  REQUIRE(both.size() == 2);
  REQUIRE(both[0].same_as(x));
  REQUIRE(both[1].same_as(t));
  REQUIRE(identity.params().empty());
  REQUIRE(identity.type_name() == "Identity");
}

TEST_CASE("Linear computes x W^T + b and its gradients", "[link][linear]") {
  Linear linear(3, 2);
  linear.W().set_data(from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  linear.b().set_data(from_vector<float>({0.5f, -1}, {2}));
  Variable x(from_vector<float>({1, 0, -1, 2, 1, 0}, {2, 3}));
  Variable y = linear(x);
  REQUIRE(y.data().to_vector<float>() == std::vector<float>{-1.5f, -3, 4.5f, 12});
  F::sum(y).backward();
  REQUIRE(linear.W().grad().to_vector<float>() == std::vector<float>{3, 1, -1, 3, 1, -1});
  REQUIRE(linear.b().grad().to_vector<float>() == std::vector<float>{2, 2});

  Linear nobias(3, 2, LinearOptions{true});
  REQUIRE(nobias.namedparams().size() == 1);
  REQUIRE_THROWS_WITH(nobias.b(), Catch::Contains("no parameter 'b'"));
}

TEST_CASE("Linear's default initialiser is LeCun normal and zero bias", "[link][linear]") {
  manual_seed(3);
  Linear linear(400, 300);
  const std::vector<double> w = linear.W().data().to_vector<double>();
  double mean = 0, squares = 0;
  for (double v : w) { mean += v; squares += v * v; }
  mean /= w.size();
  const double stddev = std::sqrt(squares / w.size() - mean * mean);
  REQUIRE(std::abs(mean) < 0.002);
  REQUIRE(stddev == Approx(std::sqrt(1.0 / 400)).epsilon(0.02));
  REQUIRE(sum(abs(linear.b().data())).item() == 0.0);
}

TEST_CASE("Linear rejects inputs of the wrong width, naming the shapes", "[link][linear]") {
  Linear linear(3, 2);
  Variable x(zeros({4, 5}));
  REQUIRE_THROWS_WITH(linear(x), Catch::Contains("linear") && Catch::Contains("[4, 5]") && Catch::Contains("[2, 3]"));
}

TEST_CASE("copyparams copies values and checks structure", "[link]") {
  MLP a, b;
  Variable x(zeros({1, 4}));
  a(x);
  b(x);
  b.copyparams(a);
  for (std::size_t i = 0; i < a.params().size(); ++i)
    REQUIRE(a.params()[i].data().to_vector<float>() == b.params()[i].data().to_vector<float>());
  REQUIRE_FALSE(a.params()[0].data().shares_storage_with(b.params()[0].data()));
  Linear other(4, 5);
  REQUIRE_THROWS_WITH(other.copyparams(a), Catch::Contains("parameters"));
}

TEST_CASE("train mode propagates to children, including ones added later", "[link]") {
  Chain chain;
  chain.set_train(false);
  struct Holder : Chain {
    std::shared_ptr<Linear> add(const std::string& n) { return add_link(n, std::make_shared<Linear>(2, 2)); }
  };
  Holder holder;
  auto l = holder.add("l");
  holder.set_train(false);
  REQUIRE_FALSE(l->is_train());
  auto m = holder.add("m");
  REQUIRE_FALSE(m->is_train());
  holder.set_train(true);
  REQUIRE(l->is_train());
  REQUIRE(m->is_train());
}

TEST_CASE("ChainList runs its links in order and names them by index", "[link]") {
  ChainList list;
  list.append(std::make_shared<Linear>(2, 3));
  list.append(std::make_shared<Linear>(3, 1));
  std::vector<std::string> names;
  for (auto& entry : list.namedparams()) names.push_back(entry.first);
  REQUIRE(names == std::vector<std::string>{"0/W", "0/b", "1/W", "1/b"});
  REQUIRE(list(Variable(zeros({5, 2}))).shape() == Shape{5, 1});
  REQUIRE_THROWS_AS(list[2], Error);
}

TEST_CASE("Chain::get reports missing children and wrong types", "[link]") {
  MLP mlp;
  REQUIRE(mlp.get<Linear>("l1") == mlp.l1);
  REQUIRE_THROWS_WITH(mlp.get("l9"), Catch::Contains("no child 'l9'") && Catch::Contains("l1, l2"));
  REQUIRE_THROWS_WITH(mlp.get<Classifier>("l1"), Catch::Contains("Linear"));
}

TEST_CASE("replace_child puts a link in another's place, in its parent's mode", "[link]") {
  ChainList list;
  list.append(std::make_shared<Linear>(2, 3));
  list.append(std::make_shared<Linear>(3, 1));
  list.set_train(false);
  auto wider = std::make_shared<Linear>(2, 4);
  list.replace_child("0", wider);
  REQUIRE(list[0] == wider);
  REQUIRE_FALSE(wider->is_train());
  std::vector<std::string> names;
  for (auto& entry : list.namedparams()) names.push_back(entry.first + shape_str(entry.second.shape()));
  REQUIRE(names == std::vector<std::string>{"0/W[4, 2]", "0/b[4]", "1/W[1, 3]", "1/b[1]"});
  REQUIRE_THROWS_WITH(list.replace_child("2", wider), Catch::Contains("ChainList: replace_child: no child '2'") &&
                                                          Catch::Contains("0, 1"));
  REQUIRE_THROWS_WITH(list.replace_child("1", nullptr), Catch::Contains("the replacement for '1' is null"));
}

TEST_CASE("to(device) keeps parameters on the CPU and refuses a GPU this build or machine lacks", "[link]") {
  auto mlp = std::make_shared<MLP>();
  REQUIRE(&mlp->to(Device::cpu()) == mlp.get());
  REQUIRE(mlp->device() == Device::cpu());
  const Variable y = (*mlp)(Variable(ones({2, 4})));  // lazy l1 initialised on the link's device
  for (const Variable& p : mlp->params()) REQUIRE(p.data().device() == Device::cpu());
  REQUIRE(y.shape() == Shape{2, 3});
  if (cuda::device_count() == 0) {
    // The error says why; nothing moved, and the model still works on the CPU.
    REQUIRE_THROWS_WITH(mlp->to(Device::cuda(0)), Catch::Contains("cuda") && Catch::Contains("CUDA"));
    REQUIRE(mlp->device() == Device::cpu());
    for (const Variable& p : mlp->params()) REQUIRE(p.data().device() == Device::cpu());
    REQUIRE((*mlp)(Variable(ones({2, 4}))).shape() == Shape{2, 3});
  }
}

TEST_CASE("Link::to(dtype): parameters and persistent buffers converted, rounded once; lazy ones created so") {
  auto chain = std::make_shared<Chain>();
  auto linear = std::make_shared<Linear>(3, 2);
  auto bn = std::make_shared<BatchNormalization>(2);
  chain->add_link("l", linear);
  chain->add_link("bn", bn);
  const std::vector<float> w = linear->W().data().to_vector<float>();
  linear->W().set_grad(ones({2, 3}));
  chain->to(DType::bf16);
  for (const auto& [name, param] : chain->namedparams()) {
    INFO(name);
    REQUIRE(param.data().dtype() == DType::bf16);
    REQUIRE_FALSE(param.grad().defined());  // dropped with the old dtype
  }
  for (const auto& [name, value] : chain->namedpersistents()) {
    INFO(name);
    if (is_floating(value->dtype())) REQUIRE(value->dtype() == DType::bf16);
  }
  REQUIRE(linear->W().data().to_vector<double>() == from_vector(w).to(DType::bf16).to_vector<double>());
  // Backward reaches the converted leaves in their new dtype.
  Variable y = (*bn)((*linear)(Variable(ones({4, 3}, DType::bf16))));
  functions::sum(y).backward();
  REQUIRE(linear->W().grad().dtype() == DType::bf16);

  // A lazy parameter is created in the dtype at its first forward.
  auto lazy = std::make_shared<Linear>(-1, 2);
  lazy->to(DType::bf16);
  REQUIRE((*lazy)(Variable(ones({1, 5}, DType::bf16))).data().dtype() == DType::bf16);
  REQUIRE(lazy->W().data().dtype() == DType::bf16);
  REQUIRE_THROWS_WITH(linear->to(DType::i32), Catch::Contains("floating dtype"));
}
