// Pipeline × data parallelism: the world's ranks as `data_parallel` pipelines of
// size / data_parallel ranks each. Consecutive ranks form a pipeline (ranks 0..P-1 the first,
// P..2P-1 the next), so a pipeline's neighbours are usually on one host and the data-parallel
// allreduce, once per step, crosses hosts (as Megatron-LM's layout puts pipeline stages outer).
//
//   PipelineLayout layout = make_pipeline_layout(world, 2);          // 4 ranks: 2 pipelines of 2
//   auto pipe = std::make_shared<Pipeline>(layout.pipeline, one_f_one_b(layout.stage_ranks, 8), stages);
//   auto optimizer = create_multi_node_optimizer(std::make_shared<Adam>(), layout.data);
//   train = scatter_dataset(train, layout.data);    // each pipeline its own share; not shuffled
//                                                   // there, so the ranks of a pipeline agree
// Gradients are then averaged over the ranks that hold the same stages (layout.data).
#pragma once

#include "comm/transport/communicator.h"

namespace tandem {
namespace pipeline {

struct PipelineLayout {
  CommunicatorPtr pipeline;  // this rank's pipeline, ordered by stage rank
  CommunicatorPtr data;      // the ranks holding the same stages, one per pipeline, in pipeline order
  int pipelines = 1;         // data_parallel
  int stage_ranks = 1;       // ranks per pipeline
  int pipeline_index = 0;    // which pipeline this rank is in
  int stage_rank = 0;        // this rank's place in its pipeline
};

// Collective over world. Error (on every rank alike) unless data_parallel divides world->size().
PipelineLayout make_pipeline_layout(CommunicatorPtr world, int data_parallel);

// Tensor x pipeline x data parallelism (Megatron-LM's order): the world's ranks as
// size / (tensor x pipeline) replicas (data parallelism) of a pipeline of `pipeline` stage
// ranks, each stage split over `tensor` consecutive ranks:
//   rank = (data_rank * pipeline + stage_rank) * tensor + tensor_rank
// A tensor group is neighbours (it talks most: two allreduces per transformer block in each
// direction), a pipeline sends once per microbatch and stage, and the data-parallel allreduce
// (once per step) spans the farthest ranks. Every rank of a tensor group runs the same pipeline
// schedule on the same data, so each of the `tensor` pipelines of a replica carries the same
// activations.
//   ParallelLayout layout = make_parallel_layout(world, 2, 2);   // 8 ranks: tp 2 x pp 2 x dp 2
//   auto block = make_parallel_transformer_block(layout.tensor, dim, options);
//   auto pipe = std::make_shared<Pipeline>(layout.pipeline, one_f_one_b(2, 8), stages);
//   auto optimizer = create_multi_node_optimizer(std::make_shared<Adam>(), layout.data);
struct ParallelLayout {
  CommunicatorPtr tensor;    // the ranks splitting this rank's stages, ordered by tensor_rank
  CommunicatorPtr pipeline;  // one rank per stage rank (the same tensor_rank and data_rank), in stage order
  CommunicatorPtr data;      // the replicas of this rank (the same tensor_rank and stage_rank), in data order
  int tensor_parallel = 1, pipeline_parallel = 1, data_parallel = 1;
  int tensor_rank = 0, stage_rank = 0, data_rank = 0;
};

// Collective over world. Error (on every rank alike) unless tensor x pipeline divides the size.
ParallelLayout make_parallel_layout(CommunicatorPtr world, int tensor_parallel, int pipeline_parallel);

}  // namespace pipeline
}  // namespace tandem
