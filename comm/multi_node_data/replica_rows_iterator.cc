#include "comm/multi_node_data/replica_rows_iterator.h"

#include "comm/tensor_parallel/parallel_region.h"
#include "core/error.h"

namespace tandem {

ReplicaRowsIterator::ReplicaRowsIterator(std::shared_ptr<Iterator> global, int replica, int replicas)
    : global_(std::move(global)), replica_(replica), replicas_(replicas) {
  TANDEM_CHECK(global_ != nullptr, "ReplicaRowsIterator: no global iterator");
  TANDEM_CHECK(replicas >= 1 && replica >= 0 && replica < replicas, "ReplicaRowsIterator: replica ", replica, " of ",
               replicas);
}

Example ReplicaRowsIterator::next() {
  const Example batch = global_->next();
  if (batch.empty()) return batch;
  const std::int64_t examples = batch[0].dim() >= 1 ? batch[0].size(0) : 0;
  const Share rows = share_of(examples, replica_, replicas_);
  TANDEM_CHECK(rows.size() > 0, "ReplicaRowsIterator: a global batch of ", examples,
               " example(s) leaves none to replica ", replica_, " of ", replicas_);
  Example mine;
  for (const Tensor& field : batch) {
    TANDEM_CHECK(field.dim() >= 1 && field.size(0) == examples, "ReplicaRowsIterator: field ", field.description(),
                 " of a batch of ", examples, " examples");
    mine.push_back(field.slice_rows(rows.begin, rows.end));
  }
  return mine;
}

}  // namespace tandem
