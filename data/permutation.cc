#include "data/permutation.h"

#include <limits>
#include <utility>

#include "core/error.h"

namespace tandem {

std::uint64_t uniform_below(std::mt19937_64& engine, std::uint64_t bound) {
  TANDEM_CHECK(bound > 0, "uniform_below: the bound must be positive, got 0");
  // Values at or above the largest multiple of bound would make small results likelier.
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t limit = max - (max % bound + 1) % bound;  // largest multiple of bound, minus 1
  std::uint64_t x;
  do {
    x = engine();
  } while (x > limit);
  return x % bound;
}

std::vector<std::int64_t> random_permutation(std::int64_t n, std::mt19937_64& engine) {
  TANDEM_CHECK(n >= 0, "random_permutation: negative length ", n);
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[i] = i;
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(uniform_below(engine, static_cast<std::uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

bool is_permutation_of(const std::vector<std::int64_t>& order, std::int64_t n) {
  if (static_cast<std::int64_t>(order.size()) != n) return false;
  std::vector<bool> seen(order.size(), false);
  for (std::int64_t i : order) {
    if (i < 0 || i >= n || seen[i]) return false;
    seen[i] = true;
  }
  return true;
}

}  // namespace tandem
