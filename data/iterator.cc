#include "data/iterator.h"

#include <algorithm>
#include <sstream>

#include "core/random.h"
#include "data/permutation.h"

namespace tandem {

SerialIterator::SerialIterator(DatasetPtr dataset, std::int64_t batch_size, bool repeat, bool shuffle,
                               std::optional<std::uint64_t> seed)
    : dataset_(std::move(dataset)), batch_size_(batch_size), repeat_(repeat), shuffle_(shuffle) {
  TANDEM_CHECK(dataset_ != nullptr, "SerialIterator: the dataset is null");
  TANDEM_CHECK(batch_size_ > 0, "SerialIterator: batch_size must be positive, got ", batch_size_);
  TANDEM_CHECK(!repeat_ || dataset_->size() > 0,
               "SerialIterator: the dataset is empty; a repeating iterator needs at least one example");
  engine_.seed(seed ? *seed : global_generator().next());
  reset();
}

bool SerialIterator::has_next() const { return repeat_ || (epoch_ == 0 && dataset_->size() > 0); }

std::vector<std::int64_t> SerialIterator::next_indices() {
  if (!has_next())
    throw StopIteration(detail::concat("SerialIterator: the epoch is over (repeat = false, ", dataset_->size(),
                                       " examples served); call reset() to iterate again"));
  // chainer/iterators/_statemachine.py, with the order reshuffled at every epoch end.
  const std::int64_t n = dataset_->size();
  previous_epoch_detail_ = epoch_detail();
  std::vector<std::int64_t> indices;
  indices.reserve(static_cast<std::size_t>(repeat_ ? batch_size_ : std::min(batch_size_, n - position_)));
  auto take = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t k = begin; k < end; ++k) indices.push_back(shuffle_ ? order_[k] : k);
  };
  std::int64_t i = position_;
  std::int64_t i_end = repeat_ ? i + batch_size_ : std::min(i + batch_size_, n);
  bool new_epoch = false;
  while (i_end >= n) {
    take(i, n);
    if (shuffle_) order_ = random_permutation(n, engine_);
    i = 0;
    i_end = repeat_ ? i_end - n : 0;
    ++epoch_;
    new_epoch = true;
  }
  take(i, i_end);
  position_ = i_end;
  is_new_epoch_ = new_epoch;
  return indices;
}

Example SerialIterator::next() { return dataset_->get_batch(next_indices()); }

double SerialIterator::epoch_detail() const {
  const std::int64_t n = dataset_->size();
  return n == 0 ? static_cast<double>(epoch_)
                : static_cast<double>(epoch_) + static_cast<double>(position_) / static_cast<double>(n);
}

std::optional<double> SerialIterator::previous_epoch_detail() const {
  if (previous_epoch_detail_ < 0) return std::nullopt;
  return previous_epoch_detail_;
}

void SerialIterator::reset() {
  epoch_ = 0;
  position_ = 0;
  is_new_epoch_ = false;
  previous_epoch_detail_ = -1;
  order_.clear();
  if (shuffle_) order_ = random_permutation(dataset_->size(), engine_);
}

IteratorState SerialIterator::state() const {
  IteratorState state;
  state.epoch = epoch_;
  state.position = position_;
  state.is_new_epoch = is_new_epoch_;
  state.previous_epoch_detail = previous_epoch_detail_;
  state.order = order_;
  std::ostringstream rng;
  rng << engine_;
  state.rng = rng.str();
  return state;
}

void SerialIterator::restore(const IteratorState& state) {
  // Everything is validated before anything changes.
  const std::int64_t n = dataset_->size();
  TANDEM_CHECK(state.epoch >= 0, "SerialIterator::restore: negative epoch ", state.epoch);
  TANDEM_CHECK(0 <= state.position && (state.position < n || state.position == 0),
               "SerialIterator::restore: position ", state.position, " is out of range for a dataset of size ", n);
  if (shuffle_) {
    TANDEM_CHECK(is_permutation_of(state.order, n), "SerialIterator::restore: the order (", state.order.size(),
                 " entries) is not a permutation of the dataset's ", n, " indices");
  } else {
    TANDEM_CHECK(state.order.empty(), "SerialIterator::restore: the state has an order of ", state.order.size(),
                 " entries but this iterator does not shuffle");
  }
  std::mt19937_64 engine;
  std::istringstream rng(state.rng);
  rng >> engine;
  TANDEM_CHECK(!rng.fail(), "SerialIterator::restore: the rng state is not a std::mt19937_64 state (",
               state.rng.size(), " characters)");
  epoch_ = state.epoch;
  position_ = state.position;
  is_new_epoch_ = state.is_new_epoch;
  previous_epoch_detail_ = state.previous_epoch_detail;
  order_ = state.order;
  engine_ = engine;
}

}  // namespace tandem
