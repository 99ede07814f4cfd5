// Links on cuda:0: Link::to moves parameters, gradients and persistents (and lazily
// initialised parameters appear on the link's device), and every link computes on the GPU
// what it computes on the CPU from the same parameters: outputs, parameter gradients and the
// persistents it updates (batch-norm running statistics).
#include <catch2/catch.hpp>

#include <functional>
#include <memory>

#include "layers/links/batch_normalization.h"
#include "layers/links/classifier.h"
#include "layers/links/convolution_2d.h"
#include "layers/links/embed_id.h"
#include "layers/links/layer_normalization.h"
#include "layers/links/linear.h"
#include "layers/links/multi_head_attention.h"
#include "layers/links/n_step_lstm.h"
#include "layers/links/positional_embedding.h"
#include "layers/links/transformer.h"
#include "tests/cuda/gpu_test_util.h"

using namespace tandem;
using namespace gpu_test;

TEST_CASE("Link::to moves parameters, gradients and persistents, and back", "[layers][to]") {
  auto chain = std::make_shared<Chain>();
  auto linear = chain->add_link("fc", std::make_shared<Linear>(3, 2));
  auto bn = chain->add_link("bn", std::make_shared<BatchNormalization>(2));
  linear->W().set_grad(uniform({2, 3}, 1));
  std::vector<std::pair<std::string, Tensor>> before;
  for (const auto& [name, p] : chain->namedparams()) before.emplace_back(name, p.data().clone());
  const Tensor grad_before = linear->W().grad().clone();
  const Variable W = linear->W();  // the same Variable follows the move

  REQUIRE(&chain->to(gpu()) == chain.get());
  REQUIRE(chain->device() == gpu());
  REQUIRE(linear->device() == gpu());
  for (const auto& [name, p] : chain->namedparams()) {
    INFO(name);
    REQUIRE(p.device() == gpu());
  }
  REQUIRE(W.device() == gpu());
  REQUIRE(linear->W().grad().device() == gpu());
  REQUIRE_FALSE(linear->b().grad().defined());  // no gradient stays no gradient
  for (const auto& [name, t] : chain->namedpersistents()) {
    INFO(name);
    REQUIRE(t->device() == gpu());
  }
  // A child added later joins its parent's device.
  auto late = chain->add_link("late", std::make_shared<Linear>(2, 2));
  REQUIRE(late->W().device() == gpu());

  chain->to(cpu());
  REQUIRE(chain->device().is_cpu());
  std::size_t i = 0;
  for (const auto& [name, p] : chain->namedparams()) {
    if (name.rfind("late/", 0) == 0) continue;
    INFO(name);
    REQUIRE(p.device().is_cpu());
    REQUIRE(same_bytes(p.data(), before[i++].second));
  }
  REQUIRE(same_bytes(linear->W().grad(), grad_before));
}

TEST_CASE("lazily initialised parameters are created on the link's device", "[layers][to]") {
  auto on_cpu = std::make_shared<Linear>(-1, 4);
  auto on_gpu = std::make_shared<Linear>(-1, 4);
  on_gpu->to(gpu());
  REQUIRE(on_gpu->b().device() == gpu());
  const Tensor x = uniform({5, 6}, 2);
  // W is drawn from the global generator at the first forward: seeded alike for both.
  manual_seed(7);
  const Variable y_cpu = (*on_cpu)(Variable(x));
  manual_seed(7);
  const Variable y_gpu = (*on_gpu)(Variable(x.to(gpu())));
  REQUIRE(on_gpu->W().device() == gpu());
  REQUIRE_GPU_MATCHES(on_gpu->W().data(), on_cpu->W().data(), kExact);  // drawn on the host alike
  REQUIRE_GPU_MATCHES(y_gpu.data(), y_cpu.data(), near(1e-6));
}

namespace {

using LinkForward = std::function<Variables(Link&, const Variables&)>;

// Two copies of make()'s link with the same parameters, one moved to the GPU; runs forward on
// the inputs, seeds the floating outputs with the same random weights, backpropagates, and
// compares outputs, input and parameter gradients, and persistents.
void check_link(const std::function<LinkPtr()>& make, const LinkForward& forward, const std::vector<Tensor>& inputs,
                Tolerance tol, bool init_with_forward = false) {
  LinkPtr reference = make(), moved = make();
  if (init_with_forward) {  // lazy parameters: fix their shapes first
    NoGradGuard no_grad;
    Variables xs;
    for (const Tensor& t : inputs) xs.emplace_back(t);
    forward(*reference, xs);
    forward(*moved, xs);
  }
  moved->copyparams(*reference);
  moved->to(gpu());
  std::vector<GraphResult> results;
  for (Link* link : {reference.get(), moved.get()}) {
    const Device device = link == moved.get() ? gpu() : cpu();
    results.push_back(run_graph([&](const Variables& v) { return forward(*link, v); }, inputs, device, 5));
  }
  const GraphResult& want = results[0];
  const GraphResult& got = results[1];
  REQUIRE(got.outputs.size() == want.outputs.size());
  for (std::size_t k = 0; k < want.outputs.size(); ++k) {
    INFO("output " << k);
    REQUIRE_GPU_MATCHES(got.outputs[k], want.outputs[k], tol);
  }
  for (std::size_t i = 0; i < want.grads.size(); ++i) {
    INFO("gradient of input " << i);
    REQUIRE_GPU_MATCHES(got.grads[i], want.grads[i], tol);
  }
  const auto want_params = reference->namedparams(), got_params = moved->namedparams();
  REQUIRE(got_params.size() == want_params.size());
  for (std::size_t i = 0; i < want_params.size(); ++i) {
    INFO("gradient of parameter " << want_params[i].first);
    REQUIRE_GPU_MATCHES(got_params[i].second.grad(), want_params[i].second.grad(), tol);
  }
  const auto want_persistents = reference->namedpersistents(), got_persistents = moved->namedpersistents();
  REQUIRE(got_persistents.size() == want_persistents.size());
  for (std::size_t i = 0; i < want_persistents.size(); ++i) {
    INFO("persistent " << want_persistents[i].first);
    REQUIRE_GPU_MATCHES(*got_persistents[i].second, *want_persistents[i].second, tol);
  }
}

Variables single(Link& link, const Variables& v) { return {link.forward(v[0])}; }

}  // namespace

TEST_CASE("links compute on the GPU what they compute on the CPU", "[layers][links]") {
  SECTION("Linear, with and without bias, lazy input size") {
    check_link([] { return std::make_shared<Linear>(7, 5); }, single, {uniform({6, 7}, 10)}, near(1e-5));
    LinearOptions nobias;
    nobias.nobias = true;
    check_link([nobias] { return std::make_shared<Linear>(7, 5, nobias); }, single, {uniform({6, 7}, 11)}, near(1e-5));
    check_link([] { return std::make_shared<Linear>(-1, 5); }, single, {uniform({6, 2, 4}, 12)}, near(1e-5), true);
  }
  SECTION("Convolution2D: padding, stride, groups") {
    check_link([] { return std::make_shared<Convolution2D>(3, 8, Convolution2DOptions::make(3, 1, 1)); }, single,
               {uniform({4, 3, 10, 10}, 20)}, near(1e-4));
    Convolution2DOptions grouped = Convolution2DOptions::make(3, 2, 1);
    grouped.conv.groups = 2;
    check_link([grouped] { return std::make_shared<Convolution2D>(4, 6, grouped); }, single,
               {uniform({2, 4, 9, 9}, 21)}, near(1e-4));
  }
  SECTION("EmbedID with repeated and ignored ids") {
    check_link([] { return std::make_shared<EmbedID>(10, 6, -1); }, single,
               {random_ints({4, 7}, 30, -1, 9, DType::i32)}, near(1e-6));
  }
  SECTION("BatchNormalization: training updates the running statistics, test mode uses them") {
    const Tensor x = uniform({16, 4, 5, 5}, 40, -2, 3);
    check_link([] { return std::make_shared<BatchNormalization>(4); }, single, {x}, near(1e-5));
    check_link([] {
      auto bn = std::make_shared<BatchNormalization>(4);
      bn->persistent("avg_mean").copy_(uniform({4}, 41));
      bn->persistent("avg_var").copy_(uniform({4}, 42, 0.5, 2));
      bn->set_train(false);
      return bn;
    }, single, {x}, near(1e-5));
  }
  SECTION("NStepLSTM over sequences of different lengths") {
    const LinkForward lstm = [](Link& link, const Variables& v) {
      const Variables xs(v.begin() + 2, v.end());
      const auto r = dynamic_cast<NStepLSTM&>(link).forward(v[0], v[1], xs);
      Variables out{r.hy, r.cy};
      out.insert(out.end(), r.ys.begin(), r.ys.end());
      return out;
    };
    check_link([] { return std::make_shared<NStepLSTM>(2, 3, 5); }, lstm,
               {uniform({2, 3, 5}, 50), uniform({2, 3, 5}, 51), uniform({4, 3}, 52), uniform({0, 3}, 53),
                uniform({6, 3}, 54)},
               near(2e-5));
  }
  SECTION("The transformer's links: LayerNormalization, PositionalEmbedding, attention, the block") {
    check_link([] { return std::make_shared<LayerNormalization>(6); }, single, {uniform({3, 4, 6}, 70, -2, 3)},
               near(1e-5));
    check_link([] { return std::make_shared<PositionalEmbedding>(8, 6); }, single, {uniform({2, 5, 6}, 71)},
               near(1e-6));
    check_link([] { return std::make_shared<MultiHeadSelfAttention>(8, 2); }, single, {uniform({2, 6, 8}, 72)},
               near(1e-5));
    TransformerBlockOptions options;
    options.heads = 2;
    check_link([options] { return std::make_shared<TransformerBlock>(8, options); }, single,
               {uniform({2, 6, 8}, 73)}, near(1e-4));
  }
  SECTION("Classifier: loss and accuracy") {
    const LinkForward classify = [](Link& link, const Variables& v) {
      auto& classifier = dynamic_cast<Classifier&>(link);
      const Variable loss = classifier.forward(v[0], v[1]);
      return Variables{loss, classifier.accuracy()};
    };
    check_link([] { return std::make_shared<Classifier>(std::make_shared<Linear>(8, 4)); }, classify,
               {uniform({20, 8}, 60), random_ints({20}, 61, 0, 3, DType::i64)}, near(1e-5));
  }
}
