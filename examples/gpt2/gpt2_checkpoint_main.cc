// gpt2_checkpoint: GPT-2 weights between Hugging Face's safetensors (GPT2Model's or
// GPT2LMHeadModel's model.safetensors) and tandem's sharded checkpoints (comm/checkpoint), through
// the map of gpt2_hf.h (names, transposed Conv1D weights, q | k | v regrouped per head, the padded
// vocabulary).
//
//   gpt2_checkpoint from-hf IN.safetensors ROOT STEP [--heads 12] [--vocabulary-multiple 128]
//       a one-process checkpoint <ROOT>/step_<STEP> of the model, which train_gpt2's
//       --init-checkpoint loads under any layout (give train_gpt2 the same sizes: --layers, --dim,
//       --heads, --context, --vocabulary-multiple; it prints what it loaded)
//   gpt2_checkpoint to-hf DIR OUT.safetensors [--heads 12] [--vocabulary 50257]
//       a checkpoint of train_gpt2 (any layout) as Hugging Face's GPT-2 tensors
//
// A real GPT-2 124M: gpt2_checkpoint from-hf model.safetensors /tmp/gpt2 0, then
// train_gpt2 --init-checkpoint /tmp/gpt2/step_0 ... (the defaults are GPT-2 small's sizes).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "comm/checkpoint/sharded_checkpoint.h"
#include "comm/transport/communicator.h"
#include "examples/gpt2/gpt2_hf.h"
#include "layers/serializers/safetensors.h"

using namespace tandem;
using namespace tandem::examples;

namespace {

constexpr const char* kProgram = "gpt2_checkpoint";

int usage() {
  std::fprintf(stderr,
               "usage: gpt2_checkpoint from-hf IN.safetensors ROOT STEP [--heads 12] [--vocabulary-multiple 128]\n"
               "       gpt2_checkpoint to-hf DIR OUT.safetensors [--heads 12] [--vocabulary 50257]\n");
  return 2;
}

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, long long> options;
};

Args parse(int argc, char** argv, const std::vector<std::string>& allowed) {
  Args args;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      args.positional.push_back(a);
      continue;
    }
    const std::string key = a.substr(2);
    TANDEM_CHECK(std::find(allowed.begin(), allowed.end(), key) != allowed.end(), kProgram, ": unknown option ", a);
    TANDEM_CHECK(i + 1 < argc, kProgram, ": ", a, " needs a value");
    args.options[key] = std::stoll(argv[++i]);
    TANDEM_CHECK(args.options[key] > 0, kProgram, ": ", a, " must be positive");
  }
  return args;
}

long long option(const Args& args, const std::string& key, long long fallback) {
  const auto it = args.options.find(key);
  return it == args.options.end() ? fallback : it->second;
}

int from_hf(const Args& args) {
  TANDEM_CHECK(args.positional.size() == 3, kProgram, " from-hf IN.safetensors ROOT STEP");
  const std::string in = args.positional[0], root = args.positional[1];
  const std::int64_t step = std::stoll(args.positional[2]);
  const NamedTensors hf = read_safetensors(in);
  GPT2Config config = gpt2_config_of_hf(hf, option(args, "heads", 12));
  const long long multiple = option(args, "vocabulary-multiple", 128);
  config.padded_vocabulary = (config.vocabulary + multiple - 1) / multiple * multiple;
  std::vector<ShardEntry> entries;
  for (const auto& [name, tensor] : gpt2_from_hf(hf, config)) {
    ShardEntry e;
    e.name = "model/" + name;
    e.value = tensor.to(DType::f32);
    e.box = tensor.shape();
    entries.push_back(e);
  }
  const auto comm = create_communicator("naive");
  const std::string dir = save_sharded_checkpoint(*comm, root, step, entries, {{"layout", "imported from " + in}});
  std::printf("%s: GPT-2 with %lld layers, %lld wide, %lld heads, context %lld, vocabulary %lld (%lld rows): "
              "%zu tensors of %s -> %s\n"
              "train with: train_gpt2 --init-checkpoint %s --layers %lld --dim %lld --heads %lld --context %lld "
              "--vocabulary-multiple %lld\n",
              kProgram, static_cast<long long>(config.layers), static_cast<long long>(config.dim),
              static_cast<long long>(config.heads), static_cast<long long>(config.context),
              static_cast<long long>(config.vocabulary), static_cast<long long>(config.rows()), entries.size(),
              in.c_str(), dir.c_str(), dir.c_str(), static_cast<long long>(config.layers),
              static_cast<long long>(config.dim), static_cast<long long>(config.heads),
              static_cast<long long>(config.context), multiple);
  return 0;
}

int to_hf(const Args& args) {
  TANDEM_CHECK(args.positional.size() == 2, kProgram, " to-hf DIR OUT.safetensors");
  const std::string dir = args.positional[0], out = args.positional[1];
  const CheckpointManifest m = read_checkpoint_manifest(dir);
  NamedTensors model;
  const std::string prefix = "model/";
  for (const auto& [name, tensor] : m.tensors)
    if (name.rfind(prefix, 0) == 0) model.emplace_back(name.substr(prefix.size()), read_checkpoint_tensor(dir, m, name));
  TANDEM_CHECK(!model.empty(), kProgram, ": ", dir, " holds no model/ tensors");
  GPT2Config config;
  config.heads = option(args, "heads", 12);
  config.vocabulary = option(args, "vocabulary", 50257);
  config.layers = 0;
  for (const auto& [name, tensor] : model) {
    if (name == "wte/W") config.padded_vocabulary = tensor.shape()[0], config.dim = tensor.shape()[1];
    if (name == "wpe/W") config.context = tensor.shape()[0];
    if (name.rfind("h.", 0) == 0 && name.size() > 10 && name.compare(name.size() - 10, 10, "/ln1/gamma") == 0)
      ++config.layers;
  }
  TANDEM_CHECK(config.padded_vocabulary >= config.vocabulary, kProgram, ": wte/W has ", config.padded_vocabulary,
               " rows, fewer than --vocabulary ", config.vocabulary);
  write_safetensors(out, gpt2_to_hf(model, config), {{"format", "pt"}, {"step", std::to_string(m.step)}});
  std::printf("%s: %s (step %lld, %lld layers) -> %s in Hugging Face's GPT-2 names and layout\n", kProgram,
              dir.c_str(), static_cast<long long>(m.step), static_cast<long long>(config.layers), out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string command = argv[1];
  try {
    if (command == "from-hf") return from_hf(parse(argc, argv, {"heads", "vocabulary-multiple"}));
    if (command == "to-hf") return to_hf(parse(argc, argv, {"heads", "vocabulary"}));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return usage();
}
