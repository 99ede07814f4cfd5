#include "comm/transport/direct_read.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

namespace tandem::comm_detail {

namespace {

// Read by the peers; volatile so that its value stays in memory where they look for it.
volatile std::uint64_t g_cookie = 0;

std::uint64_t cookie() {
  static const std::uint64_t value = [] {
    std::random_device device;
    std::uint64_t v = (std::uint64_t(device()) << 32) ^ device();
    v ^= static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    v ^= static_cast<std::uint64_t>(getpid()) << 17;
    if (v == 0) v = 1;  // 0 would match the memory of a process that never set it
    g_cookie = v;
    return v;
  }();
  return value;
}

}  // namespace

ProcessIdentity this_process() {
  ProcessIdentity identity;
  identity.cookie = cookie();
  identity.pid = static_cast<std::int64_t>(getpid());
  identity.cookie_address = reinterpret_cast<std::uint64_t>(&g_cookie);
  return identity;
}

int read_process_memory(std::int64_t pid, std::uint64_t address, void* into, std::size_t bytes) {
  char* to = static_cast<char*>(into);
  // The kernel may copy less than asked in one call (it stops at a fault, or after a few GB).
  while (bytes > 0) {
    iovec local{to, bytes};
    iovec remote{reinterpret_cast<void*>(address), bytes};
    const ssize_t got = process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) return EFAULT;
    to += got;
    address += static_cast<std::uint64_t>(got);
    bytes -= static_cast<std::size_t>(got);
  }
  return 0;
}

bool can_read(const ProcessIdentity& peer) {
  if (peer.pid <= 0 || peer.cookie_address == 0 || peer.cookie == 0) return false;
  std::uint64_t value = 0;
  return read_process_memory(peer.pid, peer.cookie_address, &value, sizeof value) == 0 && value == peer.cookie;
}

bool direct_read_allowed() {
  static const bool allowed = [] {
    const char* text = std::getenv("TANDEM_DIRECT_READ");
    return !(text && std::string(text) == "0");
  }();
  return allowed;
}

}  // namespace tandem::comm_detail
