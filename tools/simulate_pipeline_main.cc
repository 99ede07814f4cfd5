// bazel run //tools:simulate_pipeline -- --schedule 1f1b --ranks 4 --microbatches 8
#include <iostream>
#include <string>
#include <vector>

#include "comm/pipeline/simulate_tool.h"

int main(int argc, char** argv) {
  return tandem::pipeline::simulate_main(std::vector<std::string>(argv, argv + argc), std::cout,
                                         std::cerr);
}
