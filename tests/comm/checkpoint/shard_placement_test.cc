// ShardPlacement (comm/checkpoint/shard_placement.h): for_each_shared_run and copy_shared against
// a brute-force reference that maps every stored element of both pieces to its global
// coordinates, on many seeded random cases (0-D to 4-D tensors, boxes that do not meet, zero
// extents, element ranges on both sides); check's errors; str().
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "comm/checkpoint/shard_placement.h"
#include "core/error.h"

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

std::int64_t product(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t e : shape) n *= e;
  return n;
}

// The global (row-major) index of each of the piece's stored elements, element by element:
// stored element j is element begin + j of the box, whose coordinates are unravelled in the
// box, shifted by the offsets and raveled in the global shape.
std::vector<std::int64_t> global_indices(const ShardPlacement& p) {
  std::vector<std::int64_t> out;
  const std::size_t axes = p.global.size();
  for (std::int64_t k = p.begin; k < p.end; ++k) {
    std::vector<std::int64_t> coord(axes);
    std::int64_t rest = k;
    for (std::size_t a = axes; a-- > 0;) {
      coord[a] = rest % p.box[a];
      rest /= p.box[a];
    }
    std::int64_t g = 0;
    for (std::size_t a = 0; a < axes; ++a) g = g * p.global[a] + coord[a] + p.offsets[a];
    out.push_back(g);
  }
  return out;
}

// Global index -> stored index.
std::map<std::int64_t, std::int64_t> stored_at(const ShardPlacement& p) {
  std::map<std::int64_t, std::int64_t> out;
  const std::vector<std::int64_t> g = global_indices(p);
  for (std::size_t j = 0; j < g.size(); ++j) {
    const bool fresh = out.emplace(g[j], static_cast<std::int64_t>(j)).second;
    REQUIRE(fresh);  // the reference itself: no element stored twice
  }
  return out;
}

// A random piece of a tensor of shape `global`: a box anywhere inside it (extents 0 allowed),
// then a random range of its elements, often the whole box or an empty one.
ShardPlacement random_piece(const Shape& global, std::mt19937_64& rng) {
  const auto below = [&](std::int64_t n) { return n <= 0 ? std::int64_t(0) : static_cast<std::int64_t>(rng() % n); };
  ShardPlacement p;
  p.global = global;
  p.offsets.resize(global.size());
  p.box = Shape(global.size(), 0);
  for (std::size_t a = 0; a < global.size(); ++a) {
    switch (below(3)) {
      case 0:  // the whole axis
        p.offsets[a] = 0;
        p.box[a] = global[a];
        break;
      case 1:  // a zero extent (rarely: it empties the whole box)
        if (below(8) == 0) {
          p.offsets[a] = below(global[a] + 1);
          p.box[a] = 0;
          break;
        }
        [[fallthrough]];
      default:  // a non-empty part of the axis where it has one
        p.offsets[a] = below(global[a]);
        p.box[a] = global[a] == 0 ? 0 : 1 + below(global[a] - p.offsets[a]);
    }
  }
  const std::int64_t n = product(p.box);
  switch (below(6)) {
    case 0:
    case 1:
      p.begin = 0;
      p.end = n;
      break;
    case 2:  // empty, anywhere
      p.begin = p.end = below(n + 1);
      break;
    default:
      p.begin = below(n + 1);
      p.end = p.begin + below(n - p.begin + 1);
  }
  p.check("random_piece");
  return p;
}

// A random piece whose box meets `other`'s box where that is not empty (its element range is
// still random, so the pieces may share nothing).
ShardPlacement meeting_piece(const ShardPlacement& other, std::mt19937_64& rng) {
  ShardPlacement p = random_piece(other.global, rng);
  if (product(other.box) == 0) return p;
  const auto below = [&](std::int64_t n) { return n <= 0 ? std::int64_t(0) : static_cast<std::int64_t>(rng() % n); };
  for (std::size_t a = 0; a < p.global.size(); ++a) {
    const std::int64_t first = other.offsets[a], last = other.offsets[a] + other.box[a] - 1;
    p.offsets[a] = below(last + 1);
    const std::int64_t end_low = std::max(p.offsets[a], first) + 1;
    p.box[a] = end_low - p.offsets[a] + below(p.global[a] - end_low + 1);
  }
  const std::int64_t n = product(p.box);
  p.begin = below(2) == 0 ? 0 : below(n + 1);
  p.end = below(2) == 0 ? n : p.begin + below(n - p.begin + 1);
  p.check("meeting_piece");
  return p;
}

Shape random_shape(std::mt19937_64& rng) {
  const std::size_t axes = rng() % 5;  // 0-D to 4-D
  Shape s(axes, 0);
  for (std::size_t a = 0; a < axes; ++a) s[a] = (rng() % 16 == 0) ? 0 : static_cast<std::int64_t>(1 + rng() % 5);
  return s;
}

struct Run {
  std::int64_t from, to, count;
};

// Checks for_each_shared_run and copy_shared on one pair against the reference. Returns the
// number of shared elements.
std::int64_t check_pair(const ShardPlacement& source, const ShardPlacement& target) {
  INFO("source " << source.str() << " target " << target.str() << " of " << source.global);
  const std::vector<std::int64_t> source_global = global_indices(source);
  const std::map<std::int64_t, std::int64_t> target_at = stored_at(target);
  // Reference: target stored index -> source stored index.
  std::map<std::int64_t, std::int64_t> expected;
  for (std::size_t i = 0; i < source_global.size(); ++i) {
    const auto it = target_at.find(source_global[i]);
    if (it != target_at.end()) expected[it->second] = static_cast<std::int64_t>(i);
  }

  std::vector<Run> runs;
  for_each_shared_run(source, target, [&](std::int64_t from, std::int64_t to, std::int64_t count) {
    runs.push_back({from, to, count});
  });
  std::map<std::int64_t, std::int64_t> got;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const Run& run = runs[r];
    INFO("run " << r << ": from " << run.from << " to " << run.to << " count " << run.count);
    REQUIRE(run.count > 0);
    REQUIRE(run.from >= 0);
    REQUIRE(run.from + run.count <= source.numel());
    REQUIRE(run.to >= 0);
    REQUIRE(run.to + run.count <= target.numel());
    // In order on both sides, without overlap (PieceReader reads the span from the first run's
    // start to the last run's end).
    if (r > 0) {
      REQUIRE(run.from >= runs[r - 1].from + runs[r - 1].count);
      REQUIRE(run.to >= runs[r - 1].to + runs[r - 1].count);
    }
    for (std::int64_t k = 0; k < run.count; ++k) {
      const bool fresh = got.emplace(run.to + k, run.from + k).second;
      REQUIRE(fresh);
    }
  }
  REQUIRE(got == expected);

  // copy_shared: every shared element copied to its place, nothing else touched.
  std::vector<std::int32_t> from(static_cast<std::size_t>(source.numel())),
      to(static_cast<std::size_t>(target.numel()));
  for (std::size_t i = 0; i < from.size(); ++i) from[i] = static_cast<std::int32_t>(1000 + i);
  for (std::int32_t& v : to) v = -1;
  const std::int64_t copied = copy_shared(source, from.data(), target, to.data(), sizeof(std::int32_t));
  REQUIRE(copied == static_cast<std::int64_t>(expected.size()));
  for (std::size_t j = 0; j < to.size(); ++j) {
    const auto it = expected.find(static_cast<std::int64_t>(j));
    INFO("target element " << j);
    REQUIRE(to[j] == (it == expected.end() ? -1 : from[it->second]));
  }
  return copied;
}

}  // namespace

TEST_CASE("shard placement: the reference maps a piece's elements as documented") {
  // [1:3, 2:4] of a 4 x 5 tensor, elements [1, 3) of the box: box elements 1, 2 are (0, 1) and
  // (1, 0), global (1, 3) and (2, 2).
  ShardPlacement p;
  p.global = {4, 5};
  p.offsets = {1, 2};
  p.box = {2, 2};
  p.begin = 1;
  p.end = 3;
  REQUIRE(global_indices(p) == std::vector<std::int64_t>{8, 12});
  REQUIRE(global_indices(ShardPlacement::whole({})) == std::vector<std::int64_t>{0});
  REQUIRE(global_indices(ShardPlacement::whole({2, 0, 3})).empty());
}

TEST_CASE("shard placement: for_each_shared_run and copy_shared against element-by-element copies") {
  std::mt19937_64 rng(20240611);
  std::int64_t cases = 0, shared_cases = 0, partial_cases = 0, by_axes[5] = {0, 0, 0, 0, 0};
  for (int i = 0; i < 10000; ++i) {
    const Shape global = random_shape(rng);
    const ShardPlacement source = random_piece(global, rng);
    const ShardPlacement target = i % 2 ? meeting_piece(source, rng) : random_piece(global, rng);
    const std::int64_t shared = check_pair(source, target);
    ++cases;
    ++by_axes[global.size()];
    shared_cases += shared > 0;
    partial_cases += shared > 0 && shared < target.numel() && shared < source.numel();
  }
  // The random cases reach what they should: every rank of tensor, pairs that share something
  // and pairs that share part of each side.
  INFO("cases " << cases << ", sharing " << shared_cases << ", partly " << partial_cases << "; by rank " << by_axes[0]
                << " " << by_axes[1] << " " << by_axes[2] << " " << by_axes[3] << " " << by_axes[4]);
  for (std::int64_t n : by_axes) REQUIRE(n > cases / 10);
  REQUIRE(shared_cases > cases / 8);
  REQUIRE(partial_cases > cases / 40);
}

TEST_CASE("shard placement: layouts of one tensor that tile it copy every element exactly once") {
  // Rows split unevenly in 3 (tensor parallel), and the whole tensor cut into 4 uneven element
  // ranges (ZeRO): copying every piece of one layout into every piece of the other fills each
  // target element exactly once, with the right value.
  const Shape global = {7, 3, 2};
  const std::int64_t n = product(global);
  std::vector<ShardPlacement> rows;
  std::int64_t at = 0;
  for (std::int64_t extent : {2, 4, 1}) {
    ShardPlacement p = ShardPlacement::whole(global);
    p.offsets = {at, 0, 0};
    p.box = {extent, 3, 2};
    p.end = product(p.box);
    p.check("rows");
    rows.push_back(p);
    at += extent;
  }
  std::vector<ShardPlacement> ranges;
  for (auto [b, e] : std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 5}, {5, 5}, {5, 23}, {23, n}}) {
    ShardPlacement p = ShardPlacement::whole(global);
    p.begin = b;
    p.end = e;
    ranges.push_back(p);
  }
  std::vector<double> whole(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) whole[i] = 0.5 * i + 1;
  const auto slice = [&](const ShardPlacement& p) {
    std::vector<double> out;
    for (std::int64_t g : global_indices(p)) out.push_back(whole[g]);
    return out;
  };
  for (const auto& [from_layout, to_layout] : {std::make_pair(&rows, &ranges), std::make_pair(&ranges, &rows)}) {
    for (const ShardPlacement& target : *to_layout) {
      std::vector<double> data(static_cast<std::size_t>(target.numel()), -1.0);
      std::int64_t copied = 0;
      for (const ShardPlacement& source : *from_layout) {
        const std::vector<double> s = slice(source);
        copied += copy_shared(source, s.data(), target, data.data(), sizeof(double));
      }
      REQUIRE(copied == target.numel());
      REQUIRE(data == slice(target));
    }
  }
}

TEST_CASE("shard placement: pieces of tensors of different shapes are an error") {
  const ShardPlacement a = ShardPlacement::whole({2, 3}), b = ShardPlacement::whole({3, 2});
  REQUIRE_THROWS_WITH(for_each_shared_run(a, b, [](std::int64_t, std::int64_t, std::int64_t) {}),
                      Contains("[2, 3]") && Contains("[3, 2]"));
  std::vector<float> x(6), y(6);
  REQUIRE_THROWS_AS(copy_shared(a, x.data(), b, y.data(), sizeof(float)), Error);
}

TEST_CASE("shard placement: check names what is wrong") {
  const auto piece = [](Shape global, std::vector<std::int64_t> offsets, Shape box, std::int64_t begin,
                        std::int64_t end) {
    ShardPlacement p;
    p.global = global;
    p.offsets = offsets;
    p.box = box;
    p.begin = begin;
    p.end = end;
    return p;
  };
  // Valid ones, the edges included.
  REQUIRE_NOTHROW(piece({4, 5}, {0, 0}, {4, 5}, 0, 20).check("w"));
  REQUIRE_NOTHROW(piece({4, 5}, {4, 5}, {0, 0}, 0, 0).check("w"));
  REQUIRE_NOTHROW(piece({4, 5}, {1, 2}, {3, 3}, 9, 9).check("w"));
  REQUIRE_NOTHROW(piece({}, {}, {}, 0, 1).check("w"));
  REQUIRE_NOTHROW(piece({0, 3}, {0, 1}, {0, 2}, 0, 0).check("w"));
  REQUIRE_NOTHROW(ShardPlacement::whole({3, 0, 2}).check("w"));

  // Axes: offsets and extents must match the tensor's rank.
  REQUIRE_THROWS_WITH(piece({4, 5}, {0}, {4, 5}, 0, 20).check("model/W"),
                      Contains("model/W") && Contains("needs 2 offsets and extents, got 1 and 2"));
  REQUIRE_THROWS_WITH(piece({4, 5}, {0, 0}, {4, 5, 1}, 0, 20).check("model/W"),
                      Contains("model/W") && Contains("got 2 and 3"));
  REQUIRE_THROWS_WITH(piece({}, {0}, {}, 0, 1).check("scalar"), Contains("scalar") && Contains("got 1 and 0"));
  // The box outside the tensor.
  REQUIRE_THROWS_WITH(piece({4, 5}, {0, 3}, {4, 3}, 0, 12).check("model/W"),
                      Contains("model/W") && Contains("[0:4, 3:6]") && Contains("outside the tensor of shape [4, 5]") &&
                          Contains("on axis 1"));
  REQUIRE_THROWS_WITH(piece({4, 5}, {-1, 0}, {2, 5}, 0, 10).check("model/W"),
                      Contains("model/W") && Contains("on axis 0"));
  REQUIRE_THROWS_WITH(piece({4, 5}, {2, 0}, {-1, 5}, 0, 0).check("model/W"), Contains("on axis 0"));
  REQUIRE_THROWS_WITH(piece({4, 5}, {5, 0}, {0, 5}, 0, 0).check("model/W"), Contains("on axis 0"));
  // The range outside the box.
  REQUIRE_THROWS_WITH(piece({4, 5}, {1, 0}, {2, 5}, 0, 11).check("model/W"),
                      Contains("model/W") && Contains("elements [0, 11) are outside the box [2, 5] of 10 elements"));
  REQUIRE_THROWS_WITH(piece({4, 5}, {1, 0}, {2, 5}, -1, 3).check("model/W"), Contains("elements [-1, 3)"));
  REQUIRE_THROWS_WITH(piece({4, 5}, {1, 0}, {2, 5}, 4, 3).check("model/W"), Contains("elements [4, 3)"));
  REQUIRE_THROWS_WITH(piece({}, {}, {}, 0, 2).check("scalar"), Contains("scalar") && Contains("elements [0, 2)"));
}

TEST_CASE("shard placement: str") {
  ShardPlacement p;
  p.global = {8, 32};
  p.offsets = {0, 8};
  p.box = {4, 8};
  p.begin = 0;
  p.end = 32;
  REQUIRE(p.str() == "[0:4, 8:16]");  // the whole box: no range
  p.begin = 3;
  p.end = 20;
  REQUIRE(p.str() == "[0:4, 8:16][3:20]");
  p.begin = 0;
  p.end = 31;
  REQUIRE(p.str() == "[0:4, 8:16][0:31]");
  p.begin = p.end = 7;
  REQUIRE(p.str() == "[0:4, 8:16][7:7]");
  REQUIRE(ShardPlacement::whole({}).str() == "[]");
  REQUIRE(ShardPlacement::whole({6}).str() == "[0:6]");
  REQUIRE(ShardPlacement::whole({2, 0, 3}).str() == "[0:2, 0:0, 0:3]");
  ShardPlacement scalar = ShardPlacement::whole({});
  scalar.end = 0;
  REQUIRE(scalar.str() == "[][0:0]");
  // Two pieces are the same piece exactly when their str() is (the save plan relies on it).
  ShardPlacement a = ShardPlacement::whole({4, 5}), b = a;
  b.offsets = {0, 0};
  REQUIRE(a.str() == b.str());
  b.begin = 1;
  REQUIRE(a.str() != b.str());
}
