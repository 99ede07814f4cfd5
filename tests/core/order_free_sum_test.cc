// The order-free sum (core/order_free_sum.h): the same set of terms gives the same bits in any
// order and any grouping, and the sum is accurate.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/order_free_sum.h"

using namespace tandem;

namespace {

// `terms` terms of `n` floats spread over many binades (with exact cancellations and zeros),
// as gradients of one element over many microbatches are.
std::vector<std::vector<float>> make_terms(int terms, int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> binade(-30, 30);
  std::vector<std::vector<float>> all(static_cast<std::size_t>(terms), std::vector<float>(static_cast<std::size_t>(n)));
  for (auto& term : all)
    for (float& x : term) x = std::ldexp(normal(rng), binade(rng));
  for (int j = 0; j < n; j += 7) all[0][j] = 0.0f;  // zeros
  all[1][3] = -all[2][3];                           // a pair that cancels exactly
  return all;
}

std::vector<float> rounded(const OrderFreeSum& sum) {
  std::vector<float> out(static_cast<std::size_t>(sum.size()));
  sum.round_to(out.data());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("order_free_sum: any order of the terms gives the same bits") {
  const int n = 257;
  const auto terms = make_terms(40, n, 1);
  OrderFreeSum forward(n);
  for (const auto& t : terms) forward.add(t.data());
  const std::vector<float> expected = rounded(forward);

  std::mt19937 rng(2);
  std::vector<std::size_t> order(terms.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (int trial = 0; trial < 5; ++trial) {
    std::shuffle(order.begin(), order.end(), rng);
    OrderFreeSum shuffled(n);
    for (std::size_t i : order) shuffled.add(terms[i].data());
    CHECK(same_bits(rounded(shuffled), expected));
  }
  // A plain float sum does depend on the order (or this test would prove nothing).
  std::vector<float> plain_forward(n, 0.0f), plain_backward(n, 0.0f);
  for (std::size_t i = 0; i < terms.size(); ++i)
    for (int j = 0; j < n; ++j) plain_forward[j] += terms[i][j], plain_backward[j] += terms[terms.size() - 1 - i][j];
  CHECK_FALSE(same_bits(plain_forward, plain_backward));
}

TEST_CASE("order_free_sum: partial sums merged in any grouping, or aligned and added as ranks do") {
  const int n = 100;
  const auto terms = make_terms(24, n, 3);
  OrderFreeSum whole(n);
  for (const auto& t : terms) whole.add(t.data());
  const std::vector<float> expected = rounded(whole);

  for (int parts : {2, 3, 4, 5}) {
    std::vector<OrderFreeSum> partial(static_cast<std::size_t>(parts), OrderFreeSum(n));
    for (std::size_t i = 0; i < terms.size(); ++i) partial[(i * 7) % parts].add(terms[i].data());
    // merge, last part first
    OrderFreeSum merged(n);
    for (int p = parts - 1; p >= 0; --p) merged.merge(partial[p]);
    CHECK(same_bits(rounded(merged), expected));
    // As over ranks: the maximum of the levels, every part aligned to it, the slices added.
    std::vector<std::int16_t> levels(n, OrderFreeSum::kEmpty);
    for (const auto& part : partial)
      for (int j = 0; j < n; ++j) levels[j] = std::max(levels[j], part.top()[j]);
    std::vector<double> slices(partial[0].slices().size(), 0.0);
    for (auto& part : partial) {
      part.align_to(levels);
      for (std::size_t k = 0; k < slices.size(); ++k) slices[k] += part.slices()[k];
    }
    OrderFreeSum combined(n);
    combined.align_to(levels);
    combined.slices() = slices;
    CHECK(same_bits(rounded(combined), expected));
  }
}

TEST_CASE("order_free_sum: accurate to far below a float's rounding") {
  const int n = 64;
  const auto terms = make_terms(50, n, 4);
  OrderFreeSum sum(n);
  for (const auto& t : terms) sum.add(t.data());
  std::vector<double> out(n);
  sum.round_to(out.data());
  for (int j = 0; j < n; ++j) {
    long double exact = 0, largest = 0;
    for (const auto& t : terms) exact += t[j], largest = std::max<long double>(largest, std::fabs(t[j]));
    // Every term keeps at least 40 bits below the largest of its element.
    CHECK(std::fabs(static_cast<long double>(out[j]) - exact) <= largest * std::ldexp(1.0L, -40) * terms.size());
  }
  // A large term arriving after small ones drops the same bits as arriving first.
  OrderFreeSum small_first(1), large_first(1);
  const float small = 1.0e-12f, large = 3.0e6f;
  small_first.add(&small), small_first.add(&large);
  large_first.add(&large), large_first.add(&small);
  CHECK(same_bits(rounded(small_first), rounded(large_first)));
  // Scale and types.
  const double x = 0.1;
  OrderFreeSum one(1);
  one.add(&x);
  double back = 0;
  one.round_to(&back, 2.0);
  CHECK(back == 0.2);
}

TEST_CASE("order_free_sum: NaN and infinities as IEEE sums them, in any order") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto sum_of = [](std::vector<float> xs) {
    OrderFreeSum s(1);
    for (float& x : xs) s.add(&x);
    float out = 0;
    s.round_to(&out);
    return out;
  };
  CHECK(sum_of({1.0f, inf, 2.0f}) == inf);
  CHECK(sum_of({inf, 1.0f}) == inf);
  CHECK(std::isnan(sum_of({inf, 1.0f, -inf})));
  CHECK(std::isnan(sum_of({-inf, 1.0f, inf})));
  CHECK(std::isnan(sum_of({1.0f, nan})));
  CHECK(std::isnan(sum_of({nan, 1.0f})));
  // ... also merged from parts, as over ranks.
  OrderFreeSum a(1), b(1);
  const float one = 1.0f;
  a.add(&one), b.add(&inf);
  a.merge(b);
  float out = 0;
  a.round_to(&out);
  CHECK(out == inf);
}
