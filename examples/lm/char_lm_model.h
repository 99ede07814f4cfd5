// The character language model of examples/lm: a small GPT (token and learned position
// embeddings, pre-norm transformer blocks, a final layer norm and a linear head over the
// characters, the softmax cross-entropy of the next character), built as the stages of a
// pipeline whose blocks may also be split over a tensor-parallel group.
//
// Stage s of S holds blocks [first, first + count) (the layers split as evenly as possible, the
// earlier stages taking the extra ones); stage 0 also the embeddings, stage S - 1 also the
// final norm, the head and the loss. With a tensor-parallel group, the token embedding is a
// VocabParallelEmbedding, the blocks make_parallel_transformer_block's and the head a
// ColumnParallelLinear whose logits stay split into vocab_parallel_softmax_cross_entropy; with
// none (nullptr), the single-process links. Every weight is drawn from an initialiser seeded
// with the model's seed and the layer's index (initializers::seeded), so the model starts the
// same however it is split over tensor, pipeline and data ranks.
//
// forward_many: stage 0 takes ids i32 [B, T]; other stages the previous stage's h [B, T, dim];
// the last stage also the targets i32 [B, T] and returns the mean loss over the B x T
// characters (plus the experts' auxiliary losses, when set). observation(): "loss" and "bpc"
// (bits per character of the cross-entropy alone, / ln 2); with experts, "moe/dropped" (summed
// over the stage's layers), "moe/max_load", "moe/load_balance", "moe/z_loss" (averaged over
// them); or, after a
// forward in sampling mode, "next": the character drawn for the position after the last of the
// first sequence (a pipeline carries the observation to every rank).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/context_parallel/context_parallel.h"
#include "comm/transport/communicator.h"
#include "core/random.h"
#include "layers/link.h"
#include "layers/links/transformer.h"

namespace tandem::examples {

struct CharLMConfig {
  std::int64_t vocabulary = 0;  // characters
  std::int64_t context = 64;    // the longest sequence (the position table's rows)
  std::int64_t dim = 128;
  std::int64_t heads = 4;
  std::int64_t layers = 4;  // transformer blocks
  std::int64_t mlp_ratio = 4;
  std::uint64_t seed = 0;
  // Mixture of experts (comm/moe/mixture_of_experts.h): with experts > 0, every block's MLP is
  // a MixtureOfExperts of that many MLPs (each as wide as the dense one, so top_k = 1 has the
  // dense model's active size), spread over expert_group (null: all on this rank). The last
  // stage adds its layers' auxiliary losses to the loss.
  std::int64_t experts = 0;
  int top_k = 1;
  double capacity_factor = 0;  // 0: dropless
  double load_balance_coef = 0;
  double z_loss_coef = 0;
  CommunicatorPtr expert_group;
  // Context parallelism (comm/context_parallel): every stage takes this rank's positions of each
  // sequence (context_parallel->layout(), of `context` positions), [B, T_r]; attention is the
  // group's, the position table's rows are those positions'. Null: whole sequences.
  std::shared_ptr<ContextParallel> context_parallel;
};

class CharLMStage : public Chain {
 public:
  // tensor_group: null for the single-process links.
  CharLMStage(const CharLMConfig& config, int stage, int stages, CommunicatorPtr tensor_group = nullptr);
  std::string type_name() const override { return "CharLMStage"; }
  Variables forward_many(const Variables& xs) override;
  std::map<std::string, double> observation() const override { return observation_; }

  // The next forward (of the last stage) draws the next character instead of computing the
  // loss: from softmax(logits / temperature) with `generator`, or the most likely one when
  // temperature <= 0. Off again after that forward. Every rank of a tensor group must draw
  // alike: give each the same seeded generator.
  void sample_next(double temperature, Generator* generator);

  // The logits [B, T, V] of a whole model in one stage (stage 0 of 1, no tensor group) for ids
  // i32 [B, T] (T <= context): what forward_many's loss is the cross-entropy of.
  Variable logits_for(const Variable& ids);

  bool first() const { return stage_ == 0; }
  bool last() const { return stage_ == stages_ - 1; }
  int first_block() const { return first_block_; }
  int blocks() const { return static_cast<int>(blocks_.size()); }
  // This stage's transformer blocks (for their recompute: layers/links/transformer.h).
  std::vector<TransformerBlock*> transformer_blocks() const;

 private:
  Variable logits(const Variable& rows);  // [N, dim] -> [N, V] (this rank's share under tensor parallelism)
  Variable draw_next(const Variable& h);
  LinkPtr make_attention(const TransformerBlockOptions& options) const;
  LinkPtr make_experts(int block) const;

  CharLMConfig config_;
  int stage_, stages_, first_block_ = 0;
  CommunicatorPtr tensor_group_;
  LinkPtr token_, position_, final_norm_, head_;
  std::vector<LinkPtr> blocks_;
  std::map<std::string, double> observation_;
  bool sampling_ = false;
  double temperature_ = 1;
  Generator* generator_ = nullptr;
};

// The stages `stage_ids` (in that order) of a model cut into `stages`: those a pipeline rank
// holds, schedule.stages_of_rank(rank) (zbv's V: rank r holds r and 2 ranks - 1 - r).
std::vector<LinkPtr> make_char_lm_stages(const CharLMConfig& config, int stages, const std::vector<int>& stage_ids,
                                         CommunicatorPtr tensor_group);
// Round-robin placement: the stages stage_rank, stage_rank + ranks, ... (1F1B, GPipe and
// interleaved schedules; every stage when ranks == 1).
std::vector<LinkPtr> make_char_lm_stages(const CharLMConfig& config, int stages, int ranks, int stage_rank,
                                         CommunicatorPtr tensor_group);

}  // namespace tandem::examples
