// SequenceLayout (comm/context_parallel/sequence_layout.h) in one process: the contiguous and
// balanced splits of uneven lengths (ranks without positions included), their invariants over
// many lengths and rank counts, shard and unshard (values, round trip, gradients), grouped(), the
// errors of explicit runs that overlap, leave gaps or overrun, and the causal load balance (visible
// (query, key) pairs per rank) of balanced against contiguous at 4 ranks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "comm/context_parallel/sequence_layout.h"
#include "core/ops/attention.h"
#include "tests/core/test_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using test_util::values;

namespace {

using Runs = std::vector<PositionRun>;

std::string describe(const Runs& runs) {
  std::ostringstream out;
  for (const PositionRun& r : runs) out << "[" << r.start << ", +" << r.length << ") ";
  return out.str();
}

void require_runs(const SequenceLayout& layout, const std::vector<Runs>& want) {
  REQUIRE(layout.ranks() == static_cast<int>(want.size()));
  for (int r = 0; r < layout.ranks(); ++r) {
    INFO("rank " << r << ": got " << describe(layout.runs(r)) << ", want " << describe(want[r]));
    const Runs& got = layout.runs(r);
    REQUIRE(got.size() == want[r].size());
    std::int64_t n = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      REQUIRE(got[i].start == want[r][i].start);
      REQUIRE(got[i].length == want[r][i].length);
      n += got[i].length;
    }
    REQUIRE(layout.local_length(r) == n);
  }
}

// The positions rank r holds, in its row order.
std::vector<std::int64_t> positions_of(const SequenceLayout& layout, int rank) {
  std::vector<std::int64_t> out;
  for (const PositionRun& run : layout.runs(rank))
    for (std::int64_t p = run.start; p < run.start + run.length; ++p) out.push_back(p);
  return out;
}

// Every position once; every run non-empty and ascending within a rank.
void require_covers_once(const SequenceLayout& layout) {
  std::vector<int> held(static_cast<std::size_t>(layout.length()), 0);
  for (int r = 0; r < layout.ranks(); ++r) {
    std::int64_t last = -1;
    for (const PositionRun& run : layout.runs(r)) {
      REQUIRE(run.length > 0);
      REQUIRE(run.start > last);
      last = run.start + run.length - 1;
    }
    for (std::int64_t p : positions_of(layout, r)) {
      REQUIRE(p >= 0);
      REQUIRE(p < layout.length());
      ++held[static_cast<std::size_t>(p)];
    }
  }
  for (int h : held) REQUIRE(h == 1);
}

// Visible (query, key) pairs per rank under `mask` over the whole sequence (the library's own
// visibility), summed over rank r's query rows.
std::vector<double> visible_pairs(const SequenceLayout& layout, const AttentionMask& mask) {
  const std::int64_t T = layout.length();
  const std::vector<double> seen = values(attention_visibility(mask, 1, T, T));
  std::vector<double> out;
  for (int r = 0; r < layout.ranks(); ++r) {
    double n = 0;
    for (std::int64_t p : positions_of(layout, r))
      for (std::int64_t s = 0; s < T; ++s) n += seen[static_cast<std::size_t>(p * T + s)];
    out.push_back(n);
  }
  return out;
}

}  // namespace

TEST_CASE("contiguous: uneven lengths, ranks without positions") {
  require_runs(SequenceLayout::contiguous(7, 3), {{{0, 2}}, {{2, 2}}, {{4, 3}}});
  require_runs(SequenceLayout::contiguous(7, 4), {{{0, 1}}, {{1, 2}}, {{3, 2}}, {{5, 2}}});
  require_runs(SequenceLayout::contiguous(1, 4), {{}, {}, {}, {{0, 1}}});
  require_runs(SequenceLayout::contiguous(8, 1), {{{0, 8}}});
  require_runs(SequenceLayout::contiguous(0, 2), {{}, {}});
  REQUIRE(SequenceLayout::contiguous(1, 4).local_length(0) == 0);
}

TEST_CASE("balanced: chunk r and chunk 2R - 1 - r of 2R, uneven lengths, ranks without positions") {
  // 6 chunks of 7: 1 1 1 1 1 2.
  require_runs(SequenceLayout::balanced(7, 3), {{{0, 1}, {5, 2}}, {{1, 1}, {4, 1}}, {{2, 1}, {3, 1}}});
  // 8 chunks of 7: 0 1 1 1 1 1 1 1 (rank 0's first chunk is empty and dropped).
  require_runs(SequenceLayout::balanced(7, 4), {{{6, 1}}, {{0, 1}, {5, 1}}, {{1, 1}, {4, 1}}, {{2, 1}, {3, 1}}});
  // 8 chunks of 1: only the last holds the position, and it is rank 0's.
  require_runs(SequenceLayout::balanced(1, 4), {{{0, 1}}, {}, {}, {}});
  // 8 chunks of 4: 0 1 0 1 0 1 0 1.
  require_runs(SequenceLayout::balanced(4, 4), {{{3, 1}}, {{0, 1}}, {{2, 1}}, {{1, 1}}});
  require_runs(SequenceLayout::balanced(16, 4),
               {{{0, 2}, {14, 2}}, {{2, 2}, {12, 2}}, {{4, 2}, {10, 2}}, {{6, 2}, {8, 2}}});
  require_runs(SequenceLayout::balanced(5, 1), {{{0, 2}, {2, 3}}});
}

TEST_CASE("contiguous and balanced cover every position once, for many lengths and rank counts") {
  for (int R = 1; R <= 5; ++R)
    for (std::int64_t T = 0; T <= 23; ++T) {
      INFO("T = " << T << ", R = " << R);
      const SequenceLayout c = SequenceLayout::contiguous(T, R), b = SequenceLayout::balanced(T, R);
      REQUIRE(c.length() == T);
      REQUIRE(b.length() == T);
      REQUIRE(c.ranks() == R);
      REQUIRE(b.ranks() == R);
      require_covers_once(c);
      require_covers_once(b);
      std::int64_t cmin = T, cmax = 0, bmin = T, bmax = 0;
      for (int r = 0; r < R; ++r) {
        REQUIRE(c.runs(r).size() <= 1);
        REQUIRE(b.runs(r).size() <= 2);
        cmin = std::min(cmin, c.local_length(r));
        cmax = std::max(cmax, c.local_length(r));
        bmin = std::min(bmin, b.local_length(r));
        bmax = std::max(bmax, b.local_length(r));
      }
      REQUIRE(cmax - cmin <= 1);
      REQUIRE(bmax - bmin <= 2);
    }
}

TEST_CASE("shard and unshard: rows in run order, round trip, gradients back into the rows") {
  for (const int R : {1, 3, 4})
    for (const std::int64_t T : {7, 1, 12})
      for (const bool balanced : {false, true}) {
        const SequenceLayout layout = balanced ? SequenceLayout::balanced(T, R) : SequenceLayout::contiguous(T, R);
        INFO((balanced ? "balanced" : "contiguous") << ", T = " << T << ", R = " << R);
        for (const std::int64_t axis : {0, 1, 2}) {
          INFO("axis " << axis);
          Shape shape{2, 3, 2};
          shape[static_cast<std::size_t>(axis)] = T;
          const Tensor x = test_util::iota(shape, DType::f64);
          const std::vector<double> xs = values(x);
          // Strides of shape, for the expected rows.
          std::int64_t inner = 1, outer = 1;
          for (std::size_t a = static_cast<std::size_t>(axis) + 1; a < shape.size(); ++a) inner *= shape[a];
          for (std::size_t a = 0; a < static_cast<std::size_t>(axis); ++a) outer *= shape[a];

          Variables parts;
          for (int r = 0; r < R; ++r) {
            INFO("rank " << r);
            const std::vector<std::int64_t> mine = positions_of(layout, r);
            const Variable part = layout.shard(Variable(x), r, axis);
            Shape want_shape = shape;
            want_shape[static_cast<std::size_t>(axis)] = static_cast<std::int64_t>(mine.size());
            REQUIRE(part.shape() == want_shape);
            std::vector<double> want;
            for (std::int64_t o = 0; o < outer; ++o)
              for (std::int64_t p : mine)
                for (std::int64_t i = 0; i < inner; ++i)
                  want.push_back(xs[static_cast<std::size_t>((o * T + p) * inner + i)]);
            REQUIRE(values(part.data()) == want);
            parts.push_back(part);

            // Backward: the weights land in this rank's rows, zeros elsewhere.
            Variable leaf(x.clone(), true);
            const Tensor w = test_util::uniform(want_shape, 10 + r, 0.5, 2, DType::f64);
            F::sum(F::mul(layout.shard(leaf, r, axis), Variable(w))).backward();
            std::vector<double> grad_want(xs.size(), 0.0);
            const std::vector<double> ws = values(w);
            std::size_t at = 0;
            for (std::int64_t o = 0; o < outer; ++o)
              for (std::int64_t p : mine)
                for (std::int64_t i = 0; i < inner; ++i)
                  grad_want[static_cast<std::size_t>((o * T + p) * inner + i)] = ws[at++];
            REQUIRE(leaf.grad().defined());
            REQUIRE(values(leaf.grad()) == grad_want);
          }
          const Variable whole = layout.unshard(parts, axis);
          REQUIRE(whole.shape() == shape);
          REQUIRE(values(whole.data()) == xs);

          // unshard is differentiable: each part gets its rows of the whole's gradient.
          Variables leaves;
          for (const Variable& p : parts) leaves.push_back(Variable(p.data().clone(), true));
          const Tensor w = test_util::uniform(shape, 7, 0.5, 2, DType::f64);
          F::sum(F::mul(layout.unshard(leaves, axis), Variable(w))).backward();
          for (int r = 0; r < R; ++r) {
            INFO("unshard's gradient for rank " << r);
            const std::vector<double> want = values(layout.shard(Variable(w), r, axis).data());
            if (want.empty()) continue;  // nothing reaches a part without rows
            REQUIRE(leaves[r].grad().defined());
            REQUIRE(values(leaves[r].grad()) == want);
          }
        }
      }
}

TEST_CASE("grouped: consecutive ranks' runs in rank order") {
  const SequenceLayout b = SequenceLayout::balanced(8, 4);
  require_runs(b.grouped(2), {{{0, 1}, {7, 1}, {1, 1}, {6, 1}}, {{2, 1}, {5, 1}, {3, 1}, {4, 1}}});
  require_runs(b.grouped(4), {{{0, 1}, {7, 1}, {1, 1}, {6, 1}, {2, 1}, {5, 1}, {3, 1}, {4, 1}}});
  require_runs(b.grouped(1), {{{0, 1}, {7, 1}}, {{1, 1}, {6, 1}}, {{2, 1}, {5, 1}}, {{3, 1}, {4, 1}}});
  // Ranks without positions group with the others.
  require_runs(SequenceLayout::balanced(1, 4).grouped(2), {{{0, 1}}, {}});
  require_runs(SequenceLayout::contiguous(7, 4).grouped(2), {{{0, 1}, {1, 2}}, {{3, 2}, {5, 2}}});
  REQUIRE(b.grouped(2).length() == 8);
  REQUIRE_THROWS_WITH(b.grouped(3), Contains("do not divide"));
  REQUIRE_THROWS_WITH(b.grouped(0), Contains("do not divide"));
}

TEST_CASE("explicit runs: any order of ranks; overlaps, gaps, overruns and bad runs are errors") {
  // Valid: interleaved runs, empty runs dropped.
  const SequenceLayout ok(6, {{{4, 2}, {0, 1}}, {{1, 3}, {5, 0}}});
  require_runs(ok, {{{4, 2}, {0, 1}}, {{1, 3}}});
  REQUIRE(values(ok.shard(Variable(test_util::iota({6}, DType::f64)), 0, 0).data()) == std::vector<double>{4, 5, 0});

  REQUIRE_THROWS_WITH(SequenceLayout(4, {{{0, 2}}, {{1, 3}}}), Contains("held twice"));  // overlap
  REQUIRE_THROWS_WITH(SequenceLayout(4, {{{0, 2}}, {{0, 2}}}), Contains("held twice"));  // the same run twice
  REQUIRE_THROWS_WITH(SequenceLayout(4, {{{0, 1}}, {{2, 2}}}), Contains("position 1 is missing"));  // gap
  REQUIRE_THROWS_WITH(SequenceLayout(4, {{{1, 3}}}), Contains("position 0 is missing"));
  REQUIRE_THROWS_WITH(SequenceLayout(4, {{{0, 2}}, {}}), Contains("the sequence has 4"));  // short
  REQUIRE_THROWS_WITH(SequenceLayout(2, {{{0, 3}}}), Contains("the sequence has 2"));      // overrun
  REQUIRE_THROWS_WITH(SequenceLayout(2, {{{-1, 3}}}), Contains("not a range"));
  REQUIRE_THROWS_WITH(SequenceLayout(2, {{{0, -1}}, {{0, 2}}}), Contains("not a range"));
  REQUIRE_THROWS_WITH(SequenceLayout(0, {}), Contains("at least one rank"));
  REQUIRE_THROWS_WITH(SequenceLayout::contiguous(4, 0), Contains("ranks > 0"));
  REQUIRE_THROWS_WITH(SequenceLayout::balanced(-1, 2), Contains("length >= 0"));

  const SequenceLayout c = SequenceLayout::contiguous(7, 3);
  REQUIRE_THROWS_WITH(c.runs(3), Contains("rank 3"));
  REQUIRE_THROWS_WITH(c.shard(Variable(test_util::iota({2, 6}, DType::f64)), 0, 1), Contains("7 positions"));
  REQUIRE_THROWS_WITH(c.unshard({Variable(test_util::iota({2, 2}, DType::f64))}, 1), Contains("one part per rank"));
  const Variables wrong{Variable(test_util::iota({2, 2}, DType::f64)), Variable(test_util::iota({2, 3}, DType::f64)),
                        Variable(test_util::iota({2, 3}, DType::f64))};
  REQUIRE_THROWS_WITH(c.unshard(wrong, 1), Contains("rank 1"));
}

TEST_CASE("causal balance: balanced layouts give every rank the same visible (query, key) pairs") {
  AttentionMask causal;
  causal.causal = true;
  const int R = 4;
  const std::int64_t T = 64;
  const std::vector<double> b = visible_pairs(SequenceLayout::balanced(T, R), causal);
  const std::vector<double> c = visible_pairs(SequenceLayout::contiguous(T, R), causal);
  double total = 0;
  for (double n : b) total += n;
  REQUIRE(total == T * (T + 1) / 2);
  const double b_ratio = *std::max_element(b.begin(), b.end()) / *std::min_element(b.begin(), b.end());
  const double c_ratio = *std::max_element(c.begin(), c.end()) / *std::min_element(c.begin(), c.end());
  INFO("balanced pairs per rank " << b[0] << " " << b[1] << " " << b[2] << " " << b[3] << ": max/min " << b_ratio);
  INFO("contiguous pairs per rank " << c[0] << " " << c[1] << " " << c[2] << " " << c[3] << ": max/min " << c_ratio);
  CHECK(b_ratio <= 1.05);
  CHECK(c_ratio >= 5);  // 904 / 136
  // Reported on success too.
  WARN("causal work max/min at R = 4, T = 64: balanced " << b_ratio << ", contiguous " << c_ratio);

  // Uneven lengths stay within a chunk's rounding.
  for (const std::int64_t t : {61, 67, 100}) {
    const std::vector<double> u = visible_pairs(SequenceLayout::balanced(t, R), causal);
    const double ratio = *std::max_element(u.begin(), u.end()) / *std::min_element(u.begin(), u.end());
    INFO("T = " << t << ": balanced max/min " << ratio);
    CHECK(ratio <= 1.15);
  }
}
