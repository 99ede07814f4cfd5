// The grain of the CPU kernels' parallel loops scaled by the measured cost of waking the OpenMP
// team (core/cpu/parallel.h): measured once per machine, kept in the choices file, honoured by
// parallel_chunks, and settable with TANDEM_GRAIN_SCALE.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/cpu/measured_choice.h"
#include "core/cpu/parallel.h"
#include "core/kernel_choices.h"
#include "core/threads.h"

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

// How many chunks parallel_chunks made for n items of cost 1 with the elementwise grain.
int chunks_for(std::int64_t n) {
  std::vector<int> seen(64, 0);
  cpu::parallel_chunks(n, 1, cpu::kElementwiseGrain, [&](std::int64_t, std::int64_t, int chunk) { seen[chunk] = 1; });
  int count = 0;
  for (int s : seen) count += s;
  return count;
}

}  // namespace

TEST_CASE("the grain scale is measured once, kept in the machine's file, and split work follows it", "[parallel]") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/parallel-grain-test";
  ::setenv("TANDEM_CACHE_DIR", dir.c_str(), 1);
  ::unsetenv("TANDEM_GRAIN_SCALE");
  set_kernel_tuning(KernelTuning::kMeasure);  // the measured mode and its file (core/kernel_choices.h)
  cpu::keep_measurements_under_load(true);     // beside other tests
  const int threads_before = max_threads();
  set_max_threads(2);
  if (cpu::max_chunks() < 2) {
    set_max_threads(threads_before);
    SUCCEED("one thread only: nothing is split");
    return;
  }
  const std::int64_t scale = cpu::grain_scale();
  REQUIRE(scale >= 1);
  REQUIRE(scale <= 64);
  REQUIRE((scale & (scale - 1)) == 0);
  REQUIRE(cpu::grain_scale() == scale);  // measured once

  std::string line;
  std::ifstream in(cpu::measured_choice_file());
  for (std::string l; std::getline(in, l);)
    if (l.rfind("parallel.grain_scale.t2 ", 0) == 0) line = l;
  INFO(line);
  REQUIRE(line == "parallel.grain_scale.t2 " + std::to_string(scale) + line.substr(line.find(" empty_region=")));
  REQUIRE_THAT(line, Contains("us"));

  // Below twice the scaled grain: one chunk on the calling thread; from there on: both threads.
  const std::int64_t threshold = 2 * cpu::kElementwiseGrain * scale;
  CHECK(chunks_for(threshold - 1) == 1);
  CHECK(chunks_for(threshold) == 2);

  // Set by hand: a power of two up to 64, honoured at once; anything else is an error naming it.
  ::setenv("TANDEM_GRAIN_SCALE", "4", 1);
  CHECK(cpu::grain_scale() == 4);
  CHECK(chunks_for(2 * cpu::kElementwiseGrain * 4 - 1) == 1);
  CHECK(chunks_for(2 * cpu::kElementwiseGrain * 4) == 2);
  ::setenv("TANDEM_GRAIN_SCALE", "1", 1);
  CHECK(chunks_for(2 * cpu::kElementwiseGrain) == 2);
  for (const char* wrong : {"3", "0", "128", "x"}) {
    ::setenv("TANDEM_GRAIN_SCALE", wrong, 1);
    CHECK_THROWS_WITH(cpu::grain_scale(), Contains(std::string("TANDEM_GRAIN_SCALE=") + wrong) &&
                                              Contains("a power of two from 1 to 64"));
  }
  ::unsetenv("TANDEM_GRAIN_SCALE");
  CHECK(cpu::grain_scale() == scale);
  set_max_threads(threads_before);
}
