#include "examples/gpt2/gpt2_hf.h"

#include <cstring>
#include <map>

#include "core/ops/shape_ops.h"

namespace tandem::examples {

namespace {

std::map<std::string, Tensor> by_name(const NamedTensors& tensors) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, tensor] : tensors) out[name.rfind('/', 0) == 0 ? name.substr(1) : name] = tensor;
  return out;
}

const Tensor& take(const std::map<std::string, Tensor>& tensors, const std::string& name, const Shape& shape,
                   const char* side) {
  const auto it = tensors.find(name);
  TANDEM_CHECK(it != tensors.end(), "GPT-2 ", side, " tensors: '", name, "' is missing");
  TANDEM_CHECK(it->second.shape() == shape, "GPT-2 ", side, " tensors: '", name, "' is ", shape_str(it->second.shape()),
               ", expected ", shape_str(shape));
  return it->second;
}

Tensor transposed(const Tensor& x) { return permute(x, {1, 0}); }

// qkv features along the first axis of x: tandem's per head [H, 3, d] <-> GPT-2's [3, H, d].
Tensor regroup(const Tensor& x, std::int64_t heads, bool to_hf) {
  const std::int64_t n = x.shape()[0], d = n / 3 / heads;
  Shape rest(x.shape().begin() + 1, x.shape().end());
  Shape grouped = to_hf ? Shape{heads, 3, d} : Shape{3, heads, d};
  grouped.insert(grouped.end(), rest.begin(), rest.end());
  std::vector<std::int64_t> axes = {1, 0, 2};
  for (std::size_t i = 0; i < rest.size(); ++i) axes.push_back(static_cast<std::int64_t>(3 + i));
  return permute(x.reshape(grouped), axes).reshape(x.shape());
}

}  // namespace

GPT2Config gpt2_config_of_hf(const NamedTensors& hf, std::int64_t heads) {
  const std::map<std::string, Tensor> t = by_name(hf);
  TANDEM_CHECK(t.count("wte.weight") && t.count("wpe.weight"),
               "GPT-2 Hugging Face tensors: wte.weight and "
               "wpe.weight are needed to tell the model's sizes");
  GPT2Config config;
  config.vocabulary = t.at("wte.weight").shape()[0];
  config.dim = t.at("wte.weight").shape()[1];
  config.context = t.at("wpe.weight").shape()[0];
  config.heads = heads;
  config.layers = 0;
  while (t.count("h." + std::to_string(config.layers) + ".ln_1.weight")) ++config.layers;
  TANDEM_CHECK(config.layers > 0, "GPT-2 Hugging Face tensors: no block (h.0.ln_1.weight is missing)");
  return config;
}

NamedTensors gpt2_to_hf(const NamedTensors& tandem, const GPT2Config& config) {
  const std::map<std::string, Tensor> t = by_name(tandem);
  const std::int64_t C = config.dim, V = config.vocabulary, H = config.heads;
  const char* side = "tandem";
  NamedTensors out;
  out.emplace_back("wte.weight", slice(take(t, "wte/W", {config.rows(), C}, side), 0, 0, V));
  out.emplace_back("wpe.weight", take(t, "wpe/W", {config.context, C}, side));
  for (std::int64_t i = 0; i < config.layers; ++i) {
    const std::string h = "h." + std::to_string(i), hf = "h." + std::to_string(i) + ".";
    out.emplace_back(hf + "ln_1.weight", take(t, h + "/ln1/gamma", {C}, side));
    out.emplace_back(hf + "ln_1.bias", take(t, h + "/ln1/beta", {C}, side));
    out.emplace_back(hf + "attn.c_attn.weight",
                     transposed(regroup(take(t, h + "/attention/qkv/W", {3 * C, C}, side), H, true)));
    out.emplace_back(hf + "attn.c_attn.bias", regroup(take(t, h + "/attention/qkv/b", {3 * C}, side), H, true));
    out.emplace_back(hf + "attn.c_proj.weight", transposed(take(t, h + "/attention/proj/W", {C, C}, side)));
    out.emplace_back(hf + "attn.c_proj.bias", take(t, h + "/attention/proj/b", {C}, side));
    out.emplace_back(hf + "ln_2.weight", take(t, h + "/ln2/gamma", {C}, side));
    out.emplace_back(hf + "ln_2.bias", take(t, h + "/ln2/beta", {C}, side));
    out.emplace_back(hf + "mlp.c_fc.weight", transposed(take(t, h + "/mlp/fc1/W", {4 * C, C}, side)));
    out.emplace_back(hf + "mlp.c_fc.bias", take(t, h + "/mlp/fc1/b", {4 * C}, side));
    out.emplace_back(hf + "mlp.c_proj.weight", transposed(take(t, h + "/mlp/fc2/W", {C, 4 * C}, side)));
    out.emplace_back(hf + "mlp.c_proj.bias", take(t, h + "/mlp/fc2/b", {C}, side));
  }
  out.emplace_back("ln_f.weight", take(t, "ln_f/gamma", {C}, side));
  out.emplace_back("ln_f.bias", take(t, "ln_f/beta", {C}, side));
  return out;
}

NamedTensors gpt2_from_hf(const NamedTensors& hf, const GPT2Config& config) {
  const std::map<std::string, Tensor> t = by_name(hf);
  const std::int64_t C = config.dim, V = config.vocabulary, H = config.heads;
  const char* side = "Hugging Face";
  // Every tensor must be used: a name this map does not know is an error, not a silent skip.
  std::map<std::string, bool> used;
  for (const auto& [name, tensor] : t) used[name] = false;
  auto get = [&](const std::string& name, const Shape& shape) -> const Tensor& {
    used[name] = true;
    return take(t, name, shape, side);
  };
  NamedTensors out;
  const Tensor& wte = get("wte.weight", {V, C});
  Tensor table = zeros({config.rows(), C}, wte.dtype());
  index_put_(table, {Index::range(0, V)}, wte);
  out.emplace_back("wte/W", table);
  out.emplace_back("wpe/W", get("wpe.weight", {config.context, C}));
  for (std::int64_t i = 0; i < config.layers; ++i) {
    const std::string h = "h." + std::to_string(i), p = "h." + std::to_string(i) + ".";
    out.emplace_back(h + "/ln1/gamma", get(p + "ln_1.weight", {C}));
    out.emplace_back(h + "/ln1/beta", get(p + "ln_1.bias", {C}));
    out.emplace_back(h + "/attention/qkv/W", regroup(transposed(get(p + "attn.c_attn.weight", {C, 3 * C})), H, false));
    out.emplace_back(h + "/attention/qkv/b", regroup(get(p + "attn.c_attn.bias", {3 * C}), H, false));
    out.emplace_back(h + "/attention/proj/W", transposed(get(p + "attn.c_proj.weight", {C, C})));
    out.emplace_back(h + "/attention/proj/b", get(p + "attn.c_proj.bias", {C}));
    out.emplace_back(h + "/ln2/gamma", get(p + "ln_2.weight", {C}));
    out.emplace_back(h + "/ln2/beta", get(p + "ln_2.bias", {C}));
    out.emplace_back(h + "/mlp/fc1/W", transposed(get(p + "mlp.c_fc.weight", {C, 4 * C})));
    out.emplace_back(h + "/mlp/fc1/b", get(p + "mlp.c_fc.bias", {4 * C}));
    out.emplace_back(h + "/mlp/fc2/W", transposed(get(p + "mlp.c_proj.weight", {4 * C, C})));
    out.emplace_back(h + "/mlp/fc2/b", get(p + "mlp.c_proj.bias", {C}));
    for (const char* buffer : {"attn.bias", "attn.masked_bias"})
      if (t.count(p + buffer)) used[p + buffer] = true;
  }
  out.emplace_back("ln_f/gamma", get("ln_f.weight", {C}));
  out.emplace_back("ln_f/beta", get("ln_f.bias", {C}));
  if (t.count("lm_head.weight")) {
    const Tensor& head = get("lm_head.weight", {V, C});
    TANDEM_CHECK(head.dtype() == wte.dtype() && std::memcmp(head.raw_data(), wte.raw_data(), wte.nbytes()) == 0,
                 "GPT-2 Hugging Face tensors: lm_head.weight "
                 "differs from wte.weight; GPT-2's head is tied to the token embedding");
  }
  for (const auto& [name, was_used] : used)
    TANDEM_CHECK(was_used, "GPT-2 Hugging Face tensors: '", name, "' is not a GPT-2 tensor with ", config.layers,
                 " layers (a different model, or more layers than the config's)");
  return out;
}

}  // namespace tandem::examples
