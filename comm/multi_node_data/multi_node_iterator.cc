#include "comm/multi_node_data/multi_node_iterator.h"

#include <cstring>
#include <exception>
#include <functional>
#include <string>

#include "comm/multi_node_data/agreement.h"
#include "core/error.h"

namespace tandem {

// What the master tells the other ranks after each collective call: what happened and the
// counters afterwards. Sent as bytes (bcast_obj), field by field in a fixed order (the ranks of
// one job share one ABI; no struct padding goes on the wire).
struct MultiNodeIterator::Status {
  enum Kind : std::uint8_t { kCounters = 0, kBatch = 1, kStop = 2, kFailed = 3 };
  struct Fixed {
    std::uint8_t kind = kCounters;
    std::uint8_t has_next = 0;
    std::uint8_t is_new_epoch = 0;
    std::int64_t epoch = 0;
    std::int64_t position = 0;
    std::int64_t num_fields = 0;
    double epoch_detail = 0;
    double previous_epoch_detail = -1;  // negative: none

    // Applies `visit` to every field, in wire order.
    template <typename F> void each(F&& visit) {
      visit(kind);
      visit(has_next);
      visit(is_new_epoch);
      visit(epoch);
      visit(position);
      visit(num_fields);
      visit(epoch_detail);
      visit(previous_epoch_detail);
    }
  } fixed;
  std::string message;  // the master's error, for kFailed

  std::string encode() const {
    std::string bytes;
    Fixed copy = fixed;
    copy.each([&](const auto& value) { bytes.append(reinterpret_cast<const char*>(&value), sizeof(value)); });
    return bytes + message;
  }
  static Status decode(const std::string& bytes, const char* operation) {
    Status status;
    std::size_t offset = 0;
    status.fixed.each([&](auto& value) {
      TANDEM_CHECK(offset + sizeof(value) <= bytes.size(), operation, ": the master's control message is truncated (",
                   bytes.size(), " bytes)");
      std::memcpy(&value, bytes.data() + offset, sizeof(value));
      offset += sizeof(value);
    });
    status.message = bytes.substr(offset);
    TANDEM_CHECK(status.fixed.kind <= kFailed, operation, ": the master's control message has an unknown kind ",
                 int(status.fixed.kind));
    return status;
  }
};

namespace {

// Runs `step` on the master and broadcasts its outcome (the Status it returns, or its failure).
// Every rank returns the same Status; a failure is rethrown on the master and becomes an Error
// naming the master elsewhere.
template <typename Status>
Status run_collective(Communicator& comm, int master, const char* operation, const std::function<Status()>& step) {
  const bool is_master = comm.rank() == master;
  Status status;
  std::exception_ptr failure;
  if (is_master) {
    try {
      status = step();
    } catch (const std::exception& e) {
      failure = std::current_exception();
      status = Status{};
      status.fixed.kind = Status::kFailed;
      status.message = e.what();
    }
  }
  const std::string bytes = comm.bcast_obj(is_master ? status.encode() : std::string(), master);
  if (failure) std::rethrow_exception(failure);
  if (!is_master) status = Status::decode(bytes, operation);
  TANDEM_CHECK(status.fixed.kind != Status::kFailed, operation, ": the master (rank ", master, ") failed: ",
               status.message);
  return status;
}

}  // namespace

MultiNodeIterator::MultiNodeIterator(std::shared_ptr<Iterator> actual, Communicator& comm, int rank_master)
    : comm_(comm.shared_from_this()), rank_master_(rank_master) {
  // Every rank passes the same rank_master, so every rank reaches this verdict (ranks that pass
  // different ones fail in the broadcast below, which checks that the roots agree).
  comm_data_detail::check_root(comm, rank_master, "create_multi_node_iterator", "rank_master");
  if (is_master()) actual_ = std::move(actual);
  adopt(run_collective<Status>(*comm_, rank_master_, "create_multi_node_iterator", [&] {
    TANDEM_CHECK(actual_ != nullptr, "create_multi_node_iterator: the master (rank ", rank_master_,
                 ") passed a null iterator");
    return master_status();
  }));
}

MultiNodeIterator::Status MultiNodeIterator::master_status() const {
  Status status;
  status.fixed.has_next = actual_->has_next();
  status.fixed.is_new_epoch = actual_->is_new_epoch();
  status.fixed.epoch = actual_->epoch();
  // SerialIterator says its position cheaply; other iterators through their state.
  const auto* serial = dynamic_cast<const SerialIterator*>(actual_.get());
  status.fixed.position = serial ? serial->current_position() : actual_->state().position;
  status.fixed.epoch_detail = actual_->epoch_detail();
  status.fixed.previous_epoch_detail = actual_->previous_epoch_detail().value_or(-1);
  return status;
}

void MultiNodeIterator::adopt(const Status& status) {
  has_next_ = status.fixed.has_next != 0;
  is_new_epoch_ = status.fixed.is_new_epoch != 0;
  epoch_ = status.fixed.epoch;
  position_ = status.fixed.position;
  epoch_detail_ = status.fixed.epoch_detail;
  previous_epoch_detail_ = status.fixed.previous_epoch_detail;
}

Example MultiNodeIterator::next() {
  const char* operation = "MultiNodeIterator::next";
  // has_next_ is the master's flag from the last collective call, the same on every rank.
  if (!has_next_)
    throw StopIteration(detail::concat(operation, ": the master's iterator (rank ", rank_master_,
                                       ") has no more batches; call reset() on every rank to iterate again"));
  Example batch;
  const Status status = run_collective<Status>(*comm_, rank_master_, operation, [&] {
    Status s;
    try {
      batch = actual_->next();
    } catch (const StopIteration&) {  // an iterator whose has_next() was optimistic
      s = master_status();
      s.fixed.kind = Status::kStop;
      s.fixed.has_next = 0;
      return s;
    }
    for (std::size_t f = 0; f < batch.size(); ++f)
      TANDEM_CHECK(batch[f].defined(), operation, ": field ", f, " of the master's batch is undefined");
    s = master_status();
    s.fixed.kind = Status::kBatch;
    s.fixed.num_fields = static_cast<std::int64_t>(batch.size());
    return s;
  });
  adopt(status);
  if (status.fixed.kind == Status::kStop)
    throw StopIteration(detail::concat(operation, ": the master's iterator (rank ", rank_master_,
                                       ") has no more batches"));
  if (!is_master()) batch.resize(static_cast<std::size_t>(status.fixed.num_fields));
  for (Tensor& field : batch) field = comm_->bcast(is_master() ? field : Tensor(), rank_master_);
  return batch;
}

std::optional<double> MultiNodeIterator::previous_epoch_detail() const {
  if (previous_epoch_detail_ < 0) return std::nullopt;
  return previous_epoch_detail_;
}

void MultiNodeIterator::reset() {
  adopt(run_collective<Status>(*comm_, rank_master_, "MultiNodeIterator::reset", [&] {
    actual_->reset();
    return master_status();
  }));
}

IteratorState MultiNodeIterator::state() const {
  if (is_master()) return actual_->state();
  IteratorState state;
  state.epoch = epoch_;
  state.position = position_;
  state.is_new_epoch = is_new_epoch_;
  state.previous_epoch_detail = previous_epoch_detail_;
  return state;
}

void MultiNodeIterator::restore(const IteratorState& state) {
  adopt(run_collective<Status>(*comm_, rank_master_, "MultiNodeIterator::restore", [&] {
    actual_->restore(state);
    return master_status();
  }));
}

std::shared_ptr<MultiNodeIterator> create_multi_node_iterator(std::shared_ptr<Iterator> actual, Communicator& comm,
                                                              int rank_master) {
  return std::make_shared<MultiNodeIterator>(std::move(actual), comm, rank_master);
}

}  // namespace tandem
