// Iterators over datasets (chainer.dataset.Iterator, chainer.iterators.SerialIterator): they
// cut a dataset into minibatches, epoch after epoch, and report progress in epochs.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/dataset.h"

namespace tandem {

// Thrown by Iterator::next() once a non-repeating iterator has finished its epoch (Python's
// StopIteration). Check has_next() to avoid it.
class StopIteration : public Error {
 public:
  explicit StopIteration(const std::string& what) : Error(what) {}
};

// A snapshot of an iterator's progress, enough to continue exactly where it was (for resuming
// training from a snapshot). Plain data: write the fields out however the snapshot format likes.
struct IteratorState {
  std::int64_t epoch = 0;
  std::int64_t position = 0;  // current_position(): examples of this epoch already served
  bool is_new_epoch = false;
  double previous_epoch_detail = -1;  // negative: no batch served yet
  std::vector<std::int64_t> order;    // this epoch's order; empty when not shuffling
  std::string rng;                    // the std::mt19937_64 state, as its operator<< writes it
};

class Iterator {
 public:
  virtual ~Iterator() = default;
  // False once a non-repeating iterator has served its epoch.
  virtual bool has_next() const = 0;
  // The next minibatch, its fields stacked (concat_examples); throws StopIteration when
  // has_next() is false.
  virtual Example next() = 0;
  // Completed epochs.
  virtual std::int64_t epoch() const = 0;
  // epoch() + the fraction of the current epoch already served.
  virtual double epoch_detail() const = 0;
  // epoch_detail() before the last next(); none before the first.
  virtual std::optional<double> previous_epoch_detail() const = 0;
  // Whether the last next() crossed an epoch boundary.
  virtual bool is_new_epoch() const = 0;
  // Back to the start of epoch 0 (with a fresh order when shuffling).
  virtual void reset() = 0;
  virtual IteratorState state() const = 0;
  // Continues exactly as the iterator whose state() this was; validates it against the dataset.
  virtual void restore(const IteratorState& state) = 0;
};

// chainer.iterators.SerialIterator: minibatches of `batch_size` examples, in order or shuffled
// (a new random order each epoch).
//
// With repeat, iteration never ends, and a batch that crosses the end of an epoch takes the
// rest of it and continues at the start of the next (reshuffled) epoch, so every batch is
// full. E.g. 10 examples in batches of 4: epoch_detail 0.4, 0.8, 1.2 (epoch 1, new epoch),
// 1.6, 2.0 (new epoch), ... Without repeat, one epoch is served, the last batch short
// (4, 4, 2), after which has_next() is false and next() throws StopIteration.
//
// Shuffling draws from a std::mt19937_64 seeded with `seed` (the same seed gives the same
// orders, on any platform); without a seed, one is drawn from tandem::global_generator(), so
// tandem::manual_seed makes it reproducible too. reset() does not reseed: it draws a new
// order from the continuing stream, as Chainer does. Not thread-safe.
class SerialIterator final : public Iterator {
 public:
  SerialIterator(DatasetPtr dataset, std::int64_t batch_size, bool repeat = true, bool shuffle = true,
                 std::optional<std::uint64_t> seed = std::nullopt);

  bool has_next() const override;
  // Advances as next() does and returns the dataset indices of the batch without fetching it.
  std::vector<std::int64_t> next_indices();
  // dataset()->get_batch(next_indices()).
  Example next() override;

  std::int64_t epoch() const override { return epoch_; }
  double epoch_detail() const override;
  std::optional<double> previous_epoch_detail() const override;
  bool is_new_epoch() const override { return is_new_epoch_; }
  // Examples of the current epoch already served (an index into the epoch's order).
  std::int64_t current_position() const { return position_; }
  void reset() override;
  IteratorState state() const override;
  void restore(const IteratorState& state) override;

  const DatasetPtr& dataset() const { return dataset_; }
  std::int64_t batch_size() const { return batch_size_; }
  bool repeat() const { return repeat_; }
  bool shuffle() const { return shuffle_; }
  // This epoch's order of dataset indices (empty when not shuffling: the identity).
  const std::vector<std::int64_t>& order() const { return order_; }

 private:
  DatasetPtr dataset_;
  std::int64_t batch_size_;
  bool repeat_, shuffle_;
  std::mt19937_64 engine_;
  std::int64_t epoch_ = 0;
  std::int64_t position_ = 0;
  bool is_new_epoch_ = false;
  double previous_epoch_detail_ = -1;
  std::vector<std::int64_t> order_;
};

}  // namespace tandem
