// The host structure of the "hierarchical" communicator (ChainerMN's name) and its allreduce's
// data phase: a sum onto the first rank of each host, an allreduce among those ranks, a broadcast
// within each host (mpi_communicator.h says which operations use it).
//
// Why: with several ranks per host, a flat allreduce has every rank exchange its share with
// ranks on other hosts, so the host's network link carries the data once per rank (measured
// with 2 simulated hosts of 2 ranks on 1 Gbit/s links: docs/performance.md, "Across hosts").
// Summing within the host first (shared memory) sends each host's data over the link once.
//
// The owner exchanges and checks the headers on its whole communicator before a sum's data phase
// starts, so a disagreement is still an error on every rank; the stages wait through the owner's
// data-phase wait (a peer that failed or gave up is an error, not a hang).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "comm/transport/mpi_records.h"
#include "core/tensor.h"

namespace tandem::comm_detail {

class HostHierarchy {
 public:
  // Waits for one stage's requests as the owner waits for a data phase that goes on:
  // (requests, operation, buffers to keep alive, the collective's sequence).
  using WaitStage = std::function<void(std::vector<MPI_Request>&, const char*, KeepAlive, std::int64_t)>;

  // Collective over comm: splits it into the ranks of this rank's host (ordered by intra_rank)
  // and the first rank of every host (ordered by inter_rank).
  HostHierarchy(MPI_Comm comm, int inter_rank, int intra_rank, WaitStage wait);
  ~HostHierarchy();  // frees both communicators (while MPI is active)
  HostHierarchy(const HostHierarchy&) = delete;
  HostHierarchy& operator=(const HostHierarchy&) = delete;

  // One sum: y = the sum over every rank of send (host memory, of y's size), moved in pieces of
  // at most chunk elements. `sequence` is the owner's number for the collective it belongs to.
  class Sum;
  std::shared_ptr<Sum> make_sum(Tensor send, Tensor y, MPI_Datatype type, std::size_t chunk, const char* operation,
                                std::int64_t sequence);

  // Blocking: posts every stage of `sum` (after those of every started sum before it), waiting as
  // needed; returns the requests that end its data phase and the buffers they use.
  void run(Sum& sum, std::vector<MPI_Request>& last, KeepAlive& buffers);

  // Started (non-blocking): queues `sum`; its stages are posted by advance once `ready` says its
  // headers are complete. Sums start their first stage only once every sum before them has posted
  // all of theirs, so that every rank posts on the host's and the first ranks' communicators in
  // the same order (MPI's rule for non-blocking collectives).
  void start(const std::shared_ptr<Sum>& sum);
  static void set_ready(Sum& sum);
  // Posts what can be posted, front to back (blocking: waiting as needed, up to `target`, or
  // through every queued sum when it is null).
  void advance(const Sum* target, bool blocking);
  // For a started sum's pending collective: advances up to it, appends the requests that end its
  // data phase (once every stage is posted) and returns whether they are all posted.
  bool advance_to(Sum& sum, bool blocking, std::vector<MPI_Request>& requests);
  // The started sum's requests not handed over (set aside when the collective fails or is dropped).
  static std::vector<MPI_Request> stage_requests(const Sum& sum);
  static KeepAlive buffers(const Sum& sum);

  bool idle() const { return queue_.empty(); }
  bool leader() const { return leaders_ != MPI_COMM_NULL; }

 private:
  MPI_Comm host_ = MPI_COMM_NULL, leaders_ = MPI_COMM_NULL;
  WaitStage wait_;
  std::deque<std::shared_ptr<Sum>> queue_;  // started sums, oldest first, until all stages are posted
};

}  // namespace tandem::comm_detail
