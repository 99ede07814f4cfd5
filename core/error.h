// Errors in tandem are exceptions that say which operation failed and why, with the shapes,
// dtypes (and, for communication, ranks and tags) involved. Nothing is asserted away in
// release builds: a user's mistake must never become a crash or a silently wrong number.
#pragma once

#include <sstream>
#include <stdexcept>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

// Prints a shape as "[2, 3]". Declared here, before the message builder below, so that
// TANDEM_CHECK can stream shapes (std::vector<int64_t>) directly.
std::ostream& operator<<(std::ostream& out, const std::vector<std::int64_t>& shape);

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {

inline void append_all(std::ostringstream&) {}

template <typename T, typename... Rest>
void append_all(std::ostringstream& out, const T& first, const Rest&... rest) {
  out << first;
  append_all(out, rest...);
}

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  append_all(out, args...);
  return out.str();
}

}  // namespace detail

// TANDEM_CHECK(cond, "matmul: ", a.shape(), " vs ", b.shape()) throws tandem::Error with the
// message pieces streamed together. Every argument after the condition is only evaluated when
// the check fails, so building messages costs nothing on the hot path.
#define TANDEM_CHECK(cond, ...)                                              \
  do {                                                                       \
    if (!(cond)) throw ::tandem::Error(::tandem::detail::concat(__VA_ARGS__)); \
  } while (0)

#define TANDEM_FAIL(...) throw ::tandem::Error(::tandem::detail::concat(__VA_ARGS__))

}  // namespace tandem
