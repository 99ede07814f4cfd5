// Collective data read straight out of the sender's memory (direct_read.h): who can read whom,
// and the word each reader sends back so that the sender knows its tensor may change again.
#include <cstring>

#include "comm/transport/mpi_communicator.h"
#include "comm/transport/mpi_env.h"
#include "core/error.h"

namespace tandem {

using comm_detail::check_mpi;

void MpiCommunicator::find_direct_readers(const std::vector<comm_detail::ProcessIdentity>& identities,
                                          const std::vector<bool>& same_host, bool allowed_here) {
  // Each rank tries to read every same-host peer's cookie, then tells each peer whether it
  // can: a sender leaves data in its memory only for peers that said so. Both ranks' settings
  // count (a rank with TANDEM_DIRECT_READ=0 neither reads nor is read), and every rank takes
  // part in the exchange whatever its own answer, so the creation stays one collective.
  const bool allowed = comm_detail::direct_read_allowed() && allowed_here;
  std::vector<char> can(static_cast<std::size_t>(size_), 0), asked(static_cast<std::size_t>(size_), 0);
  for (int peer = 0; peer < size_; ++peer)
    can[peer] = allowed && peer != rank_ && same_host[peer] && comm_detail::can_read(identities[peer]);
  check_mpi(MPI_Alltoall(can.data(), 1, MPI_CHAR, asked.data(), 1, MPI_CHAR, comm_),
            "MPI_Alltoall (who reads whose memory)");
  bool any = false;
  for (int peer = 0; peer < size_; ++peer) {
    if (!allowed) asked[peer] = 0;
    any = any || can[peer] || asked[peer];
  }
  if (!any) return;
  reads_from_ = std::move(can);
  read_by_ = std::move(asked);
  peer_pid_.resize(static_cast<std::size_t>(size_));
  for (int peer = 0; peer < size_; ++peer) peer_pid_[peer] = identities[peer].pid;
}

void MpiCommunicator::await_reads(const std::vector<bool>& offered, std::int64_t sequence, DirectReads& reads,
                                  std::vector<MPI_Request>& requests) {
  reads.sequence = sequence;
  reads.from.assign(static_cast<std::size_t>(size_), ReadDone());
  reads.awaited.assign(static_cast<std::size_t>(size_), false);
  for (int peer = 0; peer < size_; ++peer) {
    if (!offered[peer]) continue;
    reads.awaited[peer] = true;
    requests.emplace_back();
    check_mpi(MPI_Irecv(&reads.from[peer], sizeof(ReadDone), MPI_BYTE, peer, kReadDoneTag, comm_, &requests.back()),
              "MPI_Irecv (read done)");
  }
}

void MpiCommunicator::read_memory_of(int peer, const Header& header, void* into, DirectReads& reads,
                                     std::vector<MPI_Request>& requests, const char* operation) {
  // Every rank saw the same headers, and a peer offers its memory only to a rank that said it
  // can read it: this holds unless the two ranks' communicators were created differently.
  TANDEM_CHECK(reads_memory_of(peer), operation, ": rank ", peer, " left ", header.payload_bytes, " bytes for rank ",
               rank_, " in its memory, which rank ", rank_, " cannot read");
  reads.sequence = header.sequence;
  if (reads.to.empty()) reads.to.assign(static_cast<std::size_t>(size_), ReadDone());
  ReadDone& word = reads.to[peer];
  word.sequence = header.sequence;
  word.communicator = book_->id();
  word.error = comm_detail::read_process_memory(peer_pid_[peer], header.address, into, header.payload_bytes);
  requests.emplace_back();
  check_mpi(MPI_Isend(&word, sizeof(ReadDone), MPI_BYTE, peer, kReadDoneTag, comm_, &requests.back()),
            "MPI_Isend (read done)");
}

void MpiCommunicator::settle_reads(DirectReads& reads, const char* operation, KeepAlive keep_alive) {
  for (bool stale = !reads.from.empty(); stale;) {
    stale = false;
    std::vector<MPI_Request> again;
    for (int peer = 0; peer < size_ && !reads.from.empty(); ++peer) {
      const ReadDone& word = reads.from[peer];
      if (!reads.awaited[peer] || (word.sequence == reads.sequence && word.communicator == book_->id())) continue;
      stale = true;  // a word for a collective this rank gave up: the next one is this one's
      again.emplace_back();
      check_mpi(MPI_Irecv(&reads.from[peer], sizeof(ReadDone), MPI_BYTE, peer, kReadDoneTag, comm_, &again.back()),
                "MPI_Irecv (read done)");
    }
    if (stale) finish_collective(again, operation, keep_alive, false, reads.sequence);
  }
  for (int peer = 0; peer < size_ && !reads.to.empty(); ++peer) {
    if (reads.to[peer].error == 0) continue;
    TANDEM_FAIL(operation, " (collective #", reads.sequence, "): rank ", rank_, " could not read rank ", peer,
                "'s data from its memory (", std::strerror(reads.to[peer].error),
                "); TANDEM_DIRECT_READ=0 sends such data through MPI instead");
  }
  for (int peer = 0; peer < size_ && !reads.from.empty(); ++peer) {
    if (!reads.awaited[peer] || reads.from[peer].error == 0) continue;
    TANDEM_FAIL(operation, " (collective #", reads.sequence, "): rank ", peer, " could not read rank ", rank_,
                "'s data from its memory (", std::strerror(reads.from[peer].error),
                "); TANDEM_DIRECT_READ=0 sends such data through MPI instead");
  }
}

void MpiCommunicator::leave_offered(const KeepAlive& offered) {
  if (!offered.empty()) comm_detail::keep_until_exit(offered);
}

}  // namespace tandem
