// chainermn.iterators.create_synchronized_iterator: every rank draws the same order.
//
// For model parallelism without moving batches: each rank holds its own data (rank 0 the
// inputs, rank 1 the targets, say, of the same examples in the same positions) and must read
// the same examples in every iteration. A SerialIterator's orders are a function of its seed
// alone (data/iterator.h), so it is enough that every rank's SerialIterator starts from the
// same seed: rank 0 chooses it and broadcasts it once, at creation; after that the iterators run
// independently, with no communication, and stay in step as long as every rank calls the same
// methods (next, reset, restore with the states they saved together).
//
// The result is a plain SerialIterator: state()/restore() are its own, and a snapshot saved on
// each rank restores each rank's iterator to the same place.
//
// Creation is collective, and checks that every rank's dataset has the same length and that
// the ranks agree on batch_size, repeat and shuffle; otherwise every rank throws the same
// tandem::Error listing each rank's value.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "comm/transport/communicator.h"
#include "data/iterator.h"

namespace tandem {

// A SerialIterator over this rank's `dataset`, seeded with rank 0's `seed` (or, without one,
// with a seed drawn from rank 0's tandem::global_generator()); the other ranks' seeds are
// ignored and their generators untouched.
std::shared_ptr<SerialIterator> create_synchronized_iterator(DatasetPtr dataset, std::int64_t batch_size,
                                                             Communicator& comm, bool repeat = true,
                                                             bool shuffle = true,
                                                             std::optional<std::uint64_t> seed = std::nullopt);

// ChainerMN's form: reseeds `actual` (on every rank) with a seed drawn from rank 0's
// tandem::global_generator() and resets it to the start of epoch 0, as if it had been built with
// that seed; returns `actual` itself. A null iterator on any rank is an error on every rank.
std::shared_ptr<SerialIterator> create_synchronized_iterator(std::shared_ptr<SerialIterator> actual,
                                                             Communicator& comm);

}  // namespace tandem
