// warmup_cosine (training/lr_schedule.h): the linear warmup, the cosine decay's ends, midpoint
// and quarter, the floor past the end, no warmup, and the errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>

#include "training/lr_schedule.h"

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

constexpr double kPi = 3.14159265358979323846;

// |got - want| within a few ulps of 1.
bool near(double got, double want) { return std::abs(got - want) <= 1e-15; }

}  // namespace

TEST_CASE("warmup_cosine: warmup, cosine decay, floor", "[lr_schedule]") {
  const std::int64_t warmup = 10, total = 110;
  const double min_ratio = 0.1;
  // Warmup: (step + 1) / warmup, so the first update already moves and update warmup - 1 is at 1.
  CHECK(near(warmup_cosine(0, warmup, total, min_ratio), 0.1));
  CHECK(near(warmup_cosine(4, warmup, total, min_ratio), 0.5));
  CHECK(near(warmup_cosine(warmup - 1, warmup, total, min_ratio), 1.0));
  // Decay: 1 at its start, (1 + min) / 2 halfway, min at total and after.
  CHECK(near(warmup_cosine(warmup, warmup, total, min_ratio), 1.0));
  CHECK(near(warmup_cosine(60, warmup, total, min_ratio), (1 + min_ratio) / 2));
  CHECK(near(warmup_cosine(35, warmup, total, min_ratio), min_ratio + 0.5 * (1 - min_ratio) * (1 + std::cos(kPi / 4))));
  CHECK(near(warmup_cosine(85, warmup, total, min_ratio),
             min_ratio + 0.5 * (1 - min_ratio) * (1 + std::cos(3 * kPi / 4))));
  const double before_end = warmup_cosine(total - 1, warmup, total, min_ratio);
  CHECK(near(before_end, min_ratio + 0.5 * (1 - min_ratio) * (1 + std::cos(kPi * 99 / 100))));
  CHECK(before_end > min_ratio);
  CHECK(near(warmup_cosine(total, warmup, total, min_ratio), min_ratio));
  CHECK(warmup_cosine(total + 1, warmup, total, min_ratio) == min_ratio);
  CHECK(warmup_cosine(10 * total, warmup, total, min_ratio) == min_ratio);
  // Up through the warmup, then down to the floor, never outside [min, 1].
  double previous = 0;
  for (std::int64_t step = 0; step <= total + 5; ++step) {
    const double ratio = warmup_cosine(step, warmup, total, min_ratio);
    INFO("step " << step << ": " << ratio);
    CHECK(ratio >= min_ratio - 1e-15);
    CHECK(ratio <= 1.0 + 1e-15);
    if (step < warmup) CHECK(ratio > previous);
    if (step > warmup) CHECK(ratio <= previous);
    previous = ratio;
  }
}

TEST_CASE("warmup_cosine: no warmup, a floor of 0", "[lr_schedule]") {
  CHECK(near(warmup_cosine(0, 0, 100, 0.2), 1.0));
  CHECK(near(warmup_cosine(50, 0, 100, 0.2), 0.6));
  CHECK(near(warmup_cosine(100, 0, 100, 0.2), 0.2));
  CHECK(near(warmup_cosine(0, 0, 1, 0.0), 1.0));
  CHECK(warmup_cosine(1, 0, 1, 0.0) == 0.0);
  CHECK(near(warmup_cosine(3, 1, 5, 0.0), 0.5));   // halfway through updates 1 .. 5
  CHECK(near(warmup_cosine(7, 2, 12, 1.0), 1.0));  // min_ratio 1: constant after warmup
  CHECK(near(warmup_cosine(0, 2, 12, 1.0), 0.5));
}

TEST_CASE("warmup_cosine: errors", "[lr_schedule]") {
  CHECK_THROWS_WITH(warmup_cosine(0, -1, 10, 0.1), Contains("warmup_cosine") && Contains("warmup -1"));
  CHECK_THROWS_WITH(warmup_cosine(0, 10, 10, 0.1), Contains("warmup_cosine") && Contains("total 10"));
  CHECK_THROWS_WITH(warmup_cosine(0, 10, 5, 0.1), Contains("warmup_cosine") && Contains("total 5"));
  CHECK_THROWS_WITH(warmup_cosine(0, 1, 10, -0.1), Contains("warmup_cosine") && Contains("min_ratio -0.1"));
  CHECK_THROWS_WITH(warmup_cosine(0, 1, 10, 1.5), Contains("warmup_cosine") && Contains("min_ratio 1.5"));
}
