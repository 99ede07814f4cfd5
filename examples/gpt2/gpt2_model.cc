#include "examples/gpt2/gpt2_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "comm/tensor_parallel/parallel_region.h"
#include "comm/tensor_parallel/parallel_transformer.h"
#include "comm/tensor_parallel/vocab_parallel_cross_entropy.h"
#include "comm/tensor_parallel/vocab_parallel_embedding.h"
#include "core/ops/elementwise.h"
#include "core/ops/shape_ops.h"
#include "layers/initializers.h"
#include "layers/links/embed_id.h"
#include "layers/links/layer_normalization.h"
#include "layers/links/linear.h"
#include "layers/links/multi_head_attention.h"
#include "layers/links/positional_embedding.h"
#include "layers/links/transformer.h"

namespace tandem::examples {

namespace F = functions;

namespace {

constexpr double kInitStd = 0.02;  // GPT-2's initializer_range

// The seed of layer `index`'s initialiser: blocks 0 .. layers - 1, then wte and wpe, so no two
// layers share a stream and every copy of a layer draws the same weights.
std::uint64_t layer_seed(const GPT2Config& config, std::int64_t index) {
  return config.seed * 1000003ULL + static_cast<std::uint64_t>(index);
}

Chain& chain(const LinkPtr& link, const std::string& name) {
  return *std::static_pointer_cast<Chain>(std::static_pointer_cast<Chain>(link)->child(name));
}

// GPT-2 scales the weights of the projections that end a residual branch by 1/sqrt(2 layers),
// so the residual stream's variance does not grow with depth. Scaling the N(0, 0.02^2) draw (or
// this rank's share of it) gives the same weights however the layer is split.
void scale_residual_projections(const LinkPtr& block, std::int64_t layers) {
  const double scale = 1.0 / std::sqrt(2.0 * static_cast<double>(layers));
  for (Link* projection : {chain(block, "attention").child("proj").get(), chain(block, "mlp").child("fc2").get()}) {
    Variable& W = projection->param("W");
    W.set_data(mul(W.data(), scale));
  }
}

}  // namespace

std::int64_t GPT2Config::parameters() const {
  const std::int64_t per_block =
      2 * 2 * dim + (dim * 3 * dim + 3 * dim) + (dim * dim + dim) + (dim * 4 * dim + 4 * dim) + (4 * dim * dim + dim);
  return rows() * dim + context * dim + layers * per_block + 2 * dim;
}

GPT2Config GPT2Config::small() { return GPT2Config{}; }

GPT2Stage::GPT2Stage(const GPT2Config& config, int stage, int stages, CommunicatorPtr tensor_group)
    : config_(config), stage_(stage), stages_(stages), tensor_group_(std::move(tensor_group)) {
  TANDEM_CHECK(config.vocabulary > 0 && config.context > 0 && config.dim > 0 && config.layers > 0 && config.heads > 0,
               "GPT2Stage: vocabulary, context, dim, heads and layers must be positive, got ", config.vocabulary, ", ",
               config.context, ", ", config.dim, ", ", config.heads, ", ", config.layers);
  TANDEM_CHECK(config.padded_vocabulary == 0 || config.padded_vocabulary >= config.vocabulary,
               "GPT2Stage: padded_vocabulary ", config.padded_vocabulary, " is smaller than the vocabulary ",
               config.vocabulary);
  TANDEM_CHECK(config.dim % config.heads == 0, "GPT2Stage: dim ", config.dim, " must be a multiple of heads ",
               config.heads);
  TANDEM_CHECK(stages >= 1 && stage >= 0 && stage < stages && stages <= config.layers, "GPT2Stage: stage ", stage,
               " of ", stages, " with ", config.layers, " block(s): every stage needs a block");
  const std::int64_t L = config.layers;
  const int per = static_cast<int>(L / stages), extra = static_cast<int>(L % stages);
  first_block_ = stage * per + std::min(stage, extra);
  const int count = per + (stage < extra ? 1 : 0);

  // wte on the first stage, and its tied copy on the last: the same stream, the same table.
  if (first() || last()) {
    const auto init = initializers::seeded(layer_seed(config, L), initializers::normal(kInitStd));
    wte_ = tensor_group_ ? LinkPtr(std::make_shared<VocabParallelEmbedding>(tensor_group_, config.rows(), config.dim,
                                                                            std::nullopt, init))
                         : LinkPtr(std::make_shared<EmbedID>(config.rows(), config.dim, std::nullopt, init));
    add_child("wte", wte_);
    // The padded rows start at zero (the real rows are the unpadded model's draw) and stay there:
    // they get no gradient, and decay keeps zero at zero. So padding never shows, in a checkpoint
    // either: one exported to Hugging Face's format and imported again is the same bits.
    if (config.rows() > config.vocabulary) {
      const Share share = tensor_group_ ? share_of(config.rows(), tensor_group_->rank(), tensor_group_->size())
                                        : Share{0, config.rows()};
      const std::int64_t first_padded = std::max<std::int64_t>(config.vocabulary - share.begin, 0);
      if (first_padded < share.size()) {
        Tensor table = wte_->param("W").data();
        index_put_(table, {Index::range(first_padded, share.size())}, zeros({}, table.dtype()));
      }
    }
  }
  if (first()) {
    wpe_ = std::make_shared<PositionalEmbedding>(
        config.context, config.dim, initializers::seeded(layer_seed(config, L + 1), initializers::normal(kInitStd)));
    add_child("wpe", wpe_);
  }
  for (int b = first_block_; b < first_block_ + count; ++b) {
    TransformerBlockOptions options;
    options.heads = config.heads;
    options.mlp_ratio = 4;
    options.eps = 1e-5;
    options.linear.initialW = initializers::seeded(layer_seed(config, b), initializers::normal(kInitStd));
    const LinkPtr block =
        tensor_group_
            ? LinkPtr(make_parallel_transformer_block(tensor_group_, config.dim, options, config.sequence_parallel))
            : LinkPtr(std::make_shared<TransformerBlock>(config.dim, options));
    scale_residual_projections(block, L);
    add_child("h." + std::to_string(b), block);
    blocks_.push_back(block);
  }
  if (config.context_parallel) {
    TANDEM_CHECK(!config.sequence_parallel,
                 "GPT2Stage: context parallelism and sequence parallelism both split the "
                 "sequence: use one");
    attend_through(config.context_parallel, blocks_);
  }
  if (last()) {
    ln_f_ = std::make_shared<LayerNormalization>(config.dim, 1e-5);
    add_child("ln_f", ln_f_);
    // The padded rows' logits are pushed to half the dtype's lowest value: exp of them underflows
    // to exactly 0 (no probability, no gradient), and unlike -inf they stay finite wherever a
    // loss multiplies logits by a 0/1 mask (vocab_parallel_softmax_cross_entropy picks each
    // rank's target logits so, and -inf x 0 is NaN).
    if (config.rows() > config.vocabulary) {
      const Share share = tensor_group_ ? share_of(config.rows(), tensor_group_->rank(), tensor_group_->size())
                                        : Share{0, config.rows()};
      std::vector<float> mask(static_cast<std::size_t>(share.size()), 0.0f);
      for (std::int64_t i = 0; i < share.size(); ++i)
        if (share.begin + i >= config.vocabulary) mask[static_cast<std::size_t>(i)] = 1.0f;
      padding_mask_ = from_vector(mask, {share.size()});
    }
  }
}

Variable* GPT2Stage::embedding_table() { return wte_ ? &wte_->param("W") : nullptr; }

std::map<std::string, bool> GPT2Stage::tied_parameters() const {
  if (!wte_ || stages_ == 1) return {};
  return {{"wte/W", first()}};
}

std::vector<std::string> GPT2Stage::sequence_parallel_parameters() const {
  std::vector<std::string> out;
  if (!sequence_parallel()) return out;
  for (const auto& [name, child] : children())
    if (const auto* block = dynamic_cast<const TransformerBlock*>(child.get()))
      for (const std::string& path : tandem::sequence_parallel_parameters(*block)) out.push_back(name + "/" + path);
  if (last()) out.insert(out.end(), {"ln_f/gamma", "ln_f/beta"});
  return out;
}

Variable GPT2Stage::head(const Variable& h) {
  Variable x = (*ln_f_)(h);
  if (sequence_parallel()) {
    // Every rank's positions, then batch first as the targets are: [T_r, B, dim] -> [B T, dim].
    // The gather's backward reduce-scatters, which sums the ranks' parts as copy_to would.
    const std::int64_t B = h.shape()[1];
    x = F::gather_from_sequence_parallel_region(*tensor_group_, F::reshape(x, {-1, config_.dim}));
    const std::int64_t T = x.shape()[0] / B;
    x = F::transpose(F::reshape(x, {T, B, config_.dim}), {1, 0, 2});
  } else if (tensor_group_) {
    x = F::copy_to_parallel_region(*tensor_group_, x);
  }
  Variable logits = F::linear(F::reshape(x, {-1, config_.dim}), wte_->param("W"));
  if (padding_mask_.defined()) {
    const double lowest = logits.dtype() == DType::f64   ? std::numeric_limits<double>::lowest()
                          : logits.dtype() == DType::f16 ? -65504.0
                                                         : std::numeric_limits<float>::lowest();
    logits = F::add(logits, Variable(mul(padding_mask_.to(logits.dtype()), lowest / 2).to(logits.device())));
  }
  return logits;
}

Variable GPT2Stage::logits_for(const Variable& ids) {
  TANDEM_CHECK(first() && last() && !tensor_group_,
               "GPT2Stage::logits_for: needs the whole model in one stage "
               "without a tensor group (stage ",
               stage_, " of ", stages_, ")");
  TANDEM_CHECK(ids.dim() == 2, "GPT2Stage::logits_for: ids must be [B, T], got ", ids.description());
  Variable h = wpe_->forward(wte_->forward(ids));
  for (const LinkPtr& block : blocks_) h = block->forward(h);
  Variable logits = head(F::reshape(h, {-1, config_.dim}));
  if (config_.rows() > config_.vocabulary)
    logits = F::get_item(logits, {Index::all(), Index::until(config_.vocabulary)});
  return F::reshape(logits, {ids.shape()[0], ids.shape()[1], config_.vocabulary});
}

Variables GPT2Stage::forward_many(const Variables& xs) {
  const std::size_t inputs = last() ? 2 : 1;
  TANDEM_CHECK(xs.size() == inputs, "GPT2Stage ", stage_, " of ", stages_, ": takes ", inputs,
               first() ? " input (ids [B, T])" : " input (h [B, T, dim])", last() ? " and the targets" : "", ", got ",
               xs.size());
  Variable h = xs[0];
  if (first()) {
    TANDEM_CHECK(h.dim() == 2 && h.shape()[1] <= config_.context,
                 "GPT2Stage: ids must be [B, T] with T <= ", config_.context, ", got ", h.description());
    if (config_.context_parallel) {
      // This rank's positions of sequences of the layout's length: their rows of wpe.
      const ContextParallel& cp = *config_.context_parallel;
      const std::int64_t length = cp.layout().length();
      TANDEM_CHECK(h.shape()[1] == cp.layout().local_length(cp.communicator().rank()) && length <= config_.context,
                   "GPT2Stage: under context parallelism ids must be this rank's ",
                   cp.layout().local_length(cp.communicator().rank()), " positions of sequences of ", length,
                   " tokens (at most the context ", config_.context, "), got ", h.description());
      const Variable table = std::static_pointer_cast<PositionalEmbedding>(wpe_)->W();
      const Variable rows = F::get_item(table, {Index::range(0, length)});
      h = F::add(wte_->forward(h), F::expand_dims(cp.shard(rows, 0), 0));
    } else {
      h = wpe_->forward(wte_->forward(h));
    }
    // Sequence parallel: this rank's positions, sequence first.
    if (sequence_parallel()) h = F::scatter_to_sequence_parallel_region(*tensor_group_, F::transpose(h, {1, 0, 2}));
  }
  for (const LinkPtr& block : blocks_) h = block->forward(h);
  if (!last()) return {h};

  observation_.clear();
  const Variable& targets = xs[1];
  const bool batch_matches = sequence_parallel() ? targets.dim() == 2 && targets.shape()[0] == h.shape()[1]
                                                 : targets.shape() == Shape(h.shape().begin(), h.shape().end() - 1);
  TANDEM_CHECK(batch_matches, "GPT2Stage: targets ", targets.description(), " must be [B, T] as the sequence ",
               h.description(), sequence_parallel() ? " (this rank's positions, sequence first)" : "");
  const Variable logits = head(h);
  TANDEM_CHECK(logits.shape()[0] == targets.numel(), "GPT2Stage: targets ", targets.description(), " for ",
               logits.shape()[0], " positions");
  const Variable t = F::reshape(targets, {-1});
  const Variable loss = tensor_group_ ? F::vocab_parallel_softmax_cross_entropy(*tensor_group_, logits, t)
                                      : F::softmax_cross_entropy(logits, t);
  observation_["loss"] = loss.data().to(DType::f64).to_vector<double>()[0];
  return {loss};
}

Tensor GPT2Stage::logits_cached(const Tensor& ids, KVCache& cache) {
  TANDEM_CHECK(first() && last() && !tensor_group_,
               "GPT2Stage::logits_cached: needs the whole model in one stage "
               "without a tensor group (stage ",
               stage_, " of ", stages_, ")");
  TANDEM_CHECK(ids.dim() == 2, "GPT2Stage::logits_cached: ids must be [B, T], got ", shape_str(ids.shape()));
  const std::int64_t B = ids.shape()[0], T = ids.shape()[1], start = cache.length;
  TANDEM_CHECK(start + T <= config_.context, "GPT2Stage::logits_cached: ", start, " cached and ", T,
               " new positions exceed the context of ", config_.context);
  if (cache.keys.empty()) cache.keys.resize(blocks_.size()), cache.values.resize(blocks_.size());
  const NoGradGuard no_grad;
  const std::int64_t H = config_.heads, d = config_.dim / H;
  const Variable positions =
      F::get_item(std::static_pointer_cast<PositionalEmbedding>(wpe_)->W(), {Index::range(start, start + T)});
  Variable h = F::add(wte_->forward(Variable(ids)), positions);
  for (std::size_t b = 0; b < blocks_.size(); ++b) {
    Chain& attention = chain(blocks_[b], "attention");
    Link& ln1 = *std::static_pointer_cast<Chain>(blocks_[b])->child("ln1");
    Link& ln2 = *std::static_pointer_cast<Chain>(blocks_[b])->child("ln2");
    Link& mlp = *std::static_pointer_cast<Chain>(blocks_[b])->child("mlp");
    // qkv packed per head: [B, T, H, 3d] -> [B, H, T, 3d] -> q, k, v [B, H, T, d].
    const Variable qkv =
        F::transpose(F::reshape(forward_last_axis(*attention.child("qkv"), ln1(h)), {B, T, H, 3 * d}), {0, 2, 1, 3});
    const Variables parts = F::split_axis(qkv, 3, 3);
    Variable k = parts[1], v = parts[2];
    if (start > 0) {
      k = F::concat({Variable(cache.keys[b]), k}, 2);
      v = F::concat({Variable(cache.values[b]), v}, 2);
    }
    cache.keys[b] = k.data();
    cache.values[b] = v.data();
    const Variable heads =
        F::reshape(F::transpose(F::scaled_dot_product_attention(parts[0], k, v, true), {0, 2, 1, 3}), {B, T, H * d});
    h = F::add(h, forward_last_axis(*attention.child("proj"), heads));
    h = F::add(h, mlp.forward(ln2(h)));
  }
  cache.length = start + T;
  Variable logits = head(F::reshape(h, {-1, config_.dim}));
  if (config_.rows() > config_.vocabulary)
    logits = F::get_item(logits, {Index::all(), Index::until(config_.vocabulary)});
  return F::reshape(logits, {B, T, config_.vocabulary}).data();
}

std::vector<LinkPtr> make_gpt2_stages(const GPT2Config& config, int stages, const std::vector<int>& stage_ids,
                                      CommunicatorPtr tensor_group) {
  std::vector<LinkPtr> mine;
  for (int s : stage_ids) mine.push_back(std::make_shared<GPT2Stage>(config, s, stages, tensor_group));
  return mine;
}

std::vector<LinkPtr> make_gpt2_stages(const GPT2Config& config, int stages, int ranks, int stage_rank,
                                      CommunicatorPtr tensor_group) {
  std::vector<int> ids;
  for (int s = stage_rank; s < stages; s += ranks) ids.push_back(s);
  return make_gpt2_stages(config, stages, ids, std::move(tensor_group));
}

namespace {

// A token from the logits of one position: the top_k most likely (all when top_k <= 0 or
// >= V), softmax at `temperature`, drawn with one uniform number; greedy at temperature <= 0.
std::int32_t draw_token(const std::vector<double>& z, double temperature, std::int64_t top_k, Generator& generator) {
  const std::int64_t V = static_cast<std::int64_t>(z.size());
  std::vector<std::int32_t> order(z.size());
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; ties by lower id, so the order is the same wherever it is computed.
  auto more_likely = [&](std::int32_t a, std::int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  const std::int64_t k = top_k <= 0 || top_k >= V ? V : top_k;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), more_likely);
  if (temperature <= 0) return order[0];
  std::vector<double> p(static_cast<std::size_t>(k));
  double total = 0;
  for (std::int64_t i = 0; i < k; ++i) total += (p[i] = std::exp((z[order[i]] - z[order[0]]) / temperature));
  double u = generator.uniform(0, total);
  std::int64_t i = 0;
  for (; i + 1 < k && u >= p[i]; ++i) u -= p[i];
  return order[i];
}

}  // namespace

std::vector<std::int32_t> gpt2_generate(GPT2Stage& model, const std::vector<std::int32_t>& prompt, std::int64_t length,
                                        double temperature, std::int64_t top_k, Generator& generator, bool use_cache) {
  TANDEM_CHECK(!prompt.empty(), "gpt2_generate: the prompt must hold at least one token");
  const std::int64_t context = model.config().context, V = model.config().vocabulary;
  std::vector<std::int32_t> ids = prompt;
  GPT2Stage::KVCache cache;
  bool cache_valid = false;
  const NoGradGuard no_grad;
  for (std::int64_t n = 0; n < length; ++n) {
    const std::int64_t count = static_cast<std::int64_t>(ids.size());
    Tensor logits;
    if (use_cache && cache_valid && count <= context) {
      // Only the newest token: the cache holds every position before it.
      logits =
          model.logits_cached(from_vector(std::vector<std::int32_t>{ids.back()}, {1, 1}).to(model.device()), cache);
    } else {
      const std::int64_t window = std::min(count, context);
      const Tensor x =
          from_vector(std::vector<std::int32_t>(ids.end() - window, ids.end()), {1, window}).to(model.device());
      if (use_cache && count <= context) {
        cache = GPT2Stage::KVCache{};
        logits = model.logits_cached(x, cache);
        cache_valid = true;
      } else {
        logits = model.logits_for(Variable(x)).data();
      }
    }
    const std::int64_t T = logits.shape()[1];
    const Tensor last = index(logits, {Index::at(0), Index::at(T - 1)});
    const std::vector<double> z = last.to(Device::cpu()).to(DType::f64).to_vector<double>();
    TANDEM_CHECK(static_cast<std::int64_t>(z.size()) == V, "gpt2_generate: expected ", V, " logits, got ", z.size());
    ids.push_back(draw_token(z, temperature, top_k, generator));
  }
  return std::vector<std::int32_t>(ids.end() - length, ids.end());
}

}  // namespace tandem::examples
