#include "cuda/cuda_check.h"

#include "core/error.h"

namespace tandem {
namespace cuda {

std::string status_message(const char* library, long code, const char* meaning, const char* call,
                           const char* file, int line) {
  return detail::concat(library, " error ", code, " (", meaning ? meaning : "unknown status", ") in ", call,
                        " at ", file, ":", line);
}

void throw_status(const char* library, long code, const char* meaning, const char* call, const char* file,
                  int line) {
  throw Error(status_message(library, code, meaning, call, file, line));
}

}  // namespace cuda
}  // namespace tandem
