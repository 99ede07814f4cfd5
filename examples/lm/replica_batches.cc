#include "examples/lm/replica_batches.h"

#include "comm/tensor_parallel/parallel_region.h"
#include "core/ops.h"

namespace tandem::examples {

namespace {

// (loss, observation) averaged over the data group, weighted by each replica's examples. The
// replicas run the same code, so their observations have the same names.
pipeline::StepResult average_over_replicas(const pipeline::StepResult& step, const pipeline::ParallelLayout& layout) {
  if (layout.data_parallel == 1) return step;
  std::vector<double> sums{static_cast<double>(step.examples), step.loss * static_cast<double>(step.examples)};
  for (const auto& [name, value] : step.observation) sums.push_back(value * static_cast<double>(step.examples));
  const std::vector<double> total =
      layout.data->allreduce(from_vector(sums, {static_cast<std::int64_t>(sums.size())})).to_vector<double>();
  pipeline::StepResult mean = step;
  mean.examples = static_cast<std::int64_t>(total[0]);
  mean.loss = total[1] / total[0];
  std::size_t i = 2;
  for (auto& [name, value] : mean.observation) value = total[i++] / total[0];
  return mean;
}

}  // namespace

Example replica_rows(const Example& batch, const pipeline::ParallelLayout& layout, const ContextParallel* cp) {
  if (layout.data_parallel == 1) return batch;
  TANDEM_CHECK(!batch.empty(), "replica_rows: an empty batch");
  const int group = cp ? cp->communicator().size() : 1;
  const int replicas = layout.data_parallel / group, replica = layout.data_rank / group;
  const Share rows = share_of(batch[0].size(0), replica, replicas);
  TANDEM_CHECK(rows.size() > 0, "replica_rows: a batch of ", batch[0].size(0), " example(s) leaves none to replica ",
               replica, " of ", replicas);
  Example mine;
  for (const Tensor& field : batch) {
    const Tensor part = field.slice_rows(rows.begin, rows.end);
    mine.push_back(cp ? cp->shard(Variable(part), 1).data() : part);
  }
  return mine;
}

LossFunction replica_loss(std::shared_ptr<pipeline::Pipeline> pipe, pipeline::ParallelLayout layout,
                          std::shared_ptr<ContextParallel> cp) {
  TANDEM_CHECK(pipe != nullptr, "replica_loss: a pipeline is required");
  return [pipe, layout, cp](const Example& batch) {
    const pipeline::StepResult step = average_over_replicas(pipe->step(replica_rows(batch, layout, cp.get())), layout);
    LossResult result;
    result.loss = Variable(full({}, step.loss, DType::f64));
    result.observation = step.observation;
    result.observation.erase("loss");  // the updater reports the loss itself
    result.backward_done = true;
    return result;
  };
}

std::shared_ptr<Evaluator> replica_evaluator(std::shared_ptr<Iterator> iterator,
                                             std::shared_ptr<pipeline::Pipeline> pipe, pipeline::ParallelLayout layout,
                                             std::shared_ptr<ContextParallel> cp) {
  TANDEM_CHECK(pipe != nullptr, "replica_evaluator: a pipeline is required");
  return std::make_shared<Evaluator>(std::move(iterator), [pipe, layout, cp](const Example& batch) {
    const pipeline::StepResult step =
        average_over_replicas(pipe->evaluate(replica_rows(batch, layout, cp.get())), layout);
    Observation observation = step.observation;
    observation["loss"] = step.loss;
    return observation;
  });
}

}  // namespace tandem::examples
