// The command line of `bazel run //tools:simulate_pipeline -- ...` as a function, so that tests
// run exactly what the tool runs. `simulate --help` lists the flags.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tandem {
namespace pipeline {

// args[0] is the program name. Prints the summary and timeline (or, with --table, the planning
// table) to out, and a one-line error to err. Returns the exit status: 0, or 1 after an error.
int simulate_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace pipeline
}  // namespace tandem
