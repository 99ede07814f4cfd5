// The host-side arithmetic of cuDNN's benchmark mode (cuda/conv_timing.h): the median of a
// candidate's timed runs, and the order in which the candidates are tried.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "cuda/conv_timing.h"

using namespace tandem::cuda;

TEST_CASE("median_ms takes the middle run", "[conv][benchmark]") {
  CHECK(median_ms({0.5, 0.2, 9.0}) == 0.5);  // one slow run does not count
  CHECK(median_ms({3.0}) == 3.0);
  CHECK(median_ms({4.0, 1.0}) == 2.5);  // an even count: the mean of the middle two
  CHECK(median_ms({1.0, 1.0, 1.0}) == 1.0);
  CHECK_FALSE(was_timed(median_ms({})));
}

TEST_CASE("was_timed accepts only measured times", "[conv][benchmark]") {
  CHECK(was_timed(0.0));
  CHECK(was_timed(0.013));
  CHECK_FALSE(was_timed(kNotTimed));
  CHECK_FALSE(was_timed(std::numeric_limits<double>::quiet_NaN()));
  CHECK_FALSE(was_timed(std::numeric_limits<double>::infinity()));
}

TEST_CASE("fastest_first orders the timed candidates and leaves out the others", "[conv][benchmark]") {
  using Order = std::vector<std::size_t>;
  CHECK(fastest_first({0.3, 0.1, 0.2}) == Order{1, 2, 0});
  CHECK(fastest_first({0.3, kNotTimed, 0.2, std::numeric_limits<double>::quiet_NaN()}) == Order{2, 0});
  CHECK(fastest_first({kNotTimed, kNotTimed}).empty());
  CHECK(fastest_first({}).empty());
  // Ties keep the ranking order (the heuristics' choice first): the same order on every run.
  CHECK(fastest_first({0.2, 0.1, 0.2, 0.1}) == Order{1, 3, 0, 2});
  CHECK(fastest_first({0.0, 0.0}) == Order{0, 1});
}
