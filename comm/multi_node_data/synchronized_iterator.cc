#include "comm/multi_node_data/synchronized_iterator.h"

#include "comm/multi_node_data/agreement.h"
#include "core/error.h"
#include "core/random.h"

namespace tandem {

namespace {

// Agrees on the iterator's parameters and returns rank 0's seed (one allgather).
std::uint64_t agree_on_seed(Communicator& comm, std::int64_t size, std::int64_t batch_size, bool repeat,
                            bool shuffle, std::optional<std::uint64_t> seed) {
  const char* operation = "create_synchronized_iterator";
  std::uint64_t mine = 0;
  if (comm.rank() == 0) mine = seed ? *seed : global_generator().next();
  const auto all = comm_data_detail::allgather_values(
      comm, {size, batch_size, repeat ? 1 : 0, shuffle ? 1 : 0, static_cast<std::int64_t>(mine)}, operation);
  comm_data_detail::require_same(all, 0, operation, "the dataset's length",
                                 "every rank's dataset must have the same length, for the orders to match", true);
  comm_data_detail::require_same(all, 1, operation, "batch_size", "every rank must pass the same batch_size");
  comm_data_detail::require_same(all, 2, operation, "repeat", "every rank must pass the same repeat");
  comm_data_detail::require_same(all, 3, operation, "shuffle", "every rank must pass the same shuffle");
  TANDEM_CHECK(size >= 0, operation, ": the dataset (or the iterator) is null");
  return static_cast<std::uint64_t>(all[0][4]);
}

}  // namespace

std::shared_ptr<SerialIterator> create_synchronized_iterator(DatasetPtr dataset, std::int64_t batch_size,
                                                             Communicator& comm, bool repeat, bool shuffle,
                                                             std::optional<std::uint64_t> seed) {
  const std::uint64_t agreed =
      agree_on_seed(comm, dataset ? dataset->size() : -1, batch_size, repeat, shuffle, seed);
  return std::make_shared<SerialIterator>(std::move(dataset), batch_size, repeat, shuffle, agreed);
}

std::shared_ptr<SerialIterator> create_synchronized_iterator(std::shared_ptr<SerialIterator> actual,
                                                             Communicator& comm) {
  const std::uint64_t agreed =
      actual ? agree_on_seed(comm, actual->dataset()->size(), actual->batch_size(), actual->repeat(),
                             actual->shuffle(), std::nullopt)
             : agree_on_seed(comm, -1, 0, false, false, std::nullopt);
  // A fresh iterator with the agreed seed is exactly where `actual` must start; copying its
  // state keeps this file free of SerialIterator's internals.
  const SerialIterator fresh(actual->dataset(), actual->batch_size(), actual->repeat(), actual->shuffle(), agreed);
  actual->restore(fresh.state());
  return actual;
}

}  // namespace tandem
