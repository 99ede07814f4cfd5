// bazel run //tools:analyze_traces -- DIR [JOB]
// Prints the cross-rank report (analysis.h) of the flight-recorder dumps in DIR (the newest
// job's, or JOB's).
#include <cstdio>
#include <exception>
#include <string>

#include "comm/trace/analysis.h"
#include "comm/trace/trace_dump.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: analyze_traces DIR [JOB]\n  the report of the tandem flight-recorder dumps in DIR "
                         "(TANDEM_TRACE_DIR of a failed job)\n");
    return argc == 2 ? 0 : 2;
  }
  try {
    const auto dumps = tandem::trace::read_dumps(argv[1], argc == 3 ? argv[2] : "");
    if (dumps.empty()) {
      std::fprintf(stderr, "analyze_traces: no tandem dumps in %s\n", argv[1]);
      return 1;
    }
    std::fputs(tandem::trace::analyze(dumps).c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "analyze_traces: %s\n", e.what());
    return 1;
  }
}
