// Data parallelism over global batches: every rank iterates the same global batches (an
// iterator seeded alike everywhere) and this iterator hands data replica d of n its rows of each,
// share_of(B, d, n) (comm/tensor_parallel/parallel_region.h). The replicas' averaged gradients are
// then the whole batch's, so that a run takes the same steps on any number of replicas; in
// deterministic mode bit for bit (core/deterministic.h), where the iterator's batches are what
// StandardUpdater splits into gradient groups. Epochs, state and resuming are the global
// iterator's.
#pragma once

#include <memory>

#include "data/iterator.h"

namespace tandem {

class ReplicaRowsIterator : public Iterator {
 public:
  ReplicaRowsIterator(std::shared_ptr<Iterator> global, int replica, int replicas);

  bool has_next() const override { return global_->has_next(); }
  // This replica's rows of the global iterator's next batch (an error where they are none).
  Example next() override;
  std::int64_t epoch() const override { return global_->epoch(); }
  double epoch_detail() const override { return global_->epoch_detail(); }
  std::optional<double> previous_epoch_detail() const override { return global_->previous_epoch_detail(); }
  bool is_new_epoch() const override { return global_->is_new_epoch(); }
  void reset() override { global_->reset(); }
  IteratorState state() const override { return global_->state(); }
  void restore(const IteratorState& state) override { global_->restore(state); }

 private:
  std::shared_ptr<Iterator> global_;
  int replica_, replicas_;
};

}  // namespace tandem
