// examples/gpt2 in one process (gpt2_model.h, gpt2_hf.h): generation with the key/value cache
// against rerunning the window, logits_cached against logits_for, the padded vocabulary's
// invisibility, every parameter's gradient against central differences, the map to and from
// Hugging Face's tensors, a model cut into pipeline stages against the whole, and the errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "core/ops.h"
#include "core/random.h"
#include "examples/gpt2/gpt2_hf.h"
#include "examples/gpt2/gpt2_model.h"

using namespace tandem;
using namespace tandem::examples;
using Catch::Matchers::Contains;

namespace {

// Vocabulary 97 padded to 128, context 16, 16 wide, 4 heads, 2 blocks.
GPT2Config tiny(std::int64_t padded_vocabulary = 128) {
  GPT2Config config;
  config.vocabulary = 97;
  config.padded_vocabulary = padded_vocabulary;
  config.context = 16;
  config.dim = 16;
  config.heads = 4;
  config.layers = 2;
  config.seed = 3;
  return config;
}

std::shared_ptr<GPT2Stage> whole_model(const GPT2Config& config, DType dtype = DType::f64) {
  auto model = std::make_shared<GPT2Stage>(config, 0, 1);
  if (dtype != DType::f32) model->to(dtype);
  return model;
}

std::vector<std::int32_t> random_ids(std::int64_t n, std::int64_t vocabulary, std::uint64_t seed) {
  Generator generator(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (std::int32_t& id : ids)
    id = static_cast<std::int32_t>(generator.next() % static_cast<std::uint64_t>(vocabulary));
  return ids;
}

Tensor ids_tensor(std::int64_t B, std::int64_t T, std::int64_t vocabulary, std::uint64_t seed) {
  return from_vector(random_ids(B * T, vocabulary, seed), {B, T});
}

// Empty when got and want have the same shape and dtype and every element is within
// tol * (1 + |want|) (tol 0: equal); else the first difference.
std::string difference(const Tensor& got, const Tensor& want, double tol) {
  std::ostringstream out;
  out.precision(17);
  if (!got.defined() || !want.defined()) return "undefined tensor";
  if (got.shape() != want.shape() || got.dtype() != want.dtype())
    return got.description() + " vs " + want.description();
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(g[i] - w[i]) <= tol * (1 + std::abs(w[i])))) {
      out << "element " << i << ": " << g[i] << " vs " << w[i];
      return out.str();
    }
  return "";
}

#define REQUIRE_CLOSE(got, want, tol, what)                     \
  do {                                                          \
    const std::string difference_ = difference(got, want, tol); \
    INFO(what << ": " << difference_);                          \
    REQUIRE(difference_.empty());                               \
  } while (0)

std::map<std::string, Tensor> by_name(const NamedTensors& tensors) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, tensor] : tensors) out[name] = tensor;
  return out;
}

NamedTensors values_of(const Link& link) {
  NamedTensors out;
  for (const auto& [name, param] : link.namedparams()) out.emplace_back(name, param.data());
  return out;
}

// The logits of the last position when the model sees the last `context` tokens of ids.
std::vector<double> last_logits(GPT2Stage& model, const std::vector<std::int32_t>& ids) {
  const NoGradGuard no_grad;
  const std::int64_t window = std::min<std::int64_t>(static_cast<std::int64_t>(ids.size()), model.config().context);
  const Tensor x = from_vector(std::vector<std::int32_t>(ids.end() - window, ids.end()), {1, window});
  const Tensor logits = model.logits_for(Variable(x)).data();
  return index(logits, {Index::at(0), Index::at(window - 1)}).to_vector<double>();
}

// How many tokens are more likely than `token` (ties count for the lower id).
std::int64_t rank_of(const std::vector<double>& z, std::int32_t token) {
  std::int64_t rank = 0;
  for (std::size_t j = 0; j < z.size(); ++j)
    rank += z[j] > z[token] || (z[j] == z[token] && static_cast<std::int32_t>(j) < token);
  return rank;
}

}  // namespace

TEST_CASE("gpt2_generate: the cache gives the tokens of rerunning the window, in and past the context", "[gpt2]") {
  const std::vector<std::int32_t> prompt = {5, 17, 42, 3, 96};
  for (DType dtype : {DType::f32, DType::f64}) {
    const auto model = whole_model(tiny(), dtype);
    for (std::int64_t length : {8, 20}) {  // 5 + 8 within the context of 16; 5 + 20 past it
      std::vector<std::int32_t> greedy;
      for (const auto& [temperature, top_k] : {std::pair<double, std::int64_t>{0.0, 0}, {0.9, 5}}) {
        INFO(dtype_name(dtype) << ", " << length << " tokens, temperature " << temperature << ", top_k " << top_k);
        Generator cached_stream(42), rerun_stream(42);
        const auto cached = gpt2_generate(*model, prompt, length, temperature, top_k, cached_stream, true);
        const auto rerun = gpt2_generate(*model, prompt, length, temperature, top_k, rerun_stream, false);
        REQUIRE(static_cast<std::int64_t>(cached.size()) == length);
        REQUIRE(cached == rerun);
        // Against logits_for: greedy takes the most likely token, sampling one of the top 5.
        std::vector<std::int32_t> ids = prompt;
        for (std::int32_t token : cached) {
          REQUIRE(token >= 0);
          REQUIRE(token < 97);
          CHECK(rank_of(last_logits(*model, ids), token) < (temperature > 0 ? top_k : 1));
          ids.push_back(token);
        }
        if (temperature > 0) CHECK(cached != greedy);  // it samples: with these seeds the draw leaves the greedy path
        else greedy = cached;
      }
    }
  }
}

TEST_CASE("logits_cached: one call equals logits_for; two chunks equal one call", "[gpt2]") {
  const GPT2Config config = tiny();
  const auto model = whole_model(config);
  const std::int64_t B = 2, T = 10, d = config.dim / config.heads;
  const Tensor ids = ids_tensor(B, T, config.vocabulary, 7);
  const Tensor whole = model->logits_for(Variable(ids)).data();
  REQUIRE(whole.shape() == Shape{B, T, config.vocabulary});

  GPT2Stage::KVCache cache;
  const Tensor once = model->logits_cached(ids, cache);
  REQUIRE_CLOSE(once, whole, 1e-12, "one call against logits_for");
  REQUIRE(cache.length == T);
  REQUIRE(cache.keys.size() == 2);
  REQUIRE(cache.values.size() == 2);
  for (std::size_t b = 0; b < 2; ++b) {
    CHECK(cache.keys[b].shape() == Shape{B, config.heads, T, d});
    CHECK(cache.values[b].shape() == Shape{B, config.heads, T, d});
  }

  GPT2Stage::KVCache chunked;
  const Tensor first = model->logits_cached(slice(ids, 1, 0, 6).clone(), chunked);
  REQUIRE(chunked.length == 6);
  const Tensor second = model->logits_cached(slice(ids, 1, 6, T).clone(), chunked);
  REQUIRE(chunked.length == T);
  REQUIRE_CLOSE(first, slice(once, 1, 0, 6).clone(), 1e-12, "first chunk");
  REQUIRE_CLOSE(second, slice(once, 1, 6, T).clone(), 1e-12, "second chunk, attending to the cached first");
  for (std::size_t b = 0; b < 2; ++b) {
    REQUIRE_CLOSE(chunked.keys[b], cache.keys[b], 1e-12, "keys of block " << b);
    REQUIRE_CLOSE(chunked.values[b], cache.values[b], 1e-12, "values of block " << b);
  }

  // The cache fills the context exactly; one more position is an error.
  model->logits_cached(ids_tensor(B, 6, config.vocabulary, 8), chunked);
  REQUIRE(chunked.length == config.context);
  REQUIRE_THROWS_WITH(model->logits_cached(ids_tensor(B, 1, config.vocabulary, 9), chunked),
                      Contains("16 cached and 1 new positions exceed the context of 16"));
}

TEST_CASE("A padded vocabulary is invisible: logits, loss and gradients of the unpadded model", "[gpt2]") {
  const std::int64_t V = 97;
  const auto plain = whole_model(tiny(0)), padded = whole_model(tiny(128));
  const auto plain_params = by_name(values_of(*plain)), padded_params = by_name(values_of(*padded));
  REQUIRE(plain_params.size() == padded_params.size());
  REQUIRE(padded_params.at("wte/W").shape() == Shape{128, 16});
  REQUIRE(plain_params.at("wte/W").shape() == Shape{V, 16});
  // The same stream: the unpadded table is the padded one's first rows, the rest the same.
  for (const auto& [name, value] : plain_params)
    REQUIRE_CLOSE(name == "wte/W" ? padded_params.at(name).slice_rows(0, V).clone() : padded_params.at(name), value, 0,
                  name);

  const Tensor ids = ids_tensor(3, 12, V, 11), targets = ids_tensor(3, 12, V, 12);
  REQUIRE_CLOSE(padded->logits_for(Variable(ids)).data(), plain->logits_for(Variable(ids)).data(), 1e-12, "logits_for");

  const Variable plain_loss = plain->forward_many({Variable(ids), Variable(targets)})[0];
  const Variable padded_loss = padded->forward_many({Variable(ids), Variable(targets)})[0];
  REQUIRE(plain_loss.shape() == Shape{});
  REQUIRE(std::abs(padded_loss.data().item() - plain_loss.data().item()) <= 1e-12);
  CHECK(std::abs(plain_loss.data().item() - std::log(97.0)) < 0.1);  // GPT-2's small weights: near uniform
  CHECK(padded->observation().at("loss") == padded_loss.data().item());

  plain_loss.backward();
  padded_loss.backward();
  for (const auto& [name, param] : padded->namedparams()) {
    Variable plain_param;
    for (const auto& [other, p] : plain->namedparams())
      if (other == name) plain_param = p;
    REQUIRE(plain_param.defined());
    REQUIRE(plain_param.grad().defined());
    if (name == "wte/W") {
      REQUIRE_CLOSE(param.grad().slice_rows(0, V).clone(), plain_param.grad(), 1e-12, "wte's gradient, real rows");
      REQUIRE_CLOSE(param.grad().slice_rows(V, 128).clone(), zeros({128 - V, 16}, DType::f64), 0,
                    "wte's gradient, padded rows");
    } else {
      REQUIRE_CLOSE(param.grad(), plain_param.grad(), 1e-12, name << "'s gradient");
    }
  }
}

TEST_CASE("GPT2Stage's gradients against central differences (f64)", "[gpt2]") {
  for (std::int64_t padded : {0, 16}) {
    INFO("padded_vocabulary " << padded);
    GPT2Config config;
    config.vocabulary = 11;
    config.padded_vocabulary = padded;
    config.context = 4;
    config.dim = 8;
    config.heads = 2;
    config.layers = 1;
    config.seed = 5;
    const auto model = whole_model(config);
    // Every parameter's own slot in its link, so the checker's variables can be put in their place.
    std::vector<Variable*> params;
    for (const auto& [path, value] : model->namedparams()) {
      const auto slash = path.rfind('/');
      Link* owner = model.get();
      std::stringstream parts(path.substr(0, slash));
      for (std::string part; std::getline(parts, part, '/');) owner = static_cast<Chain*>(owner)->child(part).get();
      params.push_back(&owner->param(path.substr(slash + 1)));
    }
    REQUIRE(params.size() == 16);  // wte, wpe, 12 in the block, ln_f's 2
    // Weights away from GPT-2's small initialisation (and LayerNorms away from 1 and 0), so every
    // path carries a sizeable gradient.
    Generator noise(9);
    for (Variable* p : params) p->set_data(add(p->data(), rand_uniform(p->shape(), noise, -0.3, 0.3, DType::f64)));

    std::vector<Tensor> inputs = {ids_tensor(2, 3, 11, 1), ids_tensor(2, 3, 11, 2)};
    for (Variable* p : params) inputs.push_back(p->data().clone());
    GradcheckOptions options;
    options.eps = 1e-5;
    options.rtol = 1e-6;
    options.atol = 1e-10;
    const GradcheckResult result = gradcheck(
        [&](const Variables& xs) -> Variables {
          for (std::size_t i = 0; i < params.size(); ++i) *params[i] = xs[i + 2];
          return model->forward_many({xs[0], xs[1]});
        },
        inputs, options);
    INFO(result.report);
    REQUIRE(result.ok);
    // The checker's variables were used (a parameter it could not reach would pass with no
    // gradient and zero differences): every one gets a gradient that is not zero.
    Variables leaves = {Variable(inputs[0]), Variable(inputs[1])};
    for (std::size_t i = 2; i < inputs.size(); ++i) leaves.emplace_back(inputs[i], true);
    for (std::size_t i = 0; i < params.size(); ++i) *params[i] = leaves[i + 2];
    model->forward_many({leaves[0], leaves[1]})[0].backward();
    for (std::size_t i = 2; i < leaves.size(); ++i) {
      REQUIRE(leaves[i].grad().defined());
      CHECK(sum_of_squares(leaves[i].grad()) > 1e-8);
    }
  }
}

TEST_CASE("gpt2_to_hf and gpt2_from_hf: the round trip is the identity; gpt2_config_of_hf the sizes", "[gpt2][hf]") {
  for (std::int64_t padded : {0, 128}) {
    INFO("padded_vocabulary " << padded);
    const GPT2Config config = tiny(padded);
    const auto model = whole_model(config, DType::f32);
    const NamedTensors params = values_of(*model);
    REQUIRE(params.front().first == "wte/W");  // namedparams' names have no leading '/'
    const NamedTensors hf = gpt2_to_hf(params, config);
    REQUIRE(hf.size() == 2 + 12 * 2 + 2);
    const auto hf_by_name = by_name(hf);
    REQUIRE(hf.front().first == "wte.weight");
    CHECK(hf_by_name.at("wte.weight").shape() == Shape{97, 16});
    CHECK(hf_by_name.at("wpe.weight").shape() == Shape{16, 16});
    CHECK(hf_by_name.at("h.1.attn.c_attn.weight").shape() == Shape{16, 48});
    CHECK(hf_by_name.at("h.1.mlp.c_fc.weight").shape() == Shape{16, 64});
    CHECK(hf_by_name.at("h.1.mlp.c_proj.weight").shape() == Shape{64, 16});
    // Conv1D's weight is [in, out]: tandem's Linear W transposed.
    const auto tandem_by_name = by_name(params);
    REQUIRE_CLOSE(hf_by_name.at("h.0.attn.c_proj.weight"), permute(tandem_by_name.at("h.0/attention/proj/W"), {1, 0}),
                  0, "c_proj");
    REQUIRE_CLOSE(hf_by_name.at("h.1.mlp.c_fc.weight"), permute(tandem_by_name.at("h.1/mlp/fc1/W"), {1, 0}), 0, "c_fc");

    const NamedTensors back = gpt2_from_hf(hf, config);
    REQUIRE(back.size() == params.size());
    const auto back_by_name = by_name(back);
    REQUIRE(back_by_name.size() == params.size());
    for (const auto& [name, value] : params) {
      INFO(name);
      REQUIRE(back_by_name.count(name) == 1);
      if (name == "wte/W" && padded > 0) {
        REQUIRE_CLOSE(back_by_name.at(name).slice_rows(0, 97).clone(), value.slice_rows(0, 97).clone(), 0, name);
        REQUIRE_CLOSE(back_by_name.at(name).slice_rows(97, 128).clone(), zeros({31, 16}), 0, "padded rows");
      } else {
        REQUIRE_CLOSE(back_by_name.at(name), value, 0, name);
      }
    }

    // A leading '/' on tandem's names is ignored.
    NamedTensors rooted;
    for (const auto& [name, value] : params) rooted.emplace_back("/" + name, value);
    const NamedTensors from_rooted = gpt2_to_hf(rooted, config);
    REQUIRE(from_rooted.size() == hf.size());
    for (std::size_t i = 0; i < hf.size(); ++i) {
      REQUIRE(from_rooted[i].first == hf[i].first);
      REQUIRE_CLOSE(from_rooted[i].second, hf[i].second, 0, hf[i].first);
    }

    const GPT2Config recovered = gpt2_config_of_hf(hf, 4);
    CHECK(recovered.vocabulary == 97);
    CHECK(recovered.padded_vocabulary == 0);
    CHECK(recovered.context == 16);
    CHECK(recovered.dim == 16);
    CHECK(recovered.heads == 4);
    CHECK(recovered.layers == 2);
  }
}

TEST_CASE("gpt2_from_hf regroups c_attn: every head's q, k, v from GPT-2's all q, all k, all v", "[gpt2][hf]") {
  const GPT2Config config = tiny(0);
  const std::int64_t C = 16, H = 4, d = 4;
  NamedTensors hf = gpt2_to_hf(values_of(*whole_model(config, DType::f32)), config);
  // Column j of c_attn.weight, and element j of c_attn.bias, hold j.
  std::vector<float> columns(static_cast<std::size_t>(C * 3 * C)), bias(static_cast<std::size_t>(3 * C));
  for (std::int64_t r = 0; r < C; ++r)
    for (std::int64_t j = 0; j < 3 * C; ++j) columns[static_cast<std::size_t>(r * 3 * C + j)] = static_cast<float>(j);
  for (std::int64_t j = 0; j < 3 * C; ++j) bias[static_cast<std::size_t>(j)] = static_cast<float>(j);
  for (auto& [name, value] : hf) {
    if (name == "h.1.attn.c_attn.weight") value = from_vector(columns, {C, 3 * C});
    if (name == "h.1.attn.c_attn.bias") value = from_vector(bias, {3 * C});
  }
  const auto tandem = by_name(gpt2_from_hf(hf, config));
  const std::vector<float> W = tandem.at("h.1/attention/qkv/W").to_vector<float>();
  const std::vector<float> b = tandem.at("h.1/attention/qkv/b").to_vector<float>();
  REQUIRE(tandem.at("h.1/attention/qkv/W").shape() == Shape{3 * C, C});
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t s = 0; s < 3; ++s)  // q, k, v
      for (std::int64_t i = 0; i < d; ++i) {
        const std::int64_t row = h * 3 * d + s * d + i;
        const float hf_column = static_cast<float>(s * C + h * d + i);
        INFO("head " << h << ", part " << s << ", feature " << i);
        for (std::int64_t c = 0; c < C; ++c) REQUIRE(W[static_cast<std::size_t>(row * C + c)] == hf_column);
        REQUIRE(b[static_cast<std::size_t>(row)] == hf_column);
      }
  // And back.
  NamedTensors tandem_named;
  for (const auto& [name, value] : tandem) tandem_named.emplace_back(name, value);
  const auto again = by_name(gpt2_to_hf(tandem_named, config));
  REQUIRE_CLOSE(again.at("h.1.attn.c_attn.weight"), from_vector(columns, {C, 3 * C}), 0, "c_attn.weight");
  REQUIRE_CLOSE(again.at("h.1.attn.c_attn.bias"), from_vector(bias, {3 * C}), 0, "c_attn.bias");
}

TEST_CASE("gpt2_from_hf and gpt2_to_hf: errors name the tensor; the tied head and mask buffers load", "[gpt2][hf]") {
  const GPT2Config config = tiny(0);
  const NamedTensors params = values_of(*whole_model(config, DType::f32));
  const NamedTensors hf = gpt2_to_hf(params, config);
  const Tensor wte = by_name(hf).at("wte.weight");
  auto without = [](NamedTensors tensors, const std::string& name) {
    NamedTensors out;
    for (auto& entry : tensors)
      if (entry.first != name) out.push_back(entry);
    return out;
  };
  auto with = [&](NamedTensors tensors, const std::string& name, const Tensor& value) {
    tensors = without(tensors, name);
    tensors.emplace_back(name, value);
    return tensors;
  };

  // Hugging Face's own extras: the tied head equal to wte, the causal-mask buffers.
  NamedTensors full = with(hf, "lm_head.weight", wte.clone());
  full = with(full, "h.0.attn.bias", ones({1, 1, 16, 16}));
  full = with(full, "h.1.attn.masked_bias", scalar_tensor(-1e4));
  const auto plain = by_name(gpt2_from_hf(hf, config)), loaded = by_name(gpt2_from_hf(full, config));
  REQUIRE(loaded.size() == plain.size());
  for (const auto& [name, value] : plain) REQUIRE_CLOSE(loaded.at(name), value, 0, name);

  CHECK_THROWS_WITH(gpt2_from_hf(without(hf, "h.1.mlp.c_fc.bias"), config), Contains("'h.1.mlp.c_fc.bias' is missing"));
  CHECK_THROWS_WITH(gpt2_from_hf(with(hf, "wpe.weight", zeros({15, 16})), config),
                    Contains("'wpe.weight' is [15, 16], expected [16, 16]"));
  CHECK_THROWS_WITH(gpt2_from_hf(with(hf, "h.2.ln_1.weight", ones({16})), config),
                    Contains("'h.2.ln_1.weight' is not a GPT-2 tensor with 2 layers"));
  CHECK_THROWS_WITH(gpt2_from_hf(with(hf, "score.weight", ones({2, 16})), config),
                    Contains("'score.weight' is not a GPT-2 tensor"));
  Tensor other_head = wte.clone();
  other_head.data<float>()[5] += 1.0f;
  CHECK_THROWS_WITH(gpt2_from_hf(with(hf, "lm_head.weight", other_head), config),
                    Contains("lm_head.weight differs from wte.weight"));
  // Exact in the tensors' own dtype: an f64 head 1e-12 away from wte is not the tied head.
  NamedTensors hf64;
  for (const auto& [name, value] : hf) hf64.emplace_back(name, value.to(DType::f64));
  Tensor near_head = by_name(hf64).at("wte.weight").clone();
  near_head.data<double>()[5] += 1e-12;
  CHECK_THROWS_WITH(gpt2_from_hf(with(hf64, "lm_head.weight", near_head), config),
                    Contains("lm_head.weight differs from wte.weight"));
  CHECK_THROWS_WITH(gpt2_from_hf(with(hf, "lm_head.weight", zeros({96, 16})), config),
                    Contains("'lm_head.weight' is [96, 16]"));

  CHECK_THROWS_WITH(gpt2_to_hf(without(params, "h.0/ln2/beta"), config), Contains("'h.0/ln2/beta' is missing"));
  CHECK_THROWS_WITH(gpt2_to_hf(with(params, "h.1/attention/qkv/W", zeros({16, 48})), config),
                    Contains("'h.1/attention/qkv/W' is [16, 48], expected [48, 16]"));
  CHECK_THROWS_WITH(gpt2_config_of_hf(without(hf, "wpe.weight"), 4), Contains("wpe.weight"));
}

TEST_CASE("make_gpt2_stages: two stages run by hand equal the whole model", "[gpt2][pipeline]") {
  GPT2Config config = tiny();
  config.layers = 3;  // stage 0 takes the extra block
  const std::vector<LinkPtr> stages = make_gpt2_stages(config, 2, 1, 0, nullptr);
  REQUIRE(stages.size() == 2);
  const auto first = std::dynamic_pointer_cast<GPT2Stage>(stages[0]);
  const auto last = std::dynamic_pointer_cast<GPT2Stage>(stages[1]);
  REQUIRE(first);
  REQUIRE(last);
  CHECK((first->first() && !first->last() && first->first_block() == 0 && first->blocks() == 2));
  CHECK((!last->first() && last->last() && last->first_block() == 2 && last->blocks() == 1));
  // The last stage's copy of wte is stage 0's, drawn from the same stream.
  REQUIRE(first->embedding_table() != nullptr);
  REQUIRE(last->embedding_table() != nullptr);
  REQUIRE_CLOSE(last->embedding_table()->data(), first->embedding_table()->data(), 0, "the tied copy of wte");
  const auto first_params = by_name(values_of(*first)), last_params = by_name(values_of(*last));
  CHECK(first_params.count("wpe/W") == 1);
  CHECK(first_params.count("h.1/ln1/gamma") == 1);
  CHECK(first_params.count("ln_f/gamma") == 0);
  CHECK(last_params.count("wpe/W") == 0);
  CHECK(last_params.count("h.2/mlp/fc2/W") == 1);
  CHECK(last_params.count("ln_f/beta") == 1);

  first->to(DType::f64);
  last->to(DType::f64);
  const auto whole = whole_model(config);
  const auto whole_params = by_name(values_of(*whole));
  for (const auto& stage : {first, last})
    for (const auto& [name, value] : values_of(*stage)) REQUIRE_CLOSE(value, whole_params.at(name), 0, name);

  const Tensor ids = ids_tensor(2, 9, config.vocabulary, 21), targets = ids_tensor(2, 9, config.vocabulary, 22);
  const Variable h = first->forward_many({Variable(ids)})[0];
  REQUIRE(h.shape() == Shape{2, 9, 16});
  const Variable received(h.data(), true);
  const Variable loss = last->forward_many({received, Variable(targets)})[0];
  const Variable whole_loss = whole->forward_many({Variable(ids), Variable(targets)})[0];
  REQUIRE(loss.data().item() == whole_loss.data().item());

  loss.backward();
  h.backward(received.grad());
  whole_loss.backward();
  std::map<std::string, Tensor> whole_grads;
  for (const auto& [name, param] : whole->namedparams()) whole_grads[name] = param.grad();
  for (const auto& stage : {first, last})
    for (const auto& [name, param] : stage->namedparams())
      if (name != "wte/W") REQUIRE_CLOSE(param.grad(), whole_grads.at(name), 1e-12, name << "'s gradient");
  // The tied copies' gradients add up to the one table's.
  REQUIRE_CLOSE(add(first->embedding_table()->grad(), last->embedding_table()->grad()), whole_grads.at("wte/W"), 1e-12,
                "wte's gradient, both copies");
}

TEST_CASE("GPT2Config::parameters: the whole model's, the tied head once", "[gpt2]") {
  CHECK(GPT2Config::small().parameters() == 124439808);
  for (std::int64_t padded : {0, 128}) {
    INFO("padded_vocabulary " << padded);
    const GPT2Config config = tiny(padded);
    CHECK(whole_model(config, DType::f32)->count_params() == config.parameters());
    std::int64_t staged = 0;
    for (const LinkPtr& stage : make_gpt2_stages(config, 2, 1, 0, nullptr)) staged += stage->count_params();
    CHECK(staged == config.parameters() + config.rows() * config.dim);  // the last stage's copy of wte
  }
}

TEST_CASE("GPT2Stage and gpt2_generate: errors name the problem", "[gpt2]") {
  GPT2Config config = tiny();
  config.heads = 3;
  CHECK_THROWS_WITH(GPT2Stage(config, 0, 1), Contains("dim 16 must be a multiple of heads 3"));
  config = tiny();
  CHECK_THROWS_WITH(GPT2Stage(config, 0, 3), Contains("stage 0 of 3 with 2 block(s): every stage needs a block"));
  CHECK_THROWS_WITH(make_gpt2_stages(config, 3, 1, 0, nullptr), Contains("every stage needs a block"));
  CHECK_THROWS_WITH(GPT2Stage(tiny(50), 0, 1), Contains("padded_vocabulary 50 is smaller than the vocabulary 97"));

  const auto model = whole_model(tiny());
  const Tensor long_ids = ids_tensor(1, 17, 97, 1);
  CHECK_THROWS_WITH(model->forward_many({Variable(long_ids), Variable(long_ids)}),
                    Contains("ids must be [B, T] with T <= 16"));
  CHECK_THROWS_WITH(model->logits_for(Variable(long_ids)), Contains("max_length 16"));
  GPT2Stage::KVCache cache;
  CHECK_THROWS_WITH(model->logits_cached(long_ids, cache), Contains("exceed the context of 16"));
  CHECK_THROWS_WITH(model->forward_many({Variable(ids_tensor(1, 4, 97, 2))}), Contains("takes 2 input"));

  Generator generator(1);
  CHECK_THROWS_WITH(gpt2_generate(*model, {}, 3, 0, 0, generator), Contains("at least one token"));
  const auto stages = make_gpt2_stages(tiny(), 2, 1, 0, nullptr);
  auto& first = static_cast<GPT2Stage&>(*stages[0]);
  CHECK_THROWS_WITH(first.logits_for(Variable(ids_tensor(1, 4, 97, 3))),
                    Contains("needs the whole model in one stage"));
  CHECK_THROWS_WITH(first.forward_many({Variable(ids_tensor(1, 4, 97, 3)), Variable(ids_tensor(1, 4, 97, 3))}),
                    Contains("takes 1 input"));
}
