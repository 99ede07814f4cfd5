// libtorch_char_lm.cpp - an independent LibTorch 1.13 implementation of examples/lm's character
// language model, checked against the logits tandem computes (bench/char_lm_logits.cc) from the
// same weights. bench/libtorch_char_lm.sh builds and runs it end to end.
//
//   libtorch_char_lm MODEL.safetensors LOGITS.safetensors --heads H [--tolerance R]
//
// MODEL.safetensors: the weights as `tools/checkpoint to-safetensors` exports a checkpoint of
// train_char_lm (names token/W, position/W, block<b>/{ln1,attention/qkv,attention/proj,ln2,
// mlp/fc1,mlp/fc2}/..., norm/{gamma,beta}, head/{W,b}). LOGITS.safetensors: "ids" (I32 or I64
// [B, T]) and tandem's "logits" (F32 [B, T, V]). Both files are read here (an 8-byte
// little-endian header length, a JSON header, raw little-endian data), without tandem's code.
//
// The model, a GPT-2-style decoder as the char LM's documentation defines it:
//   h = token_embedding[ids] + position_embedding[0:T]
//   per block:  h = h + proj(attention(qkv(ln1(h))));  h = h + fc2(gelu_tanh(fc1(ln2(h))))
//   logits = head(norm(h))
// LayerNorms with eps 1e-5 and affine gamma/beta; Linear W is [out, in] (y = x W^T + b, as
// torch::nn::Linear); causal attention softmax(q k^T / sqrt(d) + mask) v over H heads of
// d = dim / H features, qkv packed per head (Megatron-LM's layout): qkv's output features
// [h * 3d, h * 3d + 3d) are head h's q, k, v (d each); the heads' outputs side by side before
// proj. GELU in its tanh form (GPT-2's). The depth, widths, context and vocabulary come from the
// weights' shapes; only the number of heads is given.
//
// The check: the model runs in f32 (as tandem did) and in f64 (the same f32 weights, widened).
// It prints the largest |tandem - libtorch f32| and |tandem - libtorch f64| and, for scale, the
// f32 rounding of LibTorch's own f32 run (|libtorch f32 - libtorch f64|), each relative to the
// largest |logit| (the f64 run's): an elementwise relative error means nothing for logits near
// zero, and every logit's rounding error is of the order of eps_f32 times the magnitudes that
// flowed into it, not of its own value. It fails (exit 1) when the larger of the two differences
// of tandem's logits, over max |logit|, exceeds the tolerance (default 1e-5; see
// bench/libtorch_char_lm.sh for why), or when a weight is missing, unused or of the wrong shape.
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// ---------------------------------------------------------------------------------------------
// safetensors

struct SafeTensors {
  std::map<std::string, torch::Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

SafeTensors read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8) throw std::runtime_error(path + ": shorter than the 8-byte header length");
  std::uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | static_cast<unsigned char>(bytes[i]);
  if (header_length > bytes.size() - 8) throw std::runtime_error(path + ": header length beyond the file");
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_length));
  const std::size_t data_begin = 8 + header_length, data_bytes = bytes.size() - data_begin;

  SafeTensors out;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      for (const auto& [key, value] : entry.items()) out.metadata[key] = value.get<std::string>();
      continue;
    }
    const std::string dtype = entry.at("dtype").get<std::string>();
    torch::ScalarType type;
    std::size_t element = 0;
    if (dtype == "F32") type = torch::kFloat32, element = 4;
    else if (dtype == "F64") type = torch::kFloat64, element = 8;
    else if (dtype == "I32") type = torch::kInt32, element = 4;
    else if (dtype == "I64") type = torch::kInt64, element = 8;
    else throw std::runtime_error(path + ": tensor " + name + " has dtype " + dtype + " (F32, F64, I32, I64 only)");
    std::vector<std::int64_t> shape = entry.at("shape").get<std::vector<std::int64_t>>();
    const auto offsets = entry.at("data_offsets").get<std::vector<std::uint64_t>>();
    std::uint64_t count = 1;
    for (std::int64_t extent : shape) count *= static_cast<std::uint64_t>(extent);
    if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_bytes ||
        offsets[1] - offsets[0] != count * element)
      throw std::runtime_error(path + ": tensor " + name + "'s data_offsets do not fit its shape and the file");
    // x86-64 is little-endian, as the format: the bytes are the values.
    torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(type));
    std::memcpy(t.data_ptr(), bytes.data() + data_begin + offsets[0], offsets[1] - offsets[0]);
    out.tensors.emplace(name, t);
  }
  return out;
}

// The weights by name; every one must be taken exactly once, with the expected shape.
class Weights {
 public:
  explicit Weights(std::map<std::string, torch::Tensor> tensors) : tensors_(std::move(tensors)) {}
  torch::Tensor shape_of(const std::string& name) const { return find(name); }
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  void load(torch::Tensor& parameter, const std::string& name) {
    const torch::Tensor& value = find(name);
    if (value.sizes() != parameter.sizes())
      throw std::runtime_error("weight " + name + " is " + shape(value) + ", the model's parameter " +
                               shape(parameter));
    if (!used_.insert(name).second) throw std::runtime_error("weight " + name + " loaded twice");
    torch::NoGradGuard no_grad;
    parameter.copy_(value);
  }
  void check_all_used() const {
    for (const auto& [name, value] : tensors_)
      if (!used_.count(name)) throw std::runtime_error("weight " + name + " " + shape(value) + " is not the model's");
  }

 private:
  const torch::Tensor& find(const std::string& name) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) throw std::runtime_error("no weight " + name + " in the model's safetensors file");
    return it->second;
  }
  static std::string shape(const torch::Tensor& t) {
    std::string s = "[";
    for (std::int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
    return s + "]";
  }
  std::map<std::string, torch::Tensor> tensors_;
  std::set<std::string> used_;
};

// ---------------------------------------------------------------------------------------------
// the model

struct CausalSelfAttentionImpl : torch::nn::Module {
  CausalSelfAttentionImpl(std::int64_t dim, std::int64_t heads)
      : heads(heads),
        head_dim(dim / heads),
        qkv(register_module("qkv", torch::nn::Linear(dim, 3 * dim))),
        proj(register_module("proj", torch::nn::Linear(dim, dim))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const std::int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    // [B, T, H, 3, d]: head h's q, k and v side by side in its 3d features.
    const torch::Tensor packed = qkv(x).view({B, T, heads, 3, head_dim});
    const torch::Tensor q = packed.select(3, 0).transpose(1, 2);  // [B, H, T, d]
    const torch::Tensor k = packed.select(3, 1).transpose(1, 2);
    const torch::Tensor v = packed.select(3, 2).transpose(1, 2);
    torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
    const torch::Tensor future =
        torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool)).triu(1);  // key j > query i
    scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
    const torch::Tensor y = torch::matmul(torch::softmax(scores, -1), v);  // [B, H, T, d]
    return proj(y.transpose(1, 2).contiguous().view({B, T, C}));
  }

  void load(Weights& w, const std::string& prefix) {
    w.load(qkv->weight, prefix + "qkv/W");
    w.load(qkv->bias, prefix + "qkv/b");
    w.load(proj->weight, prefix + "proj/W");
    w.load(proj->bias, prefix + "proj/b");
  }

  std::int64_t heads, head_dim;
  torch::nn::Linear qkv, proj;
};
TORCH_MODULE(CausalSelfAttention);

void load_layer_norm(torch::nn::LayerNorm& norm, Weights& w, const std::string& prefix) {
  w.load(norm->weight, prefix + "gamma");
  w.load(norm->bias, prefix + "beta");
}

constexpr double kLayerNormEps = 1e-5;

struct BlockImpl : torch::nn::Module {
  BlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t hidden)
      : ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(kLayerNormEps)))),
        attention(register_module("attention", CausalSelfAttention(dim, heads))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(kLayerNormEps)))),
        fc1(register_module("fc1", torch::nn::Linear(dim, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, dim))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = x + attention(ln1(x));
    return x + fc2(torch::gelu(fc1(ln2(x)), "tanh"));
  }

  void load(Weights& w, const std::string& prefix) {
    load_layer_norm(ln1, w, prefix + "ln1/");
    attention->load(w, prefix + "attention/");
    load_layer_norm(ln2, w, prefix + "ln2/");
    w.load(fc1->weight, prefix + "mlp/fc1/W");
    w.load(fc1->bias, prefix + "mlp/fc1/b");
    w.load(fc2->weight, prefix + "mlp/fc2/W");
    w.load(fc2->bias, prefix + "mlp/fc2/b");
  }

  torch::nn::LayerNorm ln1;
  CausalSelfAttention attention;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Block);

struct CharLMConfig {
  std::int64_t vocabulary, context, dim, heads, layers, hidden;
};

struct CharLMImpl : torch::nn::Module {
  explicit CharLMImpl(const CharLMConfig& c)
      : token(register_module("token", torch::nn::Embedding(c.vocabulary, c.dim))),
        position(register_module("position", torch::nn::Embedding(c.context, c.dim))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim}).eps(kLayerNormEps)))),
        head(register_module("head", torch::nn::Linear(c.dim, c.vocabulary))) {
    for (std::int64_t b = 0; b < c.layers; ++b)
      blocks.push_back(register_module("block" + std::to_string(b), Block(c.dim, c.heads, c.hidden)));
  }

  torch::Tensor forward(const torch::Tensor& ids) {  // ids int64 [B, T] -> logits [B, T, V]
    const std::int64_t T = ids.size(1);
    torch::Tensor h = token(ids) + position(torch::arange(T, torch::TensorOptions().dtype(torch::kInt64)));
    for (Block& block : blocks) h = block(h);
    return head(norm(h));
  }

  void load(Weights& w) {
    w.load(token->weight, "token/W");
    w.load(position->weight, "position/W");
    for (std::size_t b = 0; b < blocks.size(); ++b) blocks[b]->load(w, "block" + std::to_string(b) + "/");
    load_layer_norm(norm, w, "norm/");
    w.load(head->weight, "head/W");
    w.load(head->bias, "head/b");
    w.check_all_used();
  }

  torch::nn::Embedding token, position;
  std::vector<Block> blocks;
  torch::nn::LayerNorm norm;
  torch::nn::Linear head;
};
TORCH_MODULE(CharLM);

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

int run(int argc, char** argv) {
  std::vector<std::string> positional;
  std::int64_t heads = 0;
  double tolerance = 1e-5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--heads" && i + 1 < argc) heads = std::stoll(argv[++i]);
    else if (arg == "--tolerance" && i + 1 < argc) tolerance = std::stod(argv[++i]);
    else positional.push_back(arg);
  }
  if (positional.size() != 2 || heads <= 0) {
    std::fprintf(stderr, "usage: libtorch_char_lm MODEL.safetensors LOGITS.safetensors --heads H [--tolerance R]\n");
    return 2;
  }
  torch::manual_seed(0);  // the parameters' initial values are all overwritten; fixed anyway

  SafeTensors model_file = read_safetensors(positional[0]);
  const SafeTensors logits_file = read_safetensors(positional[1]);
  Weights weights(model_file.tensors);

  CharLMConfig c{};
  const torch::Tensor token_w = weights.shape_of("token/W"), position_w = weights.shape_of("position/W");
  c.vocabulary = token_w.size(0);
  c.dim = token_w.size(1);
  c.context = position_w.size(0);
  c.heads = heads;
  while (weights.has("block" + std::to_string(c.layers) + "/ln1/gamma")) ++c.layers;
  c.hidden = c.layers > 0 ? weights.shape_of("block0/mlp/fc1/W").size(0) : 4 * c.dim;
  if (c.layers == 0 || c.dim % c.heads != 0)
    throw std::runtime_error("no blocks in the weights, or dim " + std::to_string(c.dim) + " not a multiple of " +
                             std::to_string(c.heads) + " heads");

  const auto ids_it = logits_file.tensors.find("ids"), logits_it = logits_file.tensors.find("logits");
  if (ids_it == logits_file.tensors.end() || logits_it == logits_file.tensors.end())
    throw std::runtime_error(positional[1] + " must hold \"ids\" and \"logits\"");
  const torch::Tensor ids = ids_it->second.to(torch::kInt64);
  const torch::Tensor tandem = logits_it->second;
  if (ids.dim() != 2 || ids.size(1) > c.context || ids.min().item<std::int64_t>() < 0 ||
      ids.max().item<std::int64_t>() >= c.vocabulary)
    throw std::runtime_error("ids must be [B, T <= context] in [0, vocabulary)");
  const std::int64_t B = ids.size(0), T = ids.size(1), V = c.vocabulary;
  if (tandem.scalar_type() != torch::kFloat32 || tandem.sizes() != torch::IntArrayRef({B, T, V}))
    throw std::runtime_error("tandem's logits must be F32 [B, T, V] = [" + std::to_string(B) + ", " +
                             std::to_string(T) + ", " + std::to_string(V) + "]");

  CharLM model(c);
  model->load(weights);
  model->eval();
  torch::Tensor f32, f64;
  {
    torch::NoGradGuard no_grad;
    f32 = model->forward(ids);
    model->to(torch::kFloat64);
    f64 = model->forward(ids);
  }

  const double scale = max_abs(f64);
  const double tandem_vs_f32 = max_abs(tandem.to(torch::kFloat64) - f32.to(torch::kFloat64));
  const double tandem_vs_f64 = max_abs(tandem.to(torch::kFloat64) - f64);
  const double torch_rounding = max_abs(f32.to(torch::kFloat64) - f64);
  const double worst = std::max(tandem_vs_f32, tandem_vs_f64), relative = worst / scale;
  const bool pass = std::isfinite(relative) && relative <= tolerance;
  std::printf("model: %lld blocks x %lld wide, %lld heads (d %lld), MLP %lld, context %lld, vocabulary %lld\n",
              static_cast<long long>(c.layers), static_cast<long long>(c.dim), static_cast<long long>(c.heads),
              static_cast<long long>(c.dim / c.heads), static_cast<long long>(c.hidden),
              static_cast<long long>(c.context), static_cast<long long>(c.vocabulary));
  std::printf("max |logit| %.6g (libtorch f64); argmax agreement tandem vs libtorch f64: %lld of %lld positions\n",
              scale, static_cast<long long>(tandem.argmax(-1).eq(f64.argmax(-1)).sum().item<std::int64_t>()),
              static_cast<long long>(B * T));
  std::printf("max |tandem f32 - libtorch f32|   %.3e  (relative to max |logit| %.3e)\n", tandem_vs_f32,
              tandem_vs_f32 / scale);
  std::printf("max |tandem f32 - libtorch f64|   %.3e  (relative %.3e)\n", tandem_vs_f64, tandem_vs_f64 / scale);
  std::printf("max |libtorch f32 - libtorch f64| %.3e  (relative %.3e): LibTorch's own f32 rounding\n", torch_rounding,
              torch_rounding / scale);
  std::printf("libtorch_char_lm: max |diff| %.3e relative %.3e (tolerance %.0e) over %lld x %lld x %lld logits: %s\n",
              worst, relative, tolerance, static_cast<long long>(B), static_cast<long long>(T),
              static_cast<long long>(V), pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "libtorch_char_lm: %s\n", error.what());
    return 1;
  }
}
