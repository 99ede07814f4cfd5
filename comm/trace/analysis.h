// The cross-rank report from every rank's flight-recorder dump (trace_dump.h): what went wrong,
// where, and who waited for whom. rank 0 prints it when a job fails with TANDEM_TRACE_DIR set;
// `bazel run //tools:analyze_traces -- DIR` prints it from the files.
//
// It says, in this order:
// - which ranks dumped and why (each rank's error), and which did not;
// - per communicator, the first collective at which the ranks differ: a different operation,
//   root, dtype or shape, or ranks that never reached it, with each side's call site;
// - point-to-point messages sent and never received, and receives still waiting for a message
//   the peer never sent (by tag and message number), with both call sites;
// - what each rank was waiting in when it dumped, and for how long;
// - failed operations.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::trace {

std::string analyze(const std::vector<nlohmann::json>& dumps);

}  // namespace tandem::trace
