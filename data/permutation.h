// Seeded random orders for shuffling and random splits.
//
// std::shuffle and std::uniform_int_distribution leave their algorithms to each standard
// library, so the same seed could give different orders on different platforms. These draw
// only from std::mt19937_64's raw output (which the standard fixes bit for bit), so a seed
// gives the same order everywhere.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace tandem {

// A uniformly distributed integer in [0, bound), by rejection sampling; bound must be > 0.
std::uint64_t uniform_below(std::mt19937_64& engine, std::uint64_t bound);

// A uniformly random permutation of 0, 1, ..., n - 1 (Fisher-Yates); n must be >= 0.
std::vector<std::int64_t> random_permutation(std::int64_t n, std::mt19937_64& engine);

// True when `order` holds each of 0, ..., n - 1 exactly once.
bool is_permutation_of(const std::vector<std::int64_t>& order, std::int64_t n);

}  // namespace tandem
