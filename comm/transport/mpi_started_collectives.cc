// Collectives started now and completed later (Communicator::start_*): headers out at once,
// the peers' taken as they arrive, the data phase posted once they agree; MpiPendingCollective
// tests and waits on them.
#include <algorithm>
#include <climits>
#include <cstring>
#include <sstream>

#include "comm/transport/mpi_collective_util.h"
#include "comm/transport/mpi_communicator.h"
#include "comm/transport/mpi_env.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/ops.h"

namespace tandem {

using comm_detail::check_mpi;
using comm_detail::OpKind;
using namespace comm_detail::collective_util;  // NOLINT: this file's helpers

// --- collectives that overlap computation ---------------------------------------------------

// A started collective (mpi_communicator.h): its headers may still be on their way; the data
// phase completes as finish_collective's does (a failure breaks the communicator).
class MpiPendingCollective final : public PendingCollective {
 public:
  MpiPendingCollective(std::shared_ptr<MpiCommunicator> comm, std::shared_ptr<MpiCommunicator::StartedCollective> state,
                       Tensor result, Device device)
      : comm_(std::move(comm)), state_(std::move(state)), result_(std::move(result)), device_(device) {}

  ~MpiPendingCollective() override {
    if (done_) return;
    // Dropped unfinished: MPI may still use the buffers, which stay alive until it is done. One
    // whose peers' headers were never taken leaves them queued for the next collective: none may run.
    if (state_->advance) {
      // A data phase in stages (the hierarchical allreduce's): stages not posted yet are awaited
      // by other ranks, so no collective may run here any more.
      bool posted = false;
      try {
        posted = state_->data_posted && state_->advance(false, state_->requests);
      } catch (const Error&) {
      }
      comm_->orphans_.push_back(MpiCommunicator::Orphan{state_->stage_requests(), state_->keep_alive});
      if (!posted) {
        comm_->broken_ = detail::concat(state_->operation, " (collective #", state_->sequence,
                                        ") was dropped between its stages");
      }
    }
    comm_->orphans_.push_back(MpiCommunicator::Orphan{state_->requests, state_->keep_alive});
    if (!state_->data_posted) {
      auto& started = comm_->started_;
      started.erase(std::remove(started.begin(), started.end(), state_), started.end());
      comm_->broken_ = detail::concat(state_->operation, " (collective #", state_->sequence,
                                      ") was abandoned before its peers' headers arrived");
    }
  }

  bool test() override {
    if (done_) return true;
    comm_->progress_started(nullptr, false);
    if (!state_->data_posted) return false;
    if (state_->advance && !state_->advance(false, state_->requests)) return false;
    int done = 0;
    check_mpi(MPI_Testall(static_cast<int>(state_->requests.size()), state_->requests.data(), &done,
                          MPI_STATUSES_IGNORE),
              "MPI_Testall");
    done_ = done != 0;
    if (done_) {
      state_->keep_alive.clear();  // the send buffers' memory goes now, not at the update
      trace::FlightRecorder::instance().set_state(state_->flight_entry, trace::FlightState::completed);
    }
    return done_;
  }

  Tensor wait() override {
    if (!done_) {
      comm_->progress_started(state_.get(), true);
      const MpiCommunicator::StartedCollective* state = state_.get();
      const comm_detail::LazyText what([state] { return detail::concat(state->operation, " (collective #", state->sequence, ")"); });
      try {
        if (state_->advance) {
          try {
            state_->advance(true, state_->requests);
          } catch (const Error&) {
            // A stage's wait failed (and set its own requests aside): so are the rest.
            comm_->orphans_.push_back(MpiCommunicator::Orphan{state_->requests, state_->keep_alive});
            comm_->orphans_.push_back(MpiCommunicator::Orphan{state_->stage_requests(), state_->keep_alive});
            throw;
          }
        }
        comm_->wait_all(state_->requests, MpiCommunicator::WaitContext{what, -1, true, state_->sequence},
                        state_->keep_alive);
      } catch (const Error& e) {
        done_ = true;  // wait_all (or the catch above) has set the requests aside
        comm_->broken_ = detail::concat(what, " failed in flight (", e.what(), ")");
        trace::FlightRecorder::instance().set_state(state_->flight_entry, trace::FlightState::failed, e.what());
        throw;
      }
      done_ = true;
      state_->keep_alive.clear();
      trace::FlightRecorder::instance().set_state(state_->flight_entry, trace::FlightState::completed);
    }
    return result_.to(device_);
  }

 private:
  std::shared_ptr<MpiCommunicator> comm_;
  std::shared_ptr<MpiCommunicator::StartedCollective> state_;
  Tensor result_;
  Device device_;
  bool done_ = false;
};

std::unique_ptr<PendingCollective> MpiCommunicator::start_collective(
    Header mine, bool same_shape, const char* operation, std::function<void(std::vector<MPI_Request>&)> post_data,
    KeepAlive keep_alive, Tensor result, Device device, StartedStages stages) {
  auto state = std::make_shared<StartedCollective>();
  state->advance = std::move(stages.advance);
  state->stage_requests = std::move(stages.stage_requests);
  state->sequence = post_headers(mine, state->all, state->requests, state->keep_alive);
  // The entry ends when the pending collective completes, not with this call.
  state->flight_entry = collective_entry_;
  if (flight_call_ && !flight_call_->ending_.empty() && flight_call_->ending_.back() == collective_entry_) {
    flight_call_->ending_.pop_back();
    trace::FlightRecorder::instance().mark_in_flight(collective_entry_);
  }
  // The data phase is the pending collective's from here: the next header is not "abandoned".
  collective_open_ = false;
  state->have.assign(size_, false);
  state->have[rank_] = true;
  state->same_shape = same_shape;
  state->post_data = std::move(post_data);
  state->operation = operation;
  for (auto& k : keep_alive) state->keep_alive.push_back(std::move(k));
  started_.push_back(state);
  progress_started(nullptr, false);
  return std::make_unique<MpiPendingCollective>(std::static_pointer_cast<MpiCommunicator>(shared_from_this()),
                                                std::move(state), std::move(result), device);
}

void MpiCommunicator::progress_started(const StartedCollective* until, bool blocking) {
  while (!started_.empty()) {
    StartedCollective& c = *started_.front();
    const Header& own = c.all[rank_];
    const comm_detail::LazyText operation([&own] { return own.describe(); });
    for (int peer = 0; peer < size_; ++peer) {
      if (c.have[peer]) continue;
      const WaitContext context{operation, peer, true};
      if (!take_header(peer, blocking ? &context : nullptr, c.all[peer])) return;
      c.have[peer] = true;
    }
    const std::shared_ptr<StartedCollective> keep = started_.front();
    started_.pop_front();
    apply_verdict(c.all, c.same_shape);  // the same verdict on every rank
    trace::FlightRecorder::instance().set_state(c.flight_entry, trace::FlightState::matched);
    c.post_data(c.requests);
    c.post_data = nullptr;  // it holds the buffers, which keep_alive now keeps (until completion)
    c.data_posted = true;
    if (&c == until) return;
  }
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_allreduce_sum(const Tensor& x, std::uint64_t digest,
                                                                        const char* operation, bool in_place, CallSite site) {
  FlightCall flight(*this, site);
  check_defined(x, operation);
  // A device transport moves CUDA tensors in device order already: the blocking form.
  if (moves_on_device(x)) return Communicator::start_allreduce_sum(x, digest, operation, in_place, site);
  const MPI_Datatype type = mpi_type(x.dtype(), operation);
  const int count = checked_int(x.nbytes(), operation) / static_cast<int>(dtype_size(x.dtype()));
  Header mine = collective_header(OpKind::allreduce, -1, &x);
  mine.digest = digest;
  const Tensor send = comm_detail::host_for_mpi(x);
  if (hierarchy_) return start_hierarchical_sum(x, send, type, kChunkBytes / dtype_size(x.dtype()), mine, operation);
  // In place on the host: the sum lands in x's own memory (a CUDA x's host copy is ours anyway).
  const bool same = in_place || !x.device().is_cpu();
  Tensor y = same ? send : Tensor(x.shape(), x.dtype());
  MPI_Comm comm = comm_;
  auto post = [send, y, count, type, comm, same](std::vector<MPI_Request>& requests) mutable {
    requests.emplace_back();
    check_mpi(MPI_Iallreduce(same ? MPI_IN_PLACE : send.raw_data(), y.raw_data(), count, type, mpi_sum(y.dtype()), comm,
                             &requests.back()),
              "MPI_Iallreduce");
  };
  return start_collective(mine, true, operation, post, KeepAlive{send.storage(), y.storage()}, y, x.device());
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_reduce_scatter_sum(const Tensor& x, std::uint64_t digest,
                                                                             const char* operation, CallSite site) {
  FlightCall flight(*this, site);
  const std::vector<Tensor> stripes = comm_detail::reduce_scatter_stripes(x, size_, operation);
  if (moves_on_device(x)) return Communicator::start_reduce_scatter_sum(x, digest, operation, site);
  const MPI_Datatype type = mpi_type(x.dtype(), operation);
  Header mine = collective_header(OpKind::reduce_scatter, -1, &x);
  mine.digest = digest;
  const Tensor send = comm_detail::host_for_mpi(x);
  Tensor y(stripes[0].shape(), x.dtype());
  const int count = checked_int(y.nbytes(), operation) / static_cast<int>(dtype_size(x.dtype()));
  MPI_Comm comm = comm_;
  auto post = [send, y, count, type, comm](std::vector<MPI_Request>& requests) mutable {
    requests.emplace_back();
    check_mpi(MPI_Ireduce_scatter_block(send.raw_data(), y.raw_data(), count, type, mpi_sum(y.dtype()), comm,
                                        &requests.back()),
              "MPI_Ireduce_scatter_block");
  };
  return start_collective(mine, true, operation, post, KeepAlive{send.storage(), y.storage()}, y, x.device());
}

std::unique_ptr<PendingCollective> MpiCommunicator::start_allgather(const Tensor& x, std::uint64_t digest,
                                                                    const char* operation, CallSite site) {
  FlightCall flight(*this, site);
  check_defined(x, operation);
  if (moves_on_device(x)) return Communicator::start_allgather(x, digest, operation, site);
  Header mine = collective_header(OpKind::allgather, -1, &x);
  mine.digest = digest;
  const Tensor send = comm_detail::host_for_mpi(x);
  Tensor y({size_ * x.numel()}, x.dtype());
  const int count = checked_int(x.nbytes(), operation);
  checked_int(y.nbytes(), operation);
  MPI_Comm comm = comm_;
  // same_shape: the headers' verdict makes every rank's piece the size the buffers assume.
  auto post = [send, y, count, comm](std::vector<MPI_Request>& requests) mutable {
    requests.emplace_back();
    check_mpi(MPI_Iallgather(send.raw_data(), count, MPI_BYTE, y.raw_data(), count, MPI_BYTE, comm, &requests.back()),
              "MPI_Iallgather");
  };
  return start_collective(mine, true, operation, post, KeepAlive{send.storage(), y.storage()}, y, x.device());
}

}  // namespace tandem
