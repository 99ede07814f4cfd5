#include "comm/pipeline/layout.h"

#include "core/error.h"

namespace tandem {
namespace pipeline {

PipelineLayout make_pipeline_layout(CommunicatorPtr world, int data_parallel) {
  TANDEM_CHECK(world != nullptr, "make_pipeline_layout: a communicator is required");
  const int size = world->size();
  TANDEM_CHECK(data_parallel >= 1 && size % data_parallel == 0, "make_pipeline_layout: ", size,
               " rank(s) cannot form ", data_parallel, " pipelines of equal length (data_parallel must divide ", size,
               ")");
  PipelineLayout layout;
  layout.pipelines = data_parallel;
  layout.stage_ranks = size / data_parallel;
  layout.pipeline_index = world->rank() / layout.stage_ranks;
  layout.stage_rank = world->rank() % layout.stage_ranks;
  layout.pipeline = world->split(layout.pipeline_index, layout.stage_rank);
  layout.data = world->split(layout.stage_rank, layout.pipeline_index);
  return layout;
}

ParallelLayout make_parallel_layout(CommunicatorPtr world, int tensor_parallel, int pipeline_parallel) {
  TANDEM_CHECK(world != nullptr, "make_parallel_layout: a communicator is required");
  const int size = world->size(), rank = world->rank();
  TANDEM_CHECK(tensor_parallel >= 1 && pipeline_parallel >= 1 && size % (tensor_parallel * pipeline_parallel) == 0,
               "make_parallel_layout: ", size, " rank(s) cannot be split as tensor parallel ", tensor_parallel,
               " x pipeline parallel ", pipeline_parallel, " x data parallel (both at least 1, and their product ",
               tensor_parallel * pipeline_parallel, " must divide ", size, ")");
  ParallelLayout layout;
  layout.tensor_parallel = tensor_parallel;
  layout.pipeline_parallel = pipeline_parallel;
  layout.data_parallel = size / (tensor_parallel * pipeline_parallel);
  layout.tensor_rank = rank % tensor_parallel;
  layout.stage_rank = rank / tensor_parallel % pipeline_parallel;
  layout.data_rank = rank / (tensor_parallel * pipeline_parallel);
  // Each split's colour names the group, its key the place in it.
  layout.tensor = world->split(rank / tensor_parallel, layout.tensor_rank);
  layout.pipeline = world->split(layout.data_rank * tensor_parallel + layout.tensor_rank, layout.stage_rank);
  layout.data = world->split(layout.stage_rank * tensor_parallel + layout.tensor_rank, layout.data_rank);
  return layout;
}

}  // namespace pipeline
}  // namespace tandem
