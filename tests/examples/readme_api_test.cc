// The README's "API in a page" snippet, compiled and run, so the documentation cannot rot.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "autograd/functions.h"
#include "core/ops.h"
#include "data/data.h"
#include "layers/links/classifier.h"
#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"
#include "layers/serializers/serializers.h"
#include "training/extensions/evaluator.h"
#include "training/extensions/reporting.h"

using namespace tandem;

TEST_CASE("the README API snippet compiles and computes what it says", "[readme]") {
  Generator gen(42);
  Tensor a = randn({2, 3}, gen);
  Tensor b = from_vector<float>({1, 2, 3}, {3});
  Tensor c = a * b + 1.0;
  Tensor d = matmul(a, transpose(a));
  Tensor s = sum(a, {1}, /*keepdims=*/true);
  Tensor v = a.reshape({3, 2});
  Tensor w = a.clone().to(DType::f64);
  auto parts = split(a, 3, /*axis=*/1);
  std::vector<float> host = a.to_vector<float>();
  REQUIRE(c.shape() == Shape{2, 3});
  REQUIRE(d.shape() == Shape{2, 2});
  REQUIRE(s.shape() == Shape{2, 1});
  REQUIRE(v.shares_storage_with(a));
  REQUIRE(w.dtype() == DType::f64);
  REQUIRE(parts.size() == 3);
  REQUIRE(c.to_vector<float>()[1] == Approx(host[1] * 2 + 1));
  REQUIRE_THROWS_AS(add(a, w), Error);

  Variable x(randn({8, 784}, gen));
  Variable W(randn({10, 784}, gen, 0, 0.03), /*requires_grad=*/true);
  Variable bias(zeros({10}), true);
  Variable t(from_vector<std::int64_t>({0, 1, 2, 3, 4, 5, 6, 7}));
  Variable loss = F::softmax_cross_entropy(F::linear(x, W, bias), t);
  loss.backward();
  REQUIRE(W.grad().shape() == Shape{10, 784});
  REQUIRE(bias.grad().shape() == Shape{10});
  // The bias gradient of a mean cross-entropy sums to zero over classes (softmax - one-hot).
  REQUIRE(sum(bias.grad()).item() == Approx(0.0).margin(1e-6));
  {
    NoGradGuard no_grad;
    REQUIRE(F::relu(W).is_leaf());
  }
  {
    TrainModeGuard test_mode(false);
    REQUIRE(F::dropout(x).same_as(x));
  }
}

namespace readme {

// The model-and-training snippet of docs/training.md, run for three iterations.
class MLP : public Chain {
 public:
  MLP() {
    l1 = add_link("l1", std::make_shared<Linear>(-1, 100));
    l2 = add_link("l2", std::make_shared<Linear>(-1, 10));
  }
  Variable forward(const Variable& x) override { return (*l2)(F::relu((*l1)(x))); }
  std::shared_ptr<Linear> l1, l2;
};

}  // namespace readme

TEST_CASE("the README training snippet runs", "[readme]") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string out = std::string(tmp ? tmp : "/tmp") + "/readme_result";
  auto [train, test] = get_mnist();
  auto model = std::make_shared<Classifier>(std::make_shared<readme::MLP>());
  auto optimizer = std::make_shared<Adam>();
  optimizer->setup(model);
  auto it = std::make_shared<SerialIterator>(train, 100);
  auto updater = std::make_shared<StandardUpdater>(it, optimizer);   // the model is the loss
  Trainer trainer(updater, Trigger::iterations(3), out, model);
  auto small_test = std::make_shared<SubDataset>(test, 0, 200);
  trainer.extend(std::make_shared<Evaluator>(std::make_shared<SerialIterator>(small_test, 100, false, false), model),
                 Trigger::iterations(3));
  auto log = std::make_shared<LogReport>(Trigger::iterations(3));
  trainer.extend(log);
  trainer.extend(std::make_shared<PrintReport>(log, std::vector<std::string>{"epoch", "main/loss",
                                               "validation/main/accuracy"}));
  trainer.extend(std::make_shared<ProgressBar>());
  trainer.extend(std::make_shared<SnapshotWriter>(), Trigger::iterations(3));
  trainer.run();
  REQUIRE(log->log().size() == 1);
  REQUIRE(log->log()[0].count("validation/main/accuracy"));
  save_npz(out + "/model.npz", *model);
  load_npz(out + "/model.npz", *model);
  REQUIRE(model->namedparams()[0].first == "predictor/l1/W");
  // A fresh model loads without a forward pass: the file gives the lazy layers their shapes.
  auto fresh = std::make_shared<Classifier>(std::make_shared<readme::MLP>());
  load_npz(out + "/model.npz", *fresh);
  REQUIRE(fresh->namedparams()[0].second.shape() == Shape{100, 784});
  REQUIRE(fresh->namedparams()[0].second.data().to_vector<float>() ==
          model->namedparams()[0].second.data().to_vector<float>());
}
