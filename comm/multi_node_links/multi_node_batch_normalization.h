// MultiNodeBatchNormalization (ChainerMN's links.MultiNodeBatchNormalization): a drop-in for
// BatchNormalization in data-parallel training whose statistics are those of the global batch,
// all ranks' examples together (functions/multi_node_batch_normalization.h), so that small
// per-rank batches normalise as one large batch would. Outside training it is exactly
// BatchNormalization with the running averages, which are equal on every rank. Its parameters
// and persistents have BatchNormalization's names, so snapshots load into either.
#pragma once

#include "comm/transport/communicator.h"
#include "layers/links/batch_normalization.h"

namespace tandem {

class MultiNodeBatchNormalization : public BatchNormalization {
 public:
  MultiNodeBatchNormalization(std::int64_t size, CommunicatorPtr comm, double decay = 0.9, double eps = 2e-5,
                              DType dtype = DType::f32);
  std::string type_name() const override { return "MultiNodeBatchNormalization"; }
  Variable forward(const Variable& x) override;

 private:
  CommunicatorPtr comm_;
};

}  // namespace tandem
