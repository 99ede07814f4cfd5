// Seeded random tensors (core/random.h, randn/rand_uniform in core/tensor.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "core/ops.h"
#include "core/philox.h"
#include "tests/core/test_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using test_util::values;

namespace {

struct Moments {
  double mean, stddev, min, max;
};

Moments moments(const Tensor& t) {
  const std::vector<double> v = values(t);
  const double n = static_cast<double>(v.size());
  const double m = std::accumulate(v.begin(), v.end(), 0.0) / n;
  double var = 0;
  for (double x : v) var += (x - m) * (x - m);
  return {m, std::sqrt(var / n), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

}  // namespace

TEST_CASE("the same seed gives the same values", "[random]") {
  Generator g1(42), g2(42);
  const Tensor a = randn({3, 4}, g1), b = randn({3, 4}, g2);
  CHECK(a.shape() == Shape{3, 4});
  CHECK(a.dtype() == DType::f32);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  const Tensor u1 = rand_uniform({100}, g1, -2, 3), u2 = rand_uniform({100}, g2, -2, 3);
  CHECK(u1.to_vector<float>() == u2.to_vector<float>());
  // Re-seeding restarts the stream.
  g1.seed(42);
  CHECK(randn({3, 4}, g1).to_vector<float>() == a.to_vector<float>());
  // The global generator, through manual_seed.
  manual_seed(7);
  const std::vector<double> first = values(randn({50}, global_generator(), 0, 1, DType::f64));
  manual_seed(7);
  CHECK(values(randn({50}, global_generator(), 0, 1, DType::f64)) == first);
  // The scalar draws on Generator itself.
  Generator h1(5), h2(5);
  CHECK(h1.next() == h2.next());
  CHECK(h1.normal(1, 2) == h2.normal(1, 2));
  CHECK(h1.uniform(-1, 1) == h2.uniform(-1, 1));
}

TEST_CASE("different seeds and successive draws differ", "[random]") {
  Generator g1(1), g2(2);
  const std::vector<double> a = values(randn({1000}, g1)), b = values(randn({1000}, g2));
  std::size_t same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  CHECK(same == 0);
  const std::vector<double> c = values(randn({1000}, g1));  // the next draw from g1
  same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
  CHECK(same == 0);
  Generator h(3);
  CHECK(h.next() != h.next());
  // Values within one tensor are not all equal either.
  const std::vector<double> u = values(rand_uniform({1000}, g1));
  CHECK(std::set<double>(u.begin(), u.end()).size() > 990);
}

TEST_CASE("randn has roughly the requested mean and standard deviation", "[random][stats]") {
  Generator g(123);
  // Standard error of the mean on 100k samples is 1/316: 0.02 is over 6 standard errors.
  const Moments s = moments(randn({100000}, g));
  CHECK(std::abs(s.mean) < 0.02);
  CHECK(std::abs(s.stddev - 1) < 0.02);
  CHECK(s.min < -3);
  CHECK(s.max > 3);
  const Moments t = moments(randn({400, 250}, g, 3, 2, DType::f64));
  CHECK(std::abs(t.mean - 3) < 0.04);
  CHECK(std::abs(t.stddev - 2) < 0.04);
  // About 68% within one standard deviation.
  const std::vector<double> v = values(randn({100000}, g, -1, 0.5));
  const auto inside = std::count_if(v.begin(), v.end(), [](double x) { return std::abs(x + 1) < 0.5; });
  CHECK(std::abs(static_cast<double>(inside) / v.size() - 0.6827) < 0.01);
  // Zero stddev gives the mean exactly.
  REQUIRE_VALUES(randn({4}, g, 2.5, 0), {2.5, 2.5, 2.5, 2.5});
}

TEST_CASE("rand_uniform stays within [low, high) and fills it evenly", "[random][stats]") {
  Generator g(9);
  const Tensor u = rand_uniform({100000}, g, -2, 3);
  const Moments m = moments(u);
  CHECK(m.min >= -2);
  CHECK(m.max <= 3);
  CHECK(m.min < -1.99);
  CHECK(m.max > 2.99);
  CHECK(std::abs(m.mean - 0.5) < 0.03);
  CHECK(std::abs(m.stddev - 5 / std::sqrt(12.0)) < 0.03);
  // Each fifth of the range gets about a fifth of the samples.
  const std::vector<double> v = values(u);
  std::vector<int> bins(5, 0);
  for (double x : v) ++bins[std::min(4, static_cast<int>(x + 2))];
  for (int count : bins) CHECK(std::abs(count - 20000) < 1000);
  const Moments unit = moments(rand_uniform({10000}, g));
  CHECK(unit.min >= 0);
  CHECK(unit.max <= 1);  // f32 rounding may reach 1
  REQUIRE_VALUES(rand_uniform({3}, g, 4, 4), {4, 4, 4});
}

TEST_CASE("random tensors in f64 are the same draws at full precision", "[random][dtype]") {
  Generator g1(77), g2(77);
  const Tensor d = randn({2, 500}, g1, 0, 1, DType::f64);
  CHECK(d.dtype() == DType::f64);
  const Tensor f = randn({2, 500}, g2);
  // The same stream, rounded to f32.
  CHECK(d.to(DType::f32).to_vector<float>() == f.to_vector<float>());
  // And f64 keeps more precision than f32 can hold.
  const std::vector<double> dv = values(d);
  std::size_t not_float = 0;
  for (double x : dv) not_float += static_cast<double>(static_cast<float>(x)) != x;
  CHECK(not_float > 900);
  Generator g3(8);
  const Tensor u = rand_uniform({10000}, g3, 10, 11, DType::f64);
  CHECK(u.dtype() == DType::f64);
  const Moments m = moments(u);
  CHECK(m.min >= 10);
  CHECK(m.max < 11);
  CHECK(std::abs(m.mean - 10.5) < 0.02);
}

TEST_CASE("random creation errors", "[random][errors]") {
  Generator g(0);
  CHECK_THROWS_WITH(randn({3}, g, 0, 1, DType::i32), Contains("randn") && Contains("i32"));
  CHECK_THROWS_AS(rand_uniform({3}, g, 0, 1, DType::boolean), Error);
  CHECK_THROWS_WITH(randn({3}, g, 0, -1), Contains("randn"));
  CHECK_THROWS_WITH(rand_uniform({3}, g, 2, 1), Contains("rand_uniform"));
}

TEST_CASE("Philox4x32-10 reproduces Random123's known answers", "[random][philox]") {
  using philox::Block;
  const auto same = [](const Block& a, const Block& b) {
    return a.v[0] == b.v[0] && a.v[1] == b.v[1] && a.v[2] == b.v[2] && a.v[3] == b.v[3];
  };
  REQUIRE(same(philox::philox4x32_10(Block{{0, 0, 0, 0}}, 0, 0),
               Block{{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}));
  REQUIRE(same(philox::philox4x32_10(Block{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu,
                                     0xffffffffu),
               Block{{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}));
  REQUIRE(same(philox::philox4x32_10(Block{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u,
                                     0x299f31d0u),
               Block{{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}));
}

TEST_CASE("philox_uniform: one seed per call, element i a function of (seed, i) only", "[random][philox]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Generator a(7), b(7);
    const Tensor x = philox_uniform({1000, 37}, a, -2, 3, dtype);
    const Tensor y = philox_uniform({1000, 37}, b, -2, 3, dtype);
    REQUIRE(x.to_vector<double>() == y.to_vector<double>());
    // The element values do not depend on the shape or on how the threads split the work.
    Generator c(7);
    const Tensor flat = philox_uniform({37000}, c, -2, 3, dtype);
    REQUIRE(flat.to_vector<double>() == x.to_vector<double>());
    // Element i is the documented function of (seed, i).
    Generator d(7);
    const std::uint64_t seed = d.next();
    const std::vector<double> values = x.to_vector<double>();
    for (std::uint64_t i : {0ull, 1ull, 2ull, 3ull, 4ull, 999ull, 36999ull}) {
      const double expected = dtype == DType::f32 ? double(philox::uniform_f32(seed, i, -2.0, 3.0))
                                                  : philox::uniform_f64(seed, i, -2.0, 3.0);
      REQUIRE(values[i] == expected);
    }
    // The next call draws another stream.
    REQUIRE(philox_uniform({1000, 37}, a, -2, 3, dtype).to_vector<double>() != values);
    double lo = 1e9, hi = -1e9, sum = 0;
    for (double v : values) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      sum += v;
    }
    REQUIRE(lo >= -2);
    REQUIRE(hi < 3);
    REQUIRE(sum / values.size() == Approx(0.5).margin(0.03));  // mean of U[-2, 3) is 0.5; sd/sqrt(n) ~ 0.0075
    // Ten equal bins each get a tenth (about 3700 +- 61).
    std::vector<int> bins(10, 0);
    for (double v : values) ++bins[std::min(9, static_cast<int>((v + 2) / 0.5))];
    for (int count : bins) REQUIRE(std::abs(count - 3700) < 400);
  }
}

TEST_CASE("philox_uniform in f32 is the f64 stream rounded, below high", "[random][philox]") {
  Generator a(3), b(3);
  const std::vector<double> f32 = philox_uniform({4096}, a, 0, 1, DType::f32).to_vector<double>();
  const std::vector<double> f64 = philox_uniform({4096}, b, 0, 1, DType::f64).to_vector<double>();
  for (std::size_t i = 0; i < f32.size(); ++i) {
    REQUIRE(f32[i] == static_cast<double>(std::min(static_cast<float>(f64[i]), std::nextafter(1.0f, 0.0f))));
    REQUIRE(f32[i] < 1.0);
  }
  // An empty range gives low (the pull-back below high applies only to a non-empty one).
  REQUIRE(philox::uniform_f32(0, 0, 2.0, 2.0) == 2.0f);
}

TEST_CASE("philox_uniform errors", "[random][philox][errors]") {
  Generator g(0);
  REQUIRE_THROWS_WITH(philox_uniform({2}, g, 1, 0), Catch::Contains("philox_uniform: low 1 > high 0"));
  REQUIRE_THROWS_WITH(philox_uniform({2}, g, 0, 1, DType::i32), Catch::Contains("philox_uniform: needs a floating dtype"));
  REQUIRE(philox_uniform({0, 3}, g).numel() == 0);
}

TEST_CASE("a generator's state round-trips through text, and bad text is an error", "[choices]") {
  Generator g(7);
  g.next();
  const std::string state = g.state();
  const std::uint64_t a = g.next(), b = g.next();
  Generator h(1);
  h.set_state(state);
  CHECK(h.next() == a);
  CHECK(h.next() == b);
  CHECK_THROWS_WITH(h.set_state("not a state"), Contains("Generator::set_state"));
}
