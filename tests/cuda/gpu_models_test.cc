// The examples' models trained a few steps on cuda:0 and on the CPU from identical initial
// parameters and identical batches: the losses of every step and the parameters afterwards
// must agree. Models: the MNIST MLP (examples/mnist, in a Classifier, with Adam as
// train_mnist), a small VGG-style CNN with batch normalisation (bench/train_step_bench.cc's
// conv workload, scaled down), the LSTM language model over packed sequences and the
// encoder-decoder seq2seq (the bench's lstm and seq2seq workloads, scaled down).
//
// Each model runs in f64, where CPU and GPU agree to ~1e-10 after several steps, and in f32,
// where the check is looser: an f32 activation within rounding of 0 can fall on different
// sides of a ReLU (or two near-equal values swap in a max-pooling window) on the two devices,
// which routes one term of a gradient differently. That moves a parameter by about lr times
// one term, far below the size of a real bug, but above f32 rounding.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>

#include "examples/mnist/mnist_common.h"
#include "layers/links/batch_normalization.h"
#include "layers/links/classifier.h"
#include "layers/links/convolution_2d.h"
#include "layers/links/embed_id.h"
#include "layers/links/linear.h"
#include "layers/links/n_step_lstm.h"
#include "layers/optimizers/adam.h"
#include "layers/optimizers/sgd.h"
#include "tests/cuda/gpu_test_util.h"

using namespace tandem;
using namespace gpu_test;

namespace {

// ---- the models ----

LinearOptions linear_options(DType dtype) {
  LinearOptions o;
  o.dtype = dtype;
  return o;
}

// examples::MLP's architecture (784-units-units-10, ReLU) with a chosen dtype; examples::MLP
// itself is f32 and is used for the f32 run.
class MLP : public Chain {
 public:
  MLP(std::int64_t units, DType dtype) {
    l1_ = add_link("l1", std::make_shared<Linear>(784, units, linear_options(dtype)));
    l2_ = add_link("l2", std::make_shared<Linear>(units, units, linear_options(dtype)));
    l3_ = add_link("l3", std::make_shared<Linear>(units, 10, linear_options(dtype)));
  }
  Variable forward(const Variable& x) override { return (*l3_)(F::relu((*l2_)(F::relu((*l1_)(x))))); }

 private:
  std::shared_ptr<Linear> l1_, l2_, l3_;
};

// conv3x3-relu-conv3x3-relu-maxpool2-conv3x3-batchnorm-relu-maxpool2-linear-relu-linear, all
// convolutions padded by 1: 28 -> 14 -> 7.
class CNN : public Chain {
 public:
  explicit CNN(DType dtype) {
    Convolution2DOptions three = Convolution2DOptions::make(3, 1, 1);
    three.dtype = dtype;
    c1_ = add_link("c1", std::make_shared<Convolution2D>(1, 8, three));
    c2_ = add_link("c2", std::make_shared<Convolution2D>(8, 8, three));
    c3_ = add_link("c3", std::make_shared<Convolution2D>(8, 16, three));
    bn_ = add_link("bn", std::make_shared<BatchNormalization>(16, 0.9, 2e-5, dtype));
    fc1_ = add_link("fc1", std::make_shared<Linear>(16 * 7 * 7, 32, linear_options(dtype)));
    fc2_ = add_link("fc2", std::make_shared<Linear>(32, 10, linear_options(dtype)));
  }
  Variable forward(const Variable& x) override {
    Variable h = F::max_pooling_2d(F::relu((*c2_)(F::relu((*c1_)(x)))), 2);
    h = F::max_pooling_2d(F::relu((*bn_)((*c3_)(h))), 2);
    return (*fc2_)(F::relu((*fc1_)(h)));
  }

 private:
  std::shared_ptr<Convolution2D> c1_, c2_, c3_;
  std::shared_ptr<BatchNormalization> bn_;
  std::shared_ptr<Linear> fc1_, fc2_;
};

constexpr std::int64_t kVocab = 50, kUnits = 16;

// Embeds sequences of ids with one lookup, then cuts the result back into sequences.
Variables embed_sequences(EmbedID& embed, const std::vector<Tensor>& sequences) {
  std::vector<std::int64_t> cuts;
  std::int64_t total = 0;
  for (std::size_t i = 0; i + 1 < sequences.size(); ++i) cuts.push_back(total += sequences[i].numel());
  return F::split_axis(embed(Variable(concat(sequences, 0))), cuts, 0);
}

class LanguageModel : public Chain {
 public:
  explicit LanguageModel(DType dtype) {
    embed_ = add_link("embed", std::make_shared<EmbedID>(kVocab, kUnits, std::nullopt, nullptr, dtype));
    lstm_ = add_link("lstm", std::make_shared<NStepLSTM>(2, kUnits, kUnits, 0.0, dtype));
    out_ = add_link("out", std::make_shared<Linear>(kUnits, kVocab, linear_options(dtype)));
  }
  Variable loss(const std::vector<Tensor>& inputs, const Tensor& targets) {
    const auto result = lstm_->forward(Variable(), Variable(), embed_sequences(*embed_, inputs));
    return F::softmax_cross_entropy((*out_)(F::concat(result.ys, 0)), Variable(targets));
  }

 private:
  std::shared_ptr<EmbedID> embed_;
  std::shared_ptr<NStepLSTM> lstm_;
  std::shared_ptr<Linear> out_;
};

class Seq2Seq : public Chain {
 public:
  explicit Seq2Seq(DType dtype) {
    embed_x_ = add_link("embed_x", std::make_shared<EmbedID>(kVocab, kUnits, std::nullopt, nullptr, dtype));
    embed_y_ = add_link("embed_y", std::make_shared<EmbedID>(kVocab, kUnits, std::nullopt, nullptr, dtype));
    encoder_ = add_link("encoder", std::make_shared<NStepLSTM>(2, kUnits, kUnits, 0.0, dtype));
    decoder_ = add_link("decoder", std::make_shared<NStepLSTM>(2, kUnits, kUnits, 0.0, dtype));
    out_ = add_link("out", std::make_shared<Linear>(kUnits, kVocab, linear_options(dtype)));
  }
  Variable loss(const std::vector<Tensor>& sources, const std::vector<Tensor>& inputs, const Tensor& targets) {
    const auto encoded = encoder_->forward(Variable(), Variable(), embed_sequences(*embed_x_, sources));
    const auto decoded = decoder_->forward(encoded.hy, encoded.cy, embed_sequences(*embed_y_, inputs));
    return F::softmax_cross_entropy((*out_)(F::concat(decoded.ys, 0)), Variable(targets));
  }

 private:
  std::shared_ptr<EmbedID> embed_x_, embed_y_;
  std::shared_ptr<NStepLSTM> encoder_, decoder_;
  std::shared_ptr<Linear> out_;
};

// ---- training on both devices ----

using MakeModel = std::function<LinkPtr()>;
using MakeOptimizer = std::function<std::shared_ptr<Optimizer>()>;
// The loss of batch `step` for a model on `device` (the batch is made on the host from its
// own seed and moved there).
using LossOfBatch = std::function<Variable(Link& model, Device device, int step)>;

struct Trace {
  std::vector<double> losses;
  std::vector<std::pair<std::string, Tensor>> params;
};

Trace train(const MakeModel& make, const Link& initial, Device device, const MakeOptimizer& make_optimizer,
            const LossOfBatch& loss_of, int steps) {
  LinkPtr model = make();
  model->copyparams(initial);
  model->to(device);  // before the first update: optimizer state is created on the parameters' device
  const std::shared_ptr<Optimizer> optimizer = make_optimizer();
  optimizer->setup(model);
  Trace trace;
  for (int step = 0; step < steps; ++step) {
    Variable loss;
    optimizer->update([&] { return loss = loss_of(*model, device, step); });
    REQUIRE(loss.device() == device);
    trace.losses.push_back(loss.data().item());
  }
  for (const auto& [name, p] : model->namedparams()) {
    INFO(name);
    REQUIRE(p.device() == device);
    REQUIRE(p.data().dtype() == initial.namedparams().front().second.dtype());
    trace.params.emplace_back(name, p.data());
  }
  return trace;
}

void check_training(const MakeModel& make, const MakeOptimizer& make_optimizer, const LossOfBatch& loss_of,
                    int steps, Tolerance loss_tol, Tolerance param_tol) {
  const LinkPtr initial = make();
  const Trace want = train(make, *initial, cpu(), make_optimizer, loss_of, steps);
  const Trace got = train(make, *initial, gpu(), make_optimizer, loss_of, steps);
  for (int step = 0; step < steps; ++step) {
    INFO("loss of step " << step << ": GPU " << got.losses[step] << ", CPU " << want.losses[step]);
    REQUIRE(got.losses[step] == Approx(want.losses[step]).epsilon(loss_tol.rtol).margin(loss_tol.atol));
  }
  // The models learn something (the losses move), so the comparison is not of two idle runs.
  REQUIRE(want.losses.back() != want.losses.front());
  REQUIRE(got.params.size() == want.params.size());
  for (std::size_t i = 0; i < want.params.size(); ++i) {
    INFO("parameter " << want.params[i].first << " after " << steps << " steps");
    REQUIRE(got.params[i].first == want.params[i].first);
    REQUIRE_GPU_MATCHES(got.params[i].second, want.params[i].second, param_tol);
  }
}

Tolerance loss_tolerance(DType dtype) { return for_dtype(dtype, Tolerance{1e-4, 1e-6}, Tolerance{1e-10, 1e-12}); }
Tolerance param_tolerance(DType dtype) { return for_dtype(dtype, Tolerance{1e-3, 3e-4}, Tolerance{1e-9, 1e-10}); }

// `count` labels in [0, classes) from seed, as i32 on the device.
Tensor labels(std::int64_t count, std::int64_t classes, std::uint64_t seed, Device device) {
  return random_ints({count}, seed, 0, classes - 1, DType::i32).to(device);
}

std::vector<std::int64_t> lengths_of(int step) {
  // Packed batches: sequences of different lengths, in no particular order (n_step_lstm sorts).
  return {7, 3, 9, 1, 5, 9, 2, 6 + step % 3};
}

}  // namespace

TEST_CASE("the MNIST MLP trains identically on the GPU", "[models][mlp]") {
  SECTION("examples::MLP in a Classifier with Adam, f32 (as train_mnist)") {
    const MakeModel make = [] {
      manual_seed(1);
      auto model = std::make_shared<Classifier>(std::make_shared<examples::MLP>(100, 10));
      NoGradGuard no_grad;  // fix the lazy input size (784)
      model->predictor()->forward(Variable(zeros({1, 784})));
      return model;
    };
    const LossOfBatch loss_of = [](Link& model, Device device, int step) {
      const Tensor x = uniform({64, 784}, 100 + step, 0, 1).to(device);
      return dynamic_cast<Classifier&>(model).forward(Variable(x), Variable(labels(64, 10, 200 + step, device)));
    };
    check_training(make, [] { return std::make_shared<Adam>(); }, loss_of, 5, loss_tolerance(DType::f32),
                   param_tolerance(DType::f32));
  }
  for (DType dtype : {DType::f64, DType::f32}) {
    SECTION(std::string("the same architecture with MomentumSGD, ") + dtype_name(dtype)) {
      const MakeModel make = [dtype] {
        manual_seed(2);
        return std::make_shared<MLP>(100, dtype);
      };
      const LossOfBatch loss_of = [dtype](Link& model, Device device, int step) {
        const Tensor x = uniform({64, 784}, 300 + step, 0, 1, dtype).to(device);
        return F::softmax_cross_entropy(model.forward(Variable(x)), Variable(labels(64, 10, 400 + step, device)));
      };
      check_training(make, [] { return std::make_shared<MomentumSGD>(0.05, 0.9); }, loss_of, 5,
                     loss_tolerance(dtype), param_tolerance(dtype));
    }
  }
}

TEST_CASE("a CNN with batch normalisation trains identically on the GPU", "[models][cnn]") {
  for (DType dtype : {DType::f64, DType::f32}) {
    SECTION(dtype_name(dtype)) {
      const MakeModel make = [dtype] {
        manual_seed(3);
        return std::make_shared<CNN>(dtype);
      };
      const LossOfBatch loss_of = [dtype](Link& model, Device device, int step) {
        const Tensor x = uniform({16, 1, 28, 28}, 500 + step, 0, 1, dtype).to(device);
        return F::softmax_cross_entropy(model.forward(Variable(x)), Variable(labels(16, 10, 600 + step, device)));
      };
      check_training(make, [] { return std::make_shared<MomentumSGD>(0.01, 0.9); }, loss_of, 4, loss_tolerance(dtype),
                     param_tolerance(dtype));
    }
  }
}

TEST_CASE("an LSTM language model over packed sequences trains identically on the GPU", "[models][lstm]") {
  for (DType dtype : {DType::f64, DType::f32}) {
    SECTION(dtype_name(dtype)) {
      const MakeModel make = [dtype] {
        manual_seed(4);
        return std::make_shared<LanguageModel>(dtype);
      };
      const LossOfBatch loss_of = [](Link& model, Device device, int step) {
        std::vector<Tensor> inputs, targets;
        std::uint64_t seed = 700 + 100 * step;
        for (std::int64_t length : lengths_of(step)) {
          inputs.push_back(random_ints({length}, seed++, 0, kVocab - 1, DType::i32).to(device));
          targets.push_back(random_ints({length}, seed++, 0, kVocab - 1, DType::i32).to(device));
        }
        return dynamic_cast<LanguageModel&>(model).loss(inputs, concat(targets, 0));
      };
      check_training(make, [] { return std::make_shared<Adam>(1e-2); }, loss_of, 4, loss_tolerance(dtype),
                     param_tolerance(dtype));
    }
  }
}

TEST_CASE("a seq2seq encoder-decoder trains identically on the GPU", "[models][seq2seq]") {
  for (DType dtype : {DType::f64, DType::f32}) {
    SECTION(dtype_name(dtype)) {
      const MakeModel make = [dtype] {
        manual_seed(5);
        return std::make_shared<Seq2Seq>(dtype);
      };
      const LossOfBatch loss_of = [](Link& model, Device device, int step) {
        std::vector<Tensor> sources, inputs, targets;
        std::uint64_t seed = 1000 + 100 * step;
        for (std::int64_t length : lengths_of(step)) {
          sources.push_back(random_ints({length + 2}, seed++, 0, kVocab - 1, DType::i32).to(device));
          inputs.push_back(random_ints({length}, seed++, 0, kVocab - 1, DType::i32).to(device));
          targets.push_back(random_ints({length}, seed++, 0, kVocab - 1, DType::i32).to(device));
        }
        return dynamic_cast<Seq2Seq&>(model).loss(sources, inputs, concat(targets, 0));
      };
      check_training(make, [] { return std::make_shared<Adam>(1e-2); }, loss_of, 4, loss_tolerance(dtype),
                     param_tolerance(dtype));
    }
  }
}
