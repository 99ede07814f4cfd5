// main() of the GPU tests (tests/cuda/gpu_test.bzl): runs Catch2 when there is a CUDA device,
// otherwise reports every test case as skipped, with the reason, and succeeds.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "cuda/cuda.h"

namespace {

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

int report_skipped(const std::string& reason) {
  const Catch::Config config;
  const auto& cases = Catch::getAllTestCasesSorted(config);
  std::cout << "SKIPPED: " << cases.size() << " GPU test case(s) not run: " << reason << "\n";
  for (const auto& test : cases) std::cout << "  skipped: " << test.name << "\n";
  // Bazel reads the JUnit XML that a test leaves at $XML_OUTPUT_FILE instead of making one up.
  if (const char* path = std::getenv("XML_OUTPUT_FILE")) {
    std::ofstream xml(path);
    xml << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n<testsuite name=\"gpu\" tests=\""
        << cases.size() << "\" skipped=\"" << cases.size() << "\" failures=\"0\" errors=\"0\">\n";
    for (const auto& test : cases)
      xml << "<testcase name=\"" << xml_escape(test.name) << "\"><skipped message=\"" << xml_escape(reason)
          << "\"/></testcase>\n";
    xml << "</testsuite>\n</testsuites>\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char* argv[]) {
  if (tandem::cuda::device_count() == 0) return report_skipped(tandem::cuda::unavailable_reason());
  return Catch::Session().run(argc, argv);
}
