// chainermn.iterators.create_multi_node_iterator: every rank gets the master's batches.
//
// For model parallelism: the ranks that hold different parts of one model must see the same
// batch in every iteration (the encoder's inputs and the decoder's targets of the same
// examples). The master (`rank_master`) runs its actual iterator and broadcasts each batch, with
// its epoch counters and whether data remains, so every rank sees the same batch, the same
// epoch, epoch_detail, previous_epoch_detail and is_new_epoch, and the same end of data.
//
// Collective calls (every rank of the communicator, in the same order): construction, next(),
// reset() and restore(). Local calls (no communication): has_next(), the counters and state().
// Construction broadcasts the master's starting counters and has_next; every next(), reset()
// and restore() broadcasts them again, so has_next() and the counters are always the master's
// latest values on every rank, and never need an exchange of their own.
//
// Messages per next(): one small control message (bcast_obj: whether a batch follows, the
// counters, the number of fields), then one comm.bcast per field (any dtype and shape; the
// fields must be on a device the communicator can send, the CPU for "naive"). Once has_next()
// is false, next() throws StopIteration on every rank without communicating. If the master's
// iterator throws (in next, reset or restore), the master rethrows it after telling the other
// ranks, which throw a tandem::Error naming the master and quoting its message, so no rank is
// left waiting.
//
// state() on the master is the actual iterator's state. Elsewhere it mirrors the counters
// (epoch, position, is_new_epoch, previous_epoch_detail) with no order and no rng: the master's
// state is the truth. restore(state) uses the master's argument and ignores the others', so
// every rank may pass whatever it saved.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "comm/transport/communicator.h"
#include "data/iterator.h"

namespace tandem {

class MultiNodeIterator final : public Iterator {
 public:
  // Collective. `actual` is used on the master (where it must not be null; a null one is an
  // error on every rank) and ignored elsewhere (pass nullptr). The iterator takes over
  // `actual`: advancing or resetting it directly afterwards desynchronises the ranks.
  MultiNodeIterator(std::shared_ptr<Iterator> actual, Communicator& comm, int rank_master = 0);

  bool has_next() const override { return has_next_; }
  // Collective: the master's next batch on every rank (the master's own tensors on the master,
  // received copies elsewhere).
  Example next() override;
  std::int64_t epoch() const override { return epoch_; }
  double epoch_detail() const override { return epoch_detail_; }
  std::optional<double> previous_epoch_detail() const override;
  bool is_new_epoch() const override { return is_new_epoch_; }
  // Collective: resets the master's iterator.
  void reset() override;
  IteratorState state() const override;
  // Collective: restores the master's iterator from the master's `state`.
  void restore(const IteratorState& state) override;

  bool is_master() const { return comm_->rank() == rank_master_; }
  int rank_master() const { return rank_master_; }
  // The actual iterator on the master; null elsewhere.
  const std::shared_ptr<Iterator>& actual() const { return actual_; }

 private:
  struct Status;  // the master's control message
  // The actual iterator's counters (master only).
  Status master_status() const;
  void adopt(const Status& status);

  std::shared_ptr<Iterator> actual_;
  CommunicatorPtr comm_;
  int rank_master_;
  bool has_next_ = false;
  std::int64_t epoch_ = 0;
  std::int64_t position_ = 0;
  double epoch_detail_ = 0;
  double previous_epoch_detail_ = -1;
  bool is_new_epoch_ = false;
};

// A MultiNodeIterator over `actual` (collective; see above).
std::shared_ptr<MultiNodeIterator> create_multi_node_iterator(std::shared_ptr<Iterator> actual, Communicator& comm,
                                                              int rank_master = 0);

}  // namespace tandem
