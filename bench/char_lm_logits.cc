// The logits of examples/lm's character language model from a sharded checkpoint, for a fixed
// batch of ids: the tandem side of the LibTorch cross-check bench/libtorch_char_lm.{cpp,sh}.
//
// Builds the whole model as one CharLMStage (stage 0 of 1, no tensor group) with the flags'
// --context --dim --heads --layers (as train_char_lm was given them) and the vocabulary size of the
// checkpoint's model/token/W, loads the checkpoint's model tensors with load_model_checkpoint
// (every model/ tensor of the checkpoint must be one of the model's), draws --batch rows of
// --length ids uniformly from the vocabulary with the seeded generator --seed, computes the
// logits [B, T, V] in f32 without a graph (on the CPU, or --gpu's device), and writes a
// safetensors file with "ids" (I32 [B, T]) and "logits" (F32 [B, T, V]):
//   bazel build -c opt //bench:char_lm_logits
//   bazel-bin/bench/char_lm_logits --checkpoint /tmp/lmx/checkpoints/step_20 --out /tmp/lmx/logits.safetensors
//     --context 32 --dim 64 --heads 4 --layers 2            (the flags train_char_lm was given)
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "comm/checkpoint/sharded_checkpoint.h"
#include "comm/checkpoint/training_checkpoint.h"
#include "comm/transport/communicator.h"
#include "core/random.h"
#include "examples/common/flags.h"
#include "examples/lm/char_lm_model.h"
#include "layers/serializers/safetensors.h"

using namespace tandem;

namespace {

constexpr const char* kProgram = "char_lm_logits";

int run(examples::Flags& flags) {
  const std::string directory = flags.get_string("checkpoint");
  TANDEM_CHECK(!directory.empty(), kProgram, ": --checkpoint DIR (a step_<N> directory) is required");
  const std::string out = flags.get_string("out");
  TANDEM_CHECK(!out.empty(), kProgram, ": --out FILE.safetensors is required");

  auto comm = create_communicator("naive");  // 1 rank without mpiexec
  TANDEM_CHECK(comm->size() == 1, kProgram, ": runs as one process, not under mpiexec with ", comm->size(), " ranks");
  const CheckpointManifest manifest = read_sharded_checkpoint_manifest(*comm, directory);
  const auto token = manifest.tensors.find("model/token/W");
  TANDEM_CHECK(token != manifest.tensors.end() && token->second.shape.size() == 2, kProgram, ": ", directory,
               " holds no model/token/W [V, dim]: not a checkpoint of the char LM");

  examples::CharLMConfig config;
  config.vocabulary = token->second.shape[0];
  config.context = flags.get_int("context");
  config.dim = flags.get_int("dim");
  config.heads = flags.get_int("heads");
  config.layers = flags.get_int("layers");
  TANDEM_CHECK(token->second.shape[1] == config.dim, kProgram, ": --dim ", config.dim,
               " but the checkpoint's token/W is [", token->second.shape[0], ", ", token->second.shape[1], "]");
  examples::CharLMStage model(config, 0, 1);

  // Every model tensor of the checkpoint must land in the model (the loader refuses unused ones
  // too; this says which flags to look at first).
  std::size_t model_tensors = 0;
  for (const auto& [name, tensor] : manifest.tensors) model_tensors += name.rfind("model/", 0) == 0 ? 1 : 0;
  const std::size_t ours = model.namedparams().size() + model.namedpersistents().size();
  TANDEM_CHECK(model_tensors == ours, kProgram, ": the checkpoint holds ", model_tensors,
               " model tensors, the model of these flags ", ours, ": do --layers, --dim, --context match?");
  load_model_checkpoint(*comm, model, directory);
  const Device device = examples::training_device(flags, kProgram);
  model.to(device);

  const long long batch = flags.get_int("batch");
  const long long length = flags.get_int("length") > 0 ? flags.get_int("length") : config.context;
  TANDEM_CHECK(batch > 0 && length <= config.context, kProgram,
               ": --batch must be positive and --length at most --context ", config.context, ", got ", batch, " and ",
               length);
  Generator generator(static_cast<std::uint64_t>(flags.get_int("seed")));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * length));
  for (std::int32_t& id : ids)
    id = static_cast<std::int32_t>(generator.next() % static_cast<std::uint64_t>(config.vocabulary));
  const Tensor id_tensor = from_vector(ids, {batch, length});

  Tensor logits;
  {
    NoGradGuard no_grad;
    TrainModeGuard evaluation(false);
    logits = model.logits_for(Variable(id_tensor.to(device))).data().to(Device::cpu());
  }
  TANDEM_CHECK(logits.dtype() == DType::f32 && logits.shape() == Shape({batch, length, config.vocabulary}), kProgram,
               ": logits came out ", logits.description(), ", not f32 [", batch, ", ", length, ", ", config.vocabulary,
               "]");
  write_safetensors(out, {{"ids", id_tensor}, {"logits", logits}},
                    {{"context", std::to_string(config.context)},
                     {"dim", std::to_string(config.dim)},
                     {"heads", std::to_string(config.heads)},
                     {"layers", std::to_string(config.layers)},
                     {"mlp_ratio", std::to_string(config.mlp_ratio)},
                     {"vocabulary", std::to_string(config.vocabulary)},
                     {"checkpoint", directory}});
  std::printf("%s: %s (step %lld): logits [%lld, %lld, %lld] of ids drawn with seed %lld -> %s\n", kProgram,
              directory.c_str(), static_cast<long long>(manifest.step), batch, length,
              static_cast<long long>(config.vocabulary), flags.get_int("seed"), out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags(kProgram,
                        "The logits of examples/lm's char LM, loaded from a sharded checkpoint, for seeded random ids "
                        "(ids and logits into a safetensors file).");
  flags.add_string("checkpoint", "", "a checkpoint's step_<N> directory (train_char_lm --checkpoint-interval)");
  flags.add_string("out", "", "the safetensors file to write: ids I32 [B, T], logits F32 [B, T, V]");
  flags.add_int("context", 64, "train_char_lm's --context");
  flags.add_int("dim", 128, "train_char_lm's --dim");
  flags.add_int("heads", 4, "train_char_lm's --heads");
  flags.add_int("layers", 4, "train_char_lm's --layers");
  flags.add_int("batch", 4, "sequences (B)");
  flags.add_int("length", 0, "ids per sequence (T; 0: --context)");
  flags.add_int("seed", 1, "the ids' random seed");
  flags.add_int("gpu", -1, "GPU to compute on, -1 for the CPU (needs a build with --config=cuda)");
  const int status =
      examples::parse_command_line(flags, argc, argv, kProgram, {"context", "dim", "heads", "layers", "batch"});
  if (status >= 0) return status;
  try {
    return run(flags);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
}
