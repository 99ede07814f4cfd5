// Reading a peer's tensor straight out of its memory: Linux's cross-memory attach
// (process_vm_readv), between processes of one host. The receiver copies the bytes once, with no
// MPI message for the data; the sender's header says where they lie (kDataInMemory in
// message.h) and the receiver tells it when it has read them.
//
// MPICH over UCX uses the same system call for large messages on one host, behind a rendezvous of
// its own, in 512 KB pieces: reading the whole tensor at once, announced by the header the
// collective exchanges anyway, costs less (a raw program timing both at 2 ranks:
// docs/performance.md, "Large tensors are read straight from the sender's memory"). Below about
// 64 KB MPI's own paths win (kDirectReadMinBytes in mpi_communicator.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::comm_detail {

// Who this process is, as a peer on the same host checks it: its pid, and where in its memory a
// random value lies.
struct ProcessIdentity {
  std::int64_t pid = 0;
  std::uint64_t cookie_address = 0;
  std::uint64_t cookie = 0;
};
ProcessIdentity this_process();

// Whether this process can read the memory of the process `peer` describes: the read of its
// cookie succeeds and finds the value it announced. A pid that names another process (one in
// another PID namespace, or on another host) cannot pass: the cookie is 64 random bits. False
// where the kernel refuses (no ptrace permission, a seccomp filter, not Linux).
bool can_read(const ProcessIdentity& peer);

// Copies `bytes` from `address` in process `pid` into `into`. Returns 0, or the errno of the
// failed read (EFAULT where fewer bytes than asked could be read).
int read_process_memory(std::int64_t pid, std::uint64_t address, void* into, std::size_t bytes);

// TANDEM_DIRECT_READ=0 turns direct reads off: every payload goes through MPI.
bool direct_read_allowed();

}  // namespace tandem::comm_detail
