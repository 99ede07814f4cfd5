#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace tandem {

void write_file_atomically(const std::string& path, const std::string& bytes) {
  static std::atomic<std::uint64_t> counter{0};
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "host");
  const std::string temporary =
      path + ".tmp." + host + "." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  TANDEM_CHECK(fd >= 0, "write: cannot create '", temporary, "': ", std::strerror(errno));
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = n < 0 ? std::strerror(errno) : "nothing written";
      ::close(fd);
      ::unlink(temporary.c_str());
      TANDEM_FAIL("write: writing '", temporary, "' failed: ", reason);
    }
    written += static_cast<std::size_t>(n);
  }
  // Synced before the rename: after a crash the file is then the old one or the whole new one,
  // not a new name over blocks never written.
  const bool synced = ::fsync(fd) == 0;
  const bool closed = ::close(fd) == 0;
  if (!synced || !closed || std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(temporary.c_str());
    TANDEM_FAIL("write: could not complete '", path, "': ", reason);
  }
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  TANDEM_CHECK(fd >= 0, "cannot open the directory '", dir, "' to sync it: ", std::strerror(errno));
  const bool synced = ::fsync(fd) == 0;
  const std::string reason = synced ? "" : std::strerror(errno);
  ::close(fd);
  TANDEM_CHECK(synced, "cannot sync the directory '", dir, "': ", reason);
}

}  // namespace tandem
