#include "comm/multi_node_training/multi_node_evaluator.h"

#include <functional>

#include "core/error.h"

namespace tandem {

MultiNodeEvaluator::MultiNodeEvaluator(std::shared_ptr<Evaluator> evaluator, CommunicatorPtr comm, std::string prefix)
    : evaluator_(std::move(evaluator)), comm_(std::move(comm)), prefix_(std::move(prefix)) {
  TANDEM_CHECK(evaluator_ && comm_, "create_multi_node_evaluator: an evaluator and a communicator are required");
}

Observation MultiNodeEvaluator::evaluate() {
  const Observation local = evaluator_->evaluate();
  // Agree on the metric names first (every rank sees every rank's list, so all reach the
  // same verdict), then average the values in one allreduce.
  std::string names;
  for (const auto& entry : local) names += entry.first + "\n";
  const std::vector<Tensor> all = comm_->allgather(
      full({}, static_cast<double>(std::hash<std::string>{}(names) & 0x7fffffffffffffULL), DType::i64));
  for (int r = 0; r < comm_->size(); ++r) {
    TANDEM_CHECK(all[r].item() == all[0].item(), "MultiNodeEvaluator: the ranks report different metrics (rank ",
                 comm_->rank(), " reports: ", names.empty() ? "none" : names, ")");
  }
  Tensor values({static_cast<std::int64_t>(local.size())}, DType::f64);
  double* v = values.data<double>();
  for (const auto& entry : local) *v++ = entry.second;
  const Tensor mean = comm_->allreduce(values, AllreduceOp::mean);
  Observation result;
  const double* m = mean.data<double>();
  for (const auto& entry : local) result[entry.first] = *m++;
  return result;
}

void MultiNodeEvaluator::operator()(Trainer& trainer) {
  for (const auto& [key, value] : evaluate()) trainer.observation()[prefix_ + "/main/" + key] = value;
}

std::shared_ptr<MultiNodeEvaluator> create_multi_node_evaluator(std::shared_ptr<Evaluator> evaluator,
                                                                CommunicatorPtr comm) {
  return std::make_shared<MultiNodeEvaluator>(std::move(evaluator), std::move(comm));
}

}  // namespace tandem
