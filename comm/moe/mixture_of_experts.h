// A Mixture-of-Experts layer whose experts live on different ranks (expert parallelism, as in
// GShard, Switch Transformer, DeepSpeed-MoE and Megatron-LM's MoE layers).
//
// Each token (a row of x) goes through a router (Linear(dim, E) without bias, then softmax over
// the E experts), picks its top-k experts (k = 1 or 2; ties go to the lower index), and its
// output is the sum of those experts' outputs weighted by the router's probabilities (for k = 2
// divided by their sum, as GShard; `renormalize`). The E experts are spread over the ranks of the
// expert-parallel communicator in order: rank q holds experts [q E/R, (q+1) E/R). Tokens travel
// to their experts and back by the differentiable alltoallv (comm/functions/collectives.h), so
// each rank sends exactly the rows its tokens need, in pieces of whatever size routing chose.
//
// Two modes:
// - dropless (capacity_factor = 0, the default): every token reaches its k experts.
// - capacity: each expert takes at most ceil(capacity_factor * tokens * k / E) of this rank's
//   tokens (GShard/Switch: first choices before second choices, then in token order); the
//   others are dropped (that expert adds nothing to the token's output; the residual around
//   the layer carries it on). observation()["moe/dropped"] says how many assignments were
//   dropped in the last forward.
// The auxiliary losses are per rank, over its own tokens: Switch Transformer's load-balancing
// loss E * sum_e f_e P_e (f_e: the fraction of tokens whose first choice is e; P_e: the mean
// router probability of e) and the router z-loss mean(logsumexp(logits)^2). aux_loss() returns
// their weighted sum for the caller to add to its loss (moe_aux_loss sums it over a model).
//
// Every rank of the communicator must construct the layer (a collective: the ranks compare E, k,
// the capacity factor and dim, and disagreement is an error on every rank) and call forward
// together, with any number of tokens each (zero included). Experts are ordinary links made by
// `make_expert(e)` for the global index e, so seeding each expert by e (initializers::seeded)
// gives the same experts whatever the number of ranks; their parameters are named "experts/<e>/..."
// by global index. A null communicator (or one rank) holds every expert: the single-process layer.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "comm/data_parallel/multi_node_optimizer.h"
#include "comm/transport/communicator.h"
#include "layers/link.h"
#include "layers/links/linear.h"

namespace tandem {

struct MoEOptions {
  std::int64_t experts = 8;       // E, over the whole expert-parallel group
  int top_k = 1;                  // 1 or 2
  double capacity_factor = 0;     // 0: dropless
  bool renormalize = true;        // k = 2: gates divided by their sum
  double load_balance_coef = 0;   // weight of the load-balancing loss in aux_loss() (0: not computed)
  double z_loss_coef = 0;         // weight of the router z-loss in aux_loss() (0: not computed)
  LinearOptions router;           // the default router's initialiser and dtype (nobias is forced)
  // A router of one's own: any link mapping [tokens, dim] to logits [tokens, E] (registered as
  // "router"). A wrong output shape is an error on every rank of the group.
  LinkPtr router_link;
};

using ExpertFactory = std::function<LinkPtr(std::int64_t expert)>;

class MixtureOfExperts : public Chain {
 public:
  MixtureOfExperts(CommunicatorPtr comm, std::int64_t dim, MoEOptions options, const ExpertFactory& make_expert);
  std::string type_name() const override { return "MixtureOfExperts"; }

  // x: [..., dim] (tokens are the rows of x reshaped to [-1, dim]); the output has x's shape.
  Variable forward(const Variable& x) override;

  // load_balance_coef * load-balancing loss + z_loss_coef * z-loss of the last forward: a scalar
  // to add to the training loss; undefined when both weights are 0 or before any forward.
  Variable aux_loss() const { return aux_loss_; }

  // Of the last forward, on this rank: "moe/dropped" (assignments dropped for capacity),
  // "moe/load_balance", "moe/z_loss" (when their weights are set), and "moe/max_load": the
  // busiest expert's share of this rank's assignments times E (1 when perfectly balanced).
  std::map<std::string, double> observation() const override { return observation_; }

  std::int64_t experts() const { return options_.experts; }
  std::int64_t local_experts() const { return local_experts_; }
  std::int64_t first_local_expert() const { return first_local_; }

 private:
  CommunicatorPtr comm_;  // null: every expert here
  std::int64_t dim_;
  MoEOptions options_;
  std::int64_t local_experts_, first_local_;
  LinkPtr router_;
  std::vector<LinkPtr> experts_;  // the local ones, in order
  Variable aux_loss_;
  std::map<std::string, double> observation_;
};

// The sum of aux_loss() over every MixtureOfExperts inside `model` (itself included), or an
// undefined Variable when none has one.
Variable moe_aux_loss(const Link& model);

// Sums every MixtureOfExperts' observation inside `model` by key (over its MoE layers).
std::map<std::string, double> moe_observation(const Link& model);

// Expert parallelism inside data parallelism: the world's ranks in groups of expert_parallel
// consecutive ranks, each group holding all E experts once (the layer's communicator); the
// ranks with the same place in their groups hold the same experts (their replicas).
struct ExpertLayout {
  CommunicatorPtr expert_parallel;       // this rank's group: give it to MixtureOfExperts
  CommunicatorPtr expert_data_parallel;  // the ranks that hold the same experts as this one
};
// Collective over world; expert_parallel must divide its size.
ExpertLayout make_expert_layout(const CommunicatorPtr& world, int expert_parallel);

// The parameter groups for create_multi_node_optimizer of a model with MixtureOfExperts layers,
// for a loss that is each rank's mean over its own examples: "shared" (everything but the
// experts) averaged over world, "experts" over layout.expert_data_parallel and divided by the
// expert-parallel group's size (an expert's gradient already sums what every rank of its group
// sent it), so that every parameter's gradient is the mean over the world's ranks of their
// losses' gradients. Experts that got no tokens on a replica count zeros there (zero_fill).
std::vector<ParameterGroup> moe_parameter_groups(const Link& model, const CommunicatorPtr& world,
                                                 const ExpertLayout& layout);

}  // namespace tandem
