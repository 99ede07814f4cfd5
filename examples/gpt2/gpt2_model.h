// GPT-2 (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners"; the 124M
// model is GPT2Config::small()) built from tandem's links, as the stages of a pipeline whose
// blocks may be split over a tensor-parallel group:
//   h = wte[ids] + wpe[0:T];  per block h += attn(ln_1(h)); h += mlp(ln_2(h));
//   logits = ln_f(h) wte^T     (the output head is the token embedding, tied)
// with pre-LayerNorm blocks (eps 1e-5), causal multi-head attention, GELU in its tanh form, and
// GPT-2's initialisation: every weight N(0, 0.02^2), the two projections that end a residual
// branch (attn.c_proj, mlp.c_proj) scaled by 1/sqrt(2 layers), biases 0, LayerNorms 1 and 0.
//
// Stage s of S holds blocks [first, first + count) (as evenly as possible, the earlier stages
// taking the extra ones); stage 0 also "wte" and "wpe", stage S - 1 also "ln_f" and the head.
// When the first and last stages differ, the last holds a copy of "wte" for its head, drawn
// from the same stream; tie_parameters (comm/model_parallel/tied_parameters.h) sums the copies'
// gradients every step, so they stay equal, and a sharded checkpoint stores the one tensor
// (both copies have the global name "wte/W"). With a tensor-parallel group, "wte" is a
// VocabParallelEmbedding (each rank holds a share of the vocabulary, and so a share of the
// logits, which go to vocab_parallel_softmax_cross_entropy whole-vocabulary-free) and the blocks
// make_parallel_transformer_block's. The weights do not depend on the split: the same seed gives
// the same model in one process, over tp, pp and dp ranks.
//
// Names: children "wte", "wpe", "h.<i>" (TransformerBlock: "ln1", "attention" with "qkv" and
// "proj", "ln2", "mlp" with "fc1" and "fc2"), "ln_f". gpt2_hf.h maps them, and their layouts,
// to and from Hugging Face's GPT-2 checkpoints ("h.0.attn.c_attn.weight", ...).
//
// The vocabulary may be padded (padded_vocabulary rows, e.g. 50,304 = 393 x 128 for even GEMMs
// and tensor-parallel shares): the padded rows are never looked up, and their logits are near the dtype's lowest,
// so the loss, every gradient and every sample are those of the unpadded model.
//
// forward_many: stage 0 takes ids i32 [B, T]; other stages the previous stage's h [B, T, dim];
// the last stage also the targets i32 [B, T], and returns the mean cross-entropy over B x T.
// observation(): "loss".
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/context_parallel/context_parallel.h"
#include "comm/pipeline/tied_stage.h"
#include "comm/transport/communicator.h"
#include "core/random.h"
#include "layers/link.h"

namespace tandem::examples {

struct GPT2Config {
  std::int64_t vocabulary = 50257;     // tokens (GPT-2's BPE)
  std::int64_t padded_vocabulary = 0;  // rows of wte (>= vocabulary; 0: vocabulary)
  std::int64_t context = 1024;         // rows of wpe: the longest sequence
  std::int64_t dim = 768;
  std::int64_t heads = 12;
  std::int64_t layers = 12;
  std::uint64_t seed = 0;
  // With a tensor group: Megatron-LM's sequence parallelism (comm/tensor_parallel/
  // parallel_transformer.h). Between the blocks' branches each tensor rank holds its positions
  // of the sequence, [T_r, B, dim] (the stages pass these on), so the layer norms, residuals and
  // the head's layer norm run on 1/ranks of the activations; the trainer sums the gradients of
  // sequence_parallel_parameters() over the tensor group.
  bool sequence_parallel = false;
  // Context parallelism (comm/context_parallel): the first stage takes this rank's positions of
  // each sequence (context_parallel->layout(): sequences of its length), [B, T_r], wpe's rows
  // being those positions'; every block attends through the group. Not with sequence_parallel.
  std::shared_ptr<ContextParallel> context_parallel;

  std::int64_t rows() const { return padded_vocabulary > 0 ? padded_vocabulary : vocabulary; }
  // Parameters of the whole model (the tied head counted once).
  std::int64_t parameters() const;
  // GPT-2 small: 12 layers, 12 heads, 768 wide, context 1024, 124,439,808 parameters unpadded.
  static GPT2Config small();
};

class GPT2Stage : public Chain, public pipeline::TiedStage {
 public:
  // tensor_group: null for the single-process links.
  GPT2Stage(const GPT2Config& config, int stage, int stages, CommunicatorPtr tensor_group = nullptr);
  std::string type_name() const override { return "GPT2Stage"; }
  Variables forward_many(const Variables& xs) override;
  std::map<std::string, double> observation() const override { return observation_; }

  // The logits [B, T, vocabulary] of a whole model in one stage (stage 0 of 1, no tensor group)
  // for ids i32 [B, T] (T <= context).
  Variable logits_for(const Variable& ids);

  const GPT2Config& config() const { return config_; }
  bool first() const { return stage_ == 0; }
  bool last() const { return stage_ == stages_ - 1; }
  int first_block() const { return first_block_; }
  int blocks() const { return static_cast<int>(blocks_.size()); }
  // The token embedding's table on this stage (stage 0's, or the last stage's tied copy), or
  // null: [rows or this rank's share of them, dim].
  Variable* embedding_table();
  // The token embedding when the first and last stages differ: stage 0's copy is the one a
  // checkpoint saves.
  std::map<std::string, bool> tied_parameters() const override;
  // Under sequence parallelism, the parameters (paths in the stage) whose gradient each tensor
  // rank computes a part of; none otherwise.
  std::vector<std::string> sequence_parallel_parameters() const;

  // A key/value cache for generation: per block, the keys and values of the positions seen so
  // far, [B, heads, length, head size] each.
  struct KVCache {
    std::vector<Tensor> keys, values;
    std::int64_t length = 0;
  };
  // The logits [B, T, vocabulary] of ids [B, T] at positions cache.length .. cache.length + T - 1,
  // attending to the cached positions too; appends this call's keys and values to the cache.
  // Whole model in one stage; cache.length + T <= context. No gradients.
  Tensor logits_cached(const Tensor& ids, KVCache& cache);

 private:
  // [..., dim] (under sequence parallelism [T_r, B, dim]) -> logits [B T, rows] (this rank's share
  // of the rows under tensor parallelism).
  Variable head(const Variable& h);
  bool sequence_parallel() const { return config_.sequence_parallel && tensor_group_ != nullptr; }

  GPT2Config config_;
  int stage_, stages_, first_block_ = 0;
  CommunicatorPtr tensor_group_;
  LinkPtr wte_, wpe_, ln_f_;
  std::vector<LinkPtr> blocks_;
  Tensor padding_mask_;  // f32 [this rank's rows]: 1 on the padded rows, else 0; undefined when none
  std::map<std::string, double> observation_;
};

// The stages `stage_ids` (in that order) of a model cut into `stages`: those a pipeline rank
// holds, schedule.stages_of_rank(rank). Under zbv's V rank 0 holds both the first and the last
// stage, so both copies of the tied "wte" (the trainer sums their gradients on the rank).
std::vector<LinkPtr> make_gpt2_stages(const GPT2Config& config, int stages, const std::vector<int>& stage_ids,
                                      CommunicatorPtr tensor_group);
// Round-robin placement: the stages stage_rank, stage_rank + ranks, ... (1F1B, GPipe and
// interleaved schedules; every stage when ranks == 1).
std::vector<LinkPtr> make_gpt2_stages(const GPT2Config& config, int stages, int ranks, int stage_rank,
                                      CommunicatorPtr tensor_group);

// Generation from a whole model in one stage: `length` tokens after `prompt`, each drawn from
// softmax(logits / temperature) restricted to the top_k most likely tokens (top_k <= 0: all),
// or the most likely when temperature <= 0, with `generator`. With use_cache the prompt is run
// once and each new token attends to the cached keys and values; without, every token reruns
// the whole window. Both see the last `context` tokens at most (past the context a new token
// reruns the window in both: GPT-2's absolute positions cannot slide a cache), and give the same
// tokens. Returns the new tokens.
std::vector<std::int32_t> gpt2_generate(GPT2Stage& model, const std::vector<std::int32_t>& prompt, std::int64_t length,
                                        double temperature, std::int64_t top_k, Generator& generator,
                                        bool use_cache = true);

}  // namespace tandem::examples
