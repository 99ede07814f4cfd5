#include "comm/context_parallel/sequence_layout.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "autograd/functions/array.h"
#include "core/error.h"

namespace tandem {

namespace {

const char* kLayout = "SequenceLayout";

// [length * i / pieces, length * (i + 1) / pieces) for i in [0, pieces).
std::vector<PositionRun> even_pieces(std::int64_t length, std::int64_t pieces) {
  std::vector<PositionRun> out;
  for (std::int64_t i = 0; i < pieces; ++i) {
    const std::int64_t begin = length * i / pieces, end = length * (i + 1) / pieces;
    out.push_back({begin, end - begin});
  }
  return out;
}

}  // namespace

SequenceLayout SequenceLayout::contiguous(std::int64_t length, int ranks) {
  TANDEM_CHECK(ranks > 0 && length >= 0, kLayout, "::contiguous: needs ranks > 0 and length >= 0, got ", ranks,
               " ranks and length ", length);
  std::vector<std::vector<PositionRun>> runs;
  for (const PositionRun& piece : even_pieces(length, ranks)) runs.push_back({piece});
  return SequenceLayout(length, std::move(runs));
}

SequenceLayout SequenceLayout::balanced(std::int64_t length, int ranks) {
  TANDEM_CHECK(ranks > 0 && length >= 0, kLayout, "::balanced: needs ranks > 0 and length >= 0, got ", ranks,
               " ranks and length ", length);
  const std::vector<PositionRun> chunks = even_pieces(length, 2 * ranks);
  std::vector<std::vector<PositionRun>> runs(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) runs[r] = {chunks[r], chunks[2 * ranks - 1 - r]};
  return SequenceLayout(length, std::move(runs));
}

SequenceLayout::SequenceLayout(std::int64_t length, std::vector<std::vector<PositionRun>> runs)
    : length_(length), runs_(std::move(runs)) {
  TANDEM_CHECK(!runs_.empty(), kLayout, ": needs at least one rank");
  std::vector<std::pair<std::int64_t, std::int64_t>> all;
  for (auto& rank_runs : runs_) {
    // Empty runs carry nothing: drop them, so that every run holds a position.
    rank_runs.erase(
        std::remove_if(rank_runs.begin(), rank_runs.end(), [](const PositionRun& r) { return r.length == 0; }),
        rank_runs.end());
    for (const PositionRun& run : rank_runs) {
      TANDEM_CHECK(run.start >= 0 && run.length > 0, kLayout, ": a run [", run.start, ", +", run.length,
                   ") is not a range of positions");
      all.push_back({run.start, run.length});
    }
  }
  std::sort(all.begin(), all.end());
  std::int64_t next = 0;
  for (const auto& [start, n] : all) {
    TANDEM_CHECK(start == next, kLayout, ": the runs must cover [0, ", length_, ") once; position ",
                 start > next ? next : start, start > next ? " is missing" : " is held twice");
    next = start + n;
  }
  TANDEM_CHECK(next == length_, kLayout, ": the runs cover [0, ", next, ") but the sequence has ", length_,
               " positions");
}

const std::vector<PositionRun>& SequenceLayout::runs(int rank) const {
  TANDEM_CHECK(rank >= 0 && rank < ranks(), kLayout, ": rank ", rank, " is not in [0, ", ranks(), ")");
  return runs_[static_cast<std::size_t>(rank)];
}

std::int64_t SequenceLayout::local_length(int rank) const {
  std::int64_t n = 0;
  for (const PositionRun& run : runs(rank)) n += run.length;
  return n;
}

SequenceLayout SequenceLayout::grouped(int group) const {
  TANDEM_CHECK(group > 0 && ranks() % group == 0, kLayout, "::grouped: groups of ", group, " ranks do not divide ",
               ranks(), " ranks");
  std::vector<std::vector<PositionRun>> runs(static_cast<std::size_t>(ranks() / group));
  for (int r = 0; r < ranks(); ++r)
    for (const PositionRun& run : runs_[r]) runs[static_cast<std::size_t>(r / group)].push_back(run);
  return SequenceLayout(length_, std::move(runs));
}

Variable SequenceLayout::shard(const Variable& x, int rank, std::int64_t axis) const {
  TANDEM_CHECK(x.defined() && axis >= 0 && axis < static_cast<std::int64_t>(x.dim()) && x.shape()[axis] == length_,
               kLayout, "::shard: axis ", axis, " of ", x.defined() ? x.description() : std::string("undefined"),
               " must hold the sequence's ", length_, " positions");
  // Cut before every run boundary, then keep this rank's pieces.
  std::vector<std::int64_t> cuts;
  for (const auto& rank_runs : runs_)
    for (const PositionRun& run : rank_runs)
      if (run.start > 0) cuts.push_back(run.start);
  std::sort(cuts.begin(), cuts.end());
  const Variables pieces = functions::split_axis(x, cuts, axis);
  Variables mine;
  for (const PositionRun& run : runs(rank)) {
    const std::size_t index =
        static_cast<std::size_t>(std::upper_bound(cuts.begin(), cuts.end(), run.start) - cuts.begin());
    mine.push_back(pieces[index]);
  }
  if (mine.empty()) return functions::split_axis(x, std::vector<std::int64_t>{0}, axis)[0];  // no rows
  return mine.size() == 1 ? mine[0] : functions::concat(mine, axis);
}

Variable SequenceLayout::unshard(const Variables& parts, std::int64_t axis) const {
  TANDEM_CHECK(static_cast<int>(parts.size()) == ranks(), kLayout, "::unshard: needs one part per rank (", ranks(),
               "), got ", parts.size());
  std::vector<std::pair<std::int64_t, Variable>> pieces;
  for (int r = 0; r < ranks(); ++r) {
    const Variable& part = parts[r];
    TANDEM_CHECK(part.defined() && axis >= 0 && axis < static_cast<std::int64_t>(part.dim()) &&
                     part.shape()[axis] == local_length(r),
                 kLayout, "::unshard: rank ", r, "'s part ",
                 part.defined() ? part.description() : std::string("undefined"), " must hold its ", local_length(r),
                 " positions along axis ", axis);
    std::vector<std::int64_t> cuts;
    std::int64_t at = 0;
    for (std::size_t i = 0; i + 1 < runs(r).size(); ++i) cuts.push_back(at += runs(r)[i].length);
    const Variables split = runs(r).size() > 1 ? functions::split_axis(part, cuts, axis) : Variables{part};
    for (std::size_t i = 0; i < runs(r).size(); ++i) pieces.push_back({runs(r)[i].start, split[i]});
  }
  std::sort(pieces.begin(), pieces.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  if (pieces.empty()) return parts[0];  // an empty sequence
  Variables ordered;
  for (auto& piece : pieces) ordered.push_back(piece.second);
  return ordered.size() == 1 ? ordered[0] : functions::concat(ordered, axis);
}

}  // namespace tandem
