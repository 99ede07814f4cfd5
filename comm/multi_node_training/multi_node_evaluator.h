// create_multi_node_evaluator (chainermn.create_multi_node_evaluator): each rank evaluates its
// own share of the validation data (e.g. from scatter_dataset), and every metric is averaged
// over the ranks, so every rank reports the same numbers. All ranks must report the same
// metric names (checked collectively: a mismatch is an error on every rank). Ranks that report
// nothing (the ranks of a model-parallel model without the loss, Evaluator(it, model) on them)
// agree on that, average nothing and return nothing.
#pragma once

#include "comm/transport/communicator.h"
#include "training/extensions/evaluator.h"

namespace tandem {

class MultiNodeEvaluator final : public Extension {
 public:
  MultiNodeEvaluator(std::shared_ptr<Evaluator> evaluator, CommunicatorPtr comm, std::string prefix = "validation");
  std::string name() const override { return "MultiNodeEvaluator"; }
  int priority() const override { return 300; }
  void operator()(Trainer& trainer) override;
  // The local evaluation, averaged over ranks (keys without the prefix).
  Observation evaluate();

 private:
  std::shared_ptr<Evaluator> evaluator_;
  CommunicatorPtr comm_;
  std::string prefix_;
};

std::shared_ptr<MultiNodeEvaluator> create_multi_node_evaluator(std::shared_ptr<Evaluator> evaluator,
                                                                CommunicatorPtr comm);

}  // namespace tandem
