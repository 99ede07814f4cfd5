#include "examples/lm/char_lm_model.h"

#include <algorithm>
#include <cmath>

#include "autograd/functions.h"
#include "comm/moe/mixture_of_experts.h"
#include "comm/tensor_parallel/parallel_region.h"
#include "comm/tensor_parallel/parallel_transformer.h"
#include "comm/tensor_parallel/vocab_parallel_cross_entropy.h"
#include "comm/tensor_parallel/vocab_parallel_embedding.h"
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

// The seed of layer `index`'s initialiser: blocks are 0 .. layers - 1, the embeddings and the
// head after them, so no two layers share a stream.
std::uint64_t layer_seed(const CharLMConfig& config, std::int64_t index) {
  return config.seed * 1000003ULL + static_cast<std::uint64_t>(index);
}

}  // namespace

CharLMStage::CharLMStage(const CharLMConfig& config, int stage, int stages, CommunicatorPtr tensor_group)
    : config_(config), stage_(stage), stages_(stages), tensor_group_(std::move(tensor_group)) {
  TANDEM_CHECK(config.vocabulary > 0 && config.context > 0 && config.dim > 0 && config.layers > 0,
               "CharLMStage: vocabulary, context, dim and layers must be positive, got ", config.vocabulary, ", ",
               config.context, ", ", config.dim, ", ", config.layers);
  TANDEM_CHECK(stages >= 1 && stage >= 0 && stage < stages && stages <= config.layers, "CharLMStage: stage ", stage,
               " of ", stages, " with ", config.layers, " block(s): every stage needs a block");
  const std::int64_t L = config.layers;
  const int per = static_cast<int>(L / stages), extra = static_cast<int>(L % stages);
  first_block_ = stage * per + std::min(stage, extra);
  const int count = per + (stage < extra ? 1 : 0);

  if (first()) {
    // GPT-2's N(0, 0.02) embeddings: with the pre-norm blocks the residual stream starts small.
    const auto embedding_init = initializers::seeded(layer_seed(config, L), initializers::normal(0.02));
    token_ = tensor_group_
                 ? LinkPtr(std::make_shared<VocabParallelEmbedding>(tensor_group_, config.vocabulary, config.dim,
                                                                    std::nullopt, embedding_init))
                 : LinkPtr(std::make_shared<EmbedID>(config.vocabulary, config.dim, std::nullopt, embedding_init));
    add_child("token", token_);
    position_ = std::make_shared<PositionalEmbedding>(
        config.context, config.dim, initializers::seeded(layer_seed(config, L + 1), initializers::normal(0.02)));
    add_child("position", position_);
  }
  for (int b = first_block_; b < first_block_ + count; ++b) {
    TransformerBlockOptions options;
    options.heads = config.heads;
    options.mlp_ratio = config.mlp_ratio;
    options.linear.initialW = initializers::seeded(layer_seed(config, b), initializers::lecun_normal());
    LinkPtr block;
    if (config.experts > 0) {
      block = std::make_shared<TransformerBlock>(config.dim, make_attention(options), make_experts(b), options.eps);
    } else {
      block = tensor_group_ ? LinkPtr(make_parallel_transformer_block(tensor_group_, config.dim, options))
                            : LinkPtr(std::make_shared<TransformerBlock>(config.dim, options));
    }
    add_child("block" + std::to_string(b), block);
    blocks_.push_back(block);
  }
  // Every block attends through the context-parallel group.
  if (config.context_parallel) attend_through(config.context_parallel, blocks_);
  if (last()) {
    final_norm_ = std::make_shared<LayerNormalization>(config.dim, 1e-5);
    add_child("norm", final_norm_);
    LinearOptions options;
    options.initialW = initializers::seeded(layer_seed(config, L + 2), initializers::lecun_normal());
    head_ = tensor_group_ ? LinkPtr(std::make_shared<ColumnParallelLinear>(tensor_group_, config.dim, config.vocabulary,
                                                                           false, options))
                          : LinkPtr(std::make_shared<Linear>(config.dim, config.vocabulary, options));
    add_child("head", head_);
  }
}

LinkPtr CharLMStage::make_attention(const TransformerBlockOptions& options) const {
  if (tensor_group_)
    return std::make_shared<ParallelSelfAttention>(tensor_group_, config_.dim, options.heads, options.causal,
                                                   options.linear);
  return std::make_shared<MultiHeadSelfAttention>(config_.dim, options.heads, options.causal, options.linear);
}

// Block b's experts and router draw from streams of their own, after every dense layer's, so
// an expert is the same whatever rank holds it.
LinkPtr CharLMStage::make_experts(int b) const {
  const CharLMConfig& c = config_;
  const std::int64_t first = c.layers + 3 + static_cast<std::int64_t>(b) * (c.experts + 1);
  MoEOptions options;
  options.experts = c.experts;
  options.top_k = c.top_k;
  options.capacity_factor = c.capacity_factor;
  options.load_balance_coef = c.load_balance_coef;
  options.z_loss_coef = c.z_loss_coef;
  options.router.initialW = initializers::seeded(layer_seed(c, first + c.experts), initializers::lecun_normal());
  return std::make_shared<MixtureOfExperts>(c.expert_group, c.dim, options, [&](std::int64_t e) -> LinkPtr {
    LinearOptions linear;
    linear.initialW = initializers::seeded(layer_seed(c, first + e), initializers::lecun_normal());
    return std::make_shared<TransformerMLP>(c.dim, c.mlp_ratio * c.dim, linear);
  });
}

void CharLMStage::sample_next(double temperature, Generator* generator) {
  TANDEM_CHECK(last(), "CharLMStage::sample_next: stage ", stage_, " of ", stages_, " has no head");
  TANDEM_CHECK(temperature <= 0 || generator != nullptr, "CharLMStage::sample_next: sampling at temperature ",
               temperature, " needs a generator");
  sampling_ = true;
  temperature_ = temperature;
  generator_ = generator;
}

std::vector<TransformerBlock*> CharLMStage::transformer_blocks() const {
  std::vector<TransformerBlock*> out;
  for (const LinkPtr& block : blocks_) out.push_back(&static_cast<TransformerBlock&>(*block));
  return out;
}

Variable CharLMStage::logits(const Variable& rows) { return head_->forward((*final_norm_)(rows)); }

Variable CharLMStage::logits_for(const Variable& ids) {
  TANDEM_CHECK(first() && last() && !tensor_group_,
               "CharLMStage::logits_for: needs the whole model in one stage "
               "without a tensor group (stage ",
               stage_, " of ", stages_, ")");
  TANDEM_CHECK(ids.dim() == 2, "CharLMStage::logits_for: ids must be [B, T], got ", ids.description());
  Variable h = position_->forward(token_->forward(ids));
  for (const LinkPtr& block : blocks_) h = block->forward(h);
  return F::reshape(logits(F::reshape(h, {-1, config_.dim})), {ids.shape()[0], ids.shape()[1], config_.vocabulary});
}

Variables CharLMStage::forward_many(const Variables& xs) {
  const std::size_t inputs = last() ? 2 : 1;
  TANDEM_CHECK(xs.size() == inputs, "CharLMStage ", stage_, " of ", stages_, ": takes ", inputs,
               first() ? " input (ids [B, T])" : " input (h [B, T, dim])", last() ? " and the targets" : "", ", got ",
               xs.size());
  Variable h = xs[0];
  if (first()) {
    TANDEM_CHECK(h.dim() == 2, "CharLMStage: ids must be [B, T], got ", h.description());
    if (config_.context_parallel) {
      // This rank's positions: their rows of the position table.
      const ContextParallel& cp = *config_.context_parallel;
      const std::int64_t mine = cp.layout().local_length(cp.communicator().rank());
      TANDEM_CHECK(h.shape()[1] == mine && cp.layout().length() == config_.context,
                   "CharLMStage: under context "
                   "parallelism ids must be this rank's ",
                   mine, " positions of sequences of --context ", config_.context, " (the layout's ",
                   cp.layout().length(), "), got ", h.description());
      const Variable& table = static_cast<PositionalEmbedding&>(*position_).W();
      h = F::add(token_->forward(h), F::expand_dims(cp.shard(table, 0), 0));
    } else {
      h = position_->forward(token_->forward(h));
    }
  }
  for (const LinkPtr& block : blocks_) h = block->forward(h);
  if (!last()) return {h};

  observation_.clear();
  if (sampling_) return {draw_next(h)};
  const Variable& targets = xs[1];
  TANDEM_CHECK(targets.shape() == Shape(h.shape().begin(), h.shape().end() - 1), "CharLMStage: targets ",
               targets.description(), " must be [B, T] as the sequence ", h.description());
  const Variable rows = F::reshape(h, {-1, config_.dim});
  const Variable t = F::reshape(targets, {-1});
  Variable loss = tensor_group_ ? F::vocab_parallel_softmax_cross_entropy(*tensor_group_, logits(rows), t)
                                : F::softmax_cross_entropy(logits(rows), t);
  const double value = loss.data().to(DType::f64).to_vector<double>()[0];
  observation_["loss"] = value;
  observation_["bpc"] = value / std::log(2.0);
  if (config_.experts > 0) {
    const Variable aux = moe_aux_loss(*this);
    if (aux.defined()) loss = F::add(loss, aux);
    for (const auto& [key, sum] : moe_observation(*this))
      observation_[key] = key == "moe/dropped" ? sum : sum / static_cast<double>(blocks_.size());
  }
  return {loss};
}

Variable CharLMStage::draw_next(const Variable& h) {
  sampling_ = false;
  const std::int64_t T = h.shape()[1];
  const Variable last_position = F::reshape(F::get_item(h, {Index::at(0), Index::at(T - 1)}), {1, config_.dim});
  Variable scores = logits(last_position);  // [1, V] (this rank's share under tensor parallelism)
  if (tensor_group_) scores = F::gather_from_parallel_region(*tensor_group_, scores, -1);
  const std::vector<double> z = scores.data().to(DType::f64).to_vector<double>();
  std::int64_t next = std::max_element(z.begin(), z.end()) - z.begin();
  if (temperature_ > 0) {
    const double top = z[static_cast<std::size_t>(next)];
    std::vector<double> p(z.size());
    double total = 0;
    for (std::size_t i = 0; i < z.size(); ++i) total += (p[i] = std::exp((z[i] - top) / temperature_));
    double u = generator_->uniform(0, total);
    for (next = 0; next + 1 < static_cast<std::int64_t>(p.size()) && u >= p[static_cast<std::size_t>(next)]; ++next)
      u -= p[static_cast<std::size_t>(next)];
  }
  observation_["next"] = static_cast<double>(next);
  return Variable(zeros({}, DType::f32));  // the pipeline's "loss" of this forward
}

std::vector<LinkPtr> make_char_lm_stages(const CharLMConfig& config, int stages, const std::vector<int>& stage_ids,
                                         CommunicatorPtr tensor_group) {
  std::vector<LinkPtr> mine;
  for (int s : stage_ids) mine.push_back(std::make_shared<CharLMStage>(config, s, stages, tensor_group));
  return mine;
}

std::vector<LinkPtr> make_char_lm_stages(const CharLMConfig& config, int stages, int ranks, int stage_rank,
                                         CommunicatorPtr tensor_group) {
  std::vector<int> ids;
  for (int s = stage_rank; s < stages; s += ranks) ids.push_back(s);
  return make_char_lm_stages(config, stages, ids, std::move(tensor_group));
}

}  // namespace tandem::examples
