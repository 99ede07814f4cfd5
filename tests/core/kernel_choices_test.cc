// How kernel choices are answered (core/kernel_choices.h, core/cpu/measured_choice.h): without
// timing by default, from a named file, pinned by a snapshot ahead of everything, and measured
// only on request, where a measurement under another process's load is not kept.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "core/cpu/measured_choice.h"
#include "core/error.h"
#include "core/kernel_choices.h"

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

std::string temporary(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/" + name;
}

// TANDEM_KERNEL_CHOICES and TANDEM_CACHE_DIR, set before any choice of the process is made (each
// is read once): a file that answers "test.from_file".
const bool environment_set = [] {
  std::ofstream(temporary("kernel-choices-given.txt")) << "# a comment\ntest.from_file third with figures\n";
  ::setenv("TANDEM_KERNEL_CHOICES", temporary("kernel-choices-given.txt").c_str(), 1);
  ::setenv("TANDEM_CACHE_DIR", temporary("kernel-choices-cache").c_str(), 1);
  ::unsetenv("TANDEM_KERNEL_TUNING");
  return true;
}();

bool one_of_three(const std::string& w) { return w == "first" || w == "second" || w == "third"; }

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("by default no choice is timed: the fixed default, or the named file's line", "[choices]") {
  REQUIRE(environment_set);
  REQUIRE(kernel_tuning() == KernelTuning::kFixed);
  int measured = 0;
  auto measure = [&] {
    ++measured;
    return std::make_pair(std::string("second"), std::string());
  };
  CHECK(cpu::measured_word("test.fixed", one_of_three, measure, "first") == "first");
  CHECK(cpu::measured_word("test.from_file", one_of_three, measure, "first") == "third");
  CHECK(measured == 0);
  // Answered once: the same again, whatever default a later call names.
  CHECK(cpu::measured_word("test.fixed", one_of_three, measure, "second") == "first");
  CHECK_THAT(kernel_choices_text(), Contains("test.fixed first\n") && Contains("test.from_file third\n"));
  // Nothing was written to the measured file.
  CHECK(file_text(cpu::measured_choice_file()).find("test.") == std::string::npos);
}

TEST_CASE("pinned choices come first, even over an earlier answer, and move the generation", "[choices]") {
  auto measure = [] { return std::make_pair(std::string("second"), std::string()); };
  REQUIRE(cpu::measured_word("test.pinned", one_of_three, measure, "first") == "first");
  const unsigned before = kernel_choices_generation();
  pin_kernel_choices("test.pinned third\ntest.from_file second\n");
  CHECK(kernel_choices_generation() != before);
  CHECK(cpu::measured_word("test.pinned", one_of_three, measure, "first") == "third");
  CHECK(cpu::measured_word("test.from_file", one_of_three, measure, "first") == "second");
  // A choice as measured_choice makes it: candidate names.
  CHECK(cpu::measured_choice("test.pinned", {"first", "second", "third"}, [] { return std::vector<double>{1, 2, 3}; },
                             0, "") == 2);
  CHECK_THAT(kernel_choices_text(), Contains("test.pinned third\n"));
  // A line that is not "key word", and a pinned word this build cannot run, are errors.
  CHECK_THROWS_WITH(pin_kernel_choices("test.bad\n"), Contains("pin_kernel_choices") && Contains("'test.bad'"));
  CHECK_THROWS_WITH(pin_kernel_choices("a b c\n"), Contains("'a b c'"));
  pin_kernel_choices("test.unknown fourth\n");
  CHECK_THROWS_WITH(cpu::measured_word("test.unknown", one_of_three, measure, "first"),
                    Contains("test.unknown") && Contains("'fourth'"));
}

TEST_CASE("measured on request; a measurement under another process's load serves this process only",
          "[choices]") {
  set_kernel_tuning(KernelTuning::kMeasure);
  const std::string path = cpu::measured_choice_file();
  REQUIRE(!path.empty());
  auto slow_second = [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    return std::make_pair(std::string("second"), std::string("figures"));
  };
  // Another process spins on a core all along the measurement.
  const pid_t spinner = ::fork();
  REQUIRE(spinner >= 0);
  if (spinner == 0) {
    for (volatile unsigned long i = 0;; ++i) {
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  cpu::keep_measurements_under_load(false);
  const std::string busy = cpu::measured_word("test.busy", one_of_three, slow_second, "first");
  ::kill(spinner, SIGKILL);
  ::waitpid(spinner, nullptr, 0);
  CHECK(busy == "second");
  CHECK(file_text(path).find("test.busy") == std::string::npos);
  CHECK_THAT(kernel_choices_text(), Contains("test.busy second\n"));
  // Kept (the tests of the file's lines ask for that: they run beside other tests).
  cpu::keep_measurements_under_load(true);
  CHECK(cpu::measured_word("test.kept", one_of_three, slow_second, "first") == "second");
  CHECK_THAT(file_text(path), Contains("test.kept second figures\n"));
  set_kernel_tuning(KernelTuning::kFixed);
}
