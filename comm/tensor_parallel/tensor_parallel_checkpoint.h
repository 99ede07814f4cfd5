// Converting a tensor-parallel model's parameters to and from the unsplit model's, so that a
// checkpoint written by one process loads into a split model and the other way round (and a run
// can change its number of tensor-parallel ranks through the unsplit form).
//
// The layers that split a parameter (ColumnParallelLinear, RowParallelLinear,
// VocabParallelEmbedding, ParallelConvolution2D) say which, along which axis and over which
// group (TensorParallelLink); every other parameter is replicated and taken as it is. Names are
// the model's own ("0/W", "encoder/embed/W"), which are the unsplit model's when the split model
// has the same structure (the layers use Linear's and EmbedID's parameter names).
//
//   NamedTensors whole = gather_tensor_parallel_params(*model);   // every rank: the unsplit values
//   if (rank == 0) write_npz("model.npz", whole);                 // a one-process checkpoint
//   scatter_tensor_parallel_params(*model, read_npz("model.npz")); // and back, at any split
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/transport/communicator.h"
#include "layers/link.h"
#include "layers/serializers/npz.h"

namespace tandem {

// Implemented by the layers whose parameters are split across a group of ranks.
class TensorParallelLink {
 public:
  virtual ~TensorParallelLink() = default;
  virtual Communicator& group() const = 0;
  // This layer's own parameters that are split, by name, with the axis; the others are replicated.
  // Rank r of the group holds share_of(the unsplit extent, r, size) along the axis.
  virtual std::map<std::string, std::int64_t> split_axes() const = 0;

 protected:
  // Once, at a layer's first forward: the ranks of the group must have built it with the same
  // unsplit sizes (else each would hold a share of a different layer and compute garbage). One
  // allgather; a disagreement is an error on every rank naming the layer, both ranks and sizes.
  void check_group_agrees(const std::string& layer, const std::vector<std::int64_t>& sizes);

 private:
  bool agreed_ = false;
};

// Every parameter of the model as the unsplit model holds it: each split parameter allgathered
// over its group and concatenated along its axis, the others as they are. Collective over every
// group in the model (each rank visits the layers in the same order). The same on every rank.
NamedTensors gather_tensor_parallel_params(Link& model);

// The reverse: each rank takes its share of every split parameter (and the whole of the
// others) from the unsplit values. Errors name the parameter: a name missing from `whole`, a
// value whose shape is not the unsplit parameter's, or a parameter not initialised yet.
void scatter_tensor_parallel_params(Link& model, const NamedTensors& whole);

}  // namespace tandem
