// Where in the user's code an operation was called, captured for free by a default argument:
//
//   Tensor allreduce(const Tensor& x, ..., CallSite site = CallSite::current());
//
// GCC and Clang evaluate __builtin_FILE/LINE/FUNCTION in a default argument at the call, so
// `site` names the caller's line (std::source_location does the same in C++20). The flight
// recorder (comm/trace) keeps it with every communication, so that a hang or mismatch report
// says which line of which rank did what.
//
// A call made from inside tandem (the data-parallel optimizer's allreduce, a pipeline's
// send) would name tandem's own line; the entry points users call set a CallSiteScope with
// their caller's site, and the outermost scope is the one recorded as the user's site.
#pragma once

#include <string>

namespace tandem {

struct CallSite {
  const char* file = nullptr;
  int line = 0;
  const char* function = nullptr;

  static constexpr CallSite current(const char* file = __builtin_FILE(), int line = __builtin_LINE(),
                                    const char* function = __builtin_FUNCTION()) {
    return CallSite{file, line, function};
  }
  bool known() const { return file != nullptr && line > 0; }
  // "examples/mnist/train.cc:42 (main)", or "" when unknown.
  std::string str() const;
};

// The site of the outermost user-facing call on this thread: while a scope is alive, the sites
// of the calls made inside it (tandem's own) are recorded as that one's. Nested scopes keep the
// outer site; a scope of an unknown site changes nothing.
class CallSiteScope {
 public:
  explicit CallSiteScope(const CallSite& site);
  ~CallSiteScope();
  CallSiteScope(const CallSiteScope&) = delete;
  CallSiteScope& operator=(const CallSiteScope&) = delete;
  // The outermost active scope's site, or `direct` when none is active.
  static CallSite user_site(const CallSite& direct);

 private:
  bool outermost_;
};

}  // namespace tandem
