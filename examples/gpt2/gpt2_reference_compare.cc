// gpt2_reference_compare: tandem's GPT-2 against the independent LibTorch implementation
// (tests/gpt2/libtorch_gpt2_reference.cc), as llm.c's test_gpt2 checks its model against PyTorch:
//   1. builds GPT-2 (gpt2_model.h) in one process from a seed and writes its weights in Hugging
//      Face's names and layout (gpt2_hf.h) with a seeded batch of token ids;
//   2. runs the reference on them: logits, loss, every gradient, and the losses of --steps AdamW
//      steps on the batch;
//   3. computes the same in tandem and compares: logits (largest |difference| over the largest
//      |logit|), the loss, every gradient (per tensor, over its largest magnitude), the losses.
// In f32 the tolerances are the (logits 1e-5, gradients 1e-4, losses 1e-5; 124M: 1e-4,
// 1e-3, as llm.c); --dtype f64 runs both sides in f64, where only the order of sums differs
// (1e-10 suits), so any difference of definition shows however small the model.
//
//   bazel build -c opt //examples/gpt2:gpt2_reference_compare //tests/gpt2:libtorch_gpt2_reference
//   bazel-bin/examples/gpt2/gpt2_reference_compare --reference bazel-bin/tests/gpt2/libtorch_gpt2_reference \
//       --layers 2 --dim 64 --heads 4 --context 64                       # the CI size
//   ... --layers 12 --dim 768 --heads 12 --context 1024 --batch 4 --seq-len 64 \
//       --logits-tolerance 1e-4 --grad-tolerance 1e-3                    # GPT-2 124M
// Exit status 0 when every comparison is within its tolerance; one line per check either way.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "examples/common/flags.h"
#include "examples/gpt2/gpt2_hf.h"
#include "examples/gpt2/gpt2_model.h"
#include "layers/optimizers/adam.h"
#include "layers/serializers/safetensors.h"

using namespace tandem;
using namespace tandem::examples;

namespace {

constexpr const char* kProgram = "gpt2_reference_compare";

std::vector<double> values(const Tensor& t) { return t.to(Device::cpu()).to(DType::f64).to_vector<double>(); }

// Largest |a - b| over the largest |b|.
double relative_difference(const Tensor& a, const Tensor& b, const std::string& what) {
  TANDEM_CHECK(a.shape() == b.shape(), kProgram, ": ", what, ": tandem's ", shape_str(a.shape()),
               " and the reference's ", shape_str(b.shape()), " differ in shape");
  const std::vector<double> x = values(a), y = values(b);
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

std::string run_output(const std::string& command) {
  std::printf("%s: %s\n", kProgram, command.c_str());
  std::fflush(stdout);
  const int status = std::system(command.c_str());
  TANDEM_CHECK(status == 0, kProgram, ": the reference failed (status ", status, "): ", command);
  return command;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags(kProgram, "GPT-2 in tandem against the LibTorch reference: logits, gradients, AdamW losses");
  flags.add_string("reference", "", "the libtorch_gpt2_reference binary");
  flags.add_string("work", "", "directory for the exchanged files (default: $TEST_TMPDIR or /tmp)");
  flags.add_int("layers", 2, "transformer blocks");
  flags.add_int("dim", 64, "model width");
  flags.add_int("heads", 4, "attention heads");
  flags.add_int("context", 64, "positions (wpe's rows)");
  flags.add_int("vocabulary", 50257, "tokens");
  flags.add_int("padded-vocabulary", 50304, "wte's rows in tandem (the reference has none: padding must not show)");
  flags.add_int("batch", 2, "sequences");
  flags.add_int("seq-len", 0, "tokens per sequence (0: the context)");
  flags.add_int("steps", 10, "AdamW steps whose losses are compared");
  flags.add_double("lr", 1e-3, "AdamW's learning rate");
  flags.add_double("weight-decay", 0.1, "AdamW's weight decay (matrices and embeddings only)");
  flags.add_string("dtype", "f32", "f32 or f64, on both sides");
  flags.add_double("logits-tolerance", 0, "largest relative difference of the logits (0: 1e-5 in f32, 1e-10 in f64)");
  flags.add_double("grad-tolerance", 0, "largest relative difference of a gradient (0: 1e-4 in f32, 1e-10 in f64)");
  flags.add_double("loss-tolerance", 0, "largest difference of a loss (0: 1e-5 in f32, 1e-10 in f64)");
  flags.add_int("threads", 0, "the reference's threads (0: its default)");
  flags.add_int("seed", 1, "weights and batch");
  flags.add_int("export-only", 0, "1: write the weights and the batch into --work and stop (for the benchmarks)");
  flags.add_int("gpu", -1, "GPU to run tandem's side on, -1 for the CPU (needs a build with --config=cuda)");
  const int status = parse_command_line(flags, argc, argv, kProgram, {"layers", "dim", "heads", "context", "batch"});
  if (status >= 0) return status;
  const std::string reference = flags.get_string("reference");
  TANDEM_CHECK(!reference.empty() || flags.get_int("export-only") != 0, kProgram,
               ": --reference (the libtorch_gpt2_reference binary) is required");
  const bool f64 = flags.get_string("dtype") == "f64";
  TANDEM_CHECK(f64 || flags.get_string("dtype") == "f32", kProgram, ": --dtype must be f32 or f64");
  auto tolerance = [&](const char* flag, double f32_default) {
    const double given = flags.get_double(flag);
    return given > 0 ? given : (f64 ? 1e-10 : f32_default);
  };
  const double logits_tolerance = tolerance("logits-tolerance", 1e-5),
               grad_tolerance = tolerance("grad-tolerance", 1e-4), loss_tolerance = tolerance("loss-tolerance", 1e-5);
  std::string work = flags.get_string("work");
  if (work.empty()) work = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";

  GPT2Config config;
  config.layers = flags.get_int("layers");
  config.dim = flags.get_int("dim");
  config.heads = flags.get_int("heads");
  config.context = flags.get_int("context");
  config.vocabulary = flags.get_int("vocabulary");
  config.padded_vocabulary = flags.get_int("padded-vocabulary");
  config.seed = static_cast<std::uint64_t>(flags.get_int("seed"));
  const std::int64_t B = flags.get_int("batch"),
                     T = flags.get_int("seq-len") > 0 ? flags.get_int("seq-len") : config.context;
  auto model = std::make_shared<GPT2Stage>(config, 0, 1);
  if (f64) model->to(DType::f64);
  const Device device = training_device(flags, kProgram);
  model->to(device);

  // The batch: seeded ids over the whole vocabulary (rare rows of wte too), targets the next id.
  Generator generator(config.seed + 17);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(B * (T + 1)));
  for (auto& id : tokens)
    id = static_cast<std::int32_t>(std::min<double>(generator.uniform(0, static_cast<double>(config.vocabulary)),
                                                    static_cast<double>(config.vocabulary - 1)));
  std::vector<std::int32_t> ids, targets;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t) {
      ids.push_back(tokens[static_cast<std::size_t>(b * (T + 1) + t)]);
      targets.push_back(tokens[static_cast<std::size_t>(b * (T + 1) + t + 1)]);
    }
  const Tensor x = from_vector(ids, {B, T}), t = from_vector(targets, {B, T});

  NamedTensors weights;
  for (const auto& [name, param] : model->namedparams())
    weights.emplace_back(name, param.data().to(Device::cpu()).to(DType::f32));
  const std::string weights_path = work + "/gpt2_weights.safetensors", batch_path = work + "/gpt2_batch.safetensors",
                    out_path = work + "/gpt2_reference.safetensors";
  write_safetensors(weights_path, gpt2_to_hf(weights, config));
  write_safetensors(batch_path, {{"ids", x}, {"targets", t}});
  if (flags.get_int("export-only") != 0) {
    std::printf("%s: wrote %s and %s\n", kProgram, weights_path.c_str(), batch_path.c_str());
    return 0;
  }
  const double lr = flags.get_double("lr"), wd = flags.get_double("weight-decay");
  const std::int64_t steps = flags.get_int("steps");
  char command[2048];
  std::snprintf(command, sizeof command,
                "%s --weights %s --batch %s --out %s --heads %lld --steps %lld --lr %.17g --beta1 0.9 --beta2 0.95 "
                "--eps 1e-8 --weight-decay %.17g --dtype %s%s%s",
                reference.c_str(), weights_path.c_str(), batch_path.c_str(), out_path.c_str(),
                static_cast<long long>(config.heads), static_cast<long long>(steps), lr, wd, f64 ? "f64" : "f32",
                flags.get_int("threads") > 0 ? " --threads " : "",
                flags.get_int("threads") > 0 ? std::to_string(flags.get_int("threads")).c_str() : "");
  run_output(command);
  std::map<std::string, Tensor> ref;
  for (auto& [name, tensor] : read_safetensors(out_path)) ref[name] = tensor;
  auto reference_tensor = [&](const std::string& name) -> const Tensor& {
    TANDEM_CHECK(ref.count(name), kProgram, ": the reference's output has no '", name, "'");
    return ref.at(name);
  };

  int failures = 0;
  auto report = [&](const std::string& what, double difference, double limit) {
    const bool ok = difference <= limit;
    if (!ok) ++failures;
    std::printf("%-40s %.3g (tolerance %.0e) %s\n", what.c_str(), difference, limit, ok ? "ok" : "FAIL");
  };

  // Logits and the loss of the initial weights, then every gradient.
  const Variable xd(x.to(device)), td(t.to(device));
  const Variable logits = model->logits_for(xd);
  report("logits (relative)", relative_difference(logits.data(), reference_tensor("logits"), "logits"),
         logits_tolerance);
  Variable loss = model->forward_many({xd, td})[0];
  const double tandem_loss = values(loss.data())[0], reference_loss = values(reference_tensor("loss"))[0];
  std::printf("loss: tandem %.9f, reference %.9f\n", tandem_loss, reference_loss);
  report("loss", std::abs(tandem_loss - reference_loss), loss_tolerance);
  model->cleargrads();
  loss.backward();
  NamedTensors grads;
  for (const auto& [name, param] : model->namedparams()) grads.emplace_back(name, param.grad().to(Device::cpu()));
  double worst = 0;
  std::string worst_name;
  int grad_failures = 0;
  for (const auto& [name, grad] : gpt2_to_hf(grads, config)) {
    const double d = relative_difference(grad, reference_tensor("grad." + name), "grad." + name);
    if (d > grad_tolerance) {
      ++grad_failures;
      std::printf("gradient of %s: %.3g FAIL\n", name.c_str(), d);
    }
    if (d >= worst) worst = d, worst_name = name;
  }
  failures += grad_failures;
  std::printf("%-40s %.3g in %s (tolerance %.0e) %s\n", "gradients (relative, worst)", worst, worst_name.c_str(),
              grad_tolerance, grad_failures == 0 ? "ok" : "FAIL");

  // AdamW as PyTorch's: eps on the corrected v, decoupled decay lr x wd on the matrices and
  // embeddings (tandem's "W" parameters; GPT-2's 2-D ones), none on biases and LayerNorms.
  AdamOptions adam;
  adam.alpha = lr;
  adam.beta1 = 0.9;
  adam.beta2 = 0.95;
  adam.eps = 1e-8;
  adam.eps_on_corrected_v = true;
  adam.weight_decay_rate = lr * wd;
  adam.decays = [](const std::string& name) { return name.size() >= 2 && name.compare(name.size() - 2, 2, "/W") == 0; };
  auto optimizer = std::make_shared<Adam>(adam);
  optimizer->setup(model);
  const std::vector<double> reference_losses = values(reference_tensor("losses"));
  TANDEM_CHECK(static_cast<std::int64_t>(reference_losses.size()) == steps, kProgram, ": the reference has ",
               reference_losses.size(), " losses, expected ", steps);
  double worst_loss = 0;
  for (std::int64_t k = 0; k < steps; ++k) {
    Variable step_loss;
    optimizer->update([&] { return step_loss = model->forward_many({xd, td})[0]; });
    const double value = values(step_loss.data())[0];
    std::printf("step %2lld: loss tandem %.9f, reference %.9f\n", static_cast<long long>(k), value,
                reference_losses[static_cast<std::size_t>(k)]);
    worst_loss = std::max(worst_loss, std::abs(value - reference_losses[static_cast<std::size_t>(k)]));
  }
  report("AdamW losses (largest difference)", worst_loss, loss_tolerance);
  std::printf("%s: %s (%lld layers, %lld wide, %lld heads, vocabulary %lld padded to %lld, batch %lld x %lld, %s)\n",
              kProgram, failures == 0 ? "PASS" : "FAIL", static_cast<long long>(config.layers),
              static_cast<long long>(config.dim), static_cast<long long>(config.heads),
              static_cast<long long>(config.vocabulary), static_cast<long long>(config.rows()),
              static_cast<long long>(B), static_cast<long long>(T), f64 ? "f64" : "f32");
  return failures == 0 ? 0 : 1;
}
