#include "core/call_site.h"

#include <cstring>

namespace tandem {

namespace {
thread_local CallSite t_outer_site;
thread_local bool t_has_outer = false;

// Paths as the compiler saw them: Bazel passes workspace-relative ones; an absolute one from
// inside Bazel's tree is cut after its execroot's workspace folder.
const char* short_path(const char* file) {
  if (!file) return "";
  if (const char* at = std::strstr(file, "/execroot/")) {
    if (const char* slash = std::strchr(at + std::strlen("/execroot/"), '/')) return slash + 1;
  }
  return file;
}
}  // namespace

std::string CallSite::str() const {
  if (!known()) return "";
  std::string out = std::string(short_path(file)) + ":" + std::to_string(line);
  if (function && *function) out += std::string(" (") + function + ")";
  return out;
}

CallSiteScope::CallSiteScope(const CallSite& site) : outermost_(!t_has_outer && site.known()) {
  if (outermost_) {
    t_outer_site = site;
    t_has_outer = true;
  }
}

CallSiteScope::~CallSiteScope() {
  if (outermost_) t_has_outer = false;
}

CallSite CallSiteScope::user_site(const CallSite& direct) { return t_has_outer ? t_outer_site : direct; }

}  // namespace tandem
