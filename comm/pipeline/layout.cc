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

}  // namespace pipeline
}  // namespace tandem
