// ContextParallel::attention (comm/context_parallel/context_parallel.h) at 1 to 4 ranks against
// F::attention on the whole sequence in one process, in f64 (1e-10 relative + absolute).
// Every rank builds the same whole-sequence q [B, Hq, T, d], k, v [B, Hkv, T, d] and loss
// weights W [B, Hq, T, d] from fixed seeds and computes the one-process reference (output, and
// the gradients of sum(out * W)) locally. The context-parallel side starts from whole-sequence
// leaves too, shards them (cp.shard along the positions), runs cp.attention and backward of
// sum(local out * shard(W)); each whole leaf's gradient then holds this rank's contribution, and
// their sum over the ranks (allreduce) must be the reference's gradient. The output rows must be
// the reference output's rows at this rank's positions.
// Sweep: ring (ulysses_ranks 1), all-to-all (ulysses_ranks R) and hybrid (ulysses_ranks 2 at 4
// ranks) x masks (none, causal, causal + window 3, bidirectional window 2, packed documents,
// packed + causal) x layouts (contiguous, balanced) x T in {4R + 3, R, 1} (uneven splits, ranks
// without positions) x heads (Hq 4 over Hkv 4, 2, 1; for the all-to-all modes also shares that
// leave a rank without heads or cut a grouped-query group), and values of width dv = 3 != d.
// Also dropout in train mode (the same generator seed as one process: the same weights dropped;
// head_offset 0 and 5), none in eval mode, and the errors, thrown on every rank before any
// communication. The last case (fewer query heads than all-to-all ranks) fails at present: the
// rank without heads skips the backward of the input all-to-alls and the others time out.
// Within a case every rank makes all its collective calls (the attention, its backward and the
// gradient sums) before checking anything, so that a failed check on one rank cannot leave the
// others waiting.
#include <catch2/catch.hpp>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "comm/context_parallel/context_parallel.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;
using test_util::values;

namespace {

constexpr std::int64_t kBatch = 2, kDim = 4;
constexpr double kTol = 1e-10;

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

struct Mode {
  std::string name;
  int ulysses;
};

// Ring, all-to-all (where it differs from the ring: R > 1) and hybrid (R = 4: groups of 2).
std::vector<Mode> modes(int R) {
  std::vector<Mode> out{{"ring", 1}};
  if (R > 1) out.push_back({"all-to-all", R});
  if (R == 4) out.push_back({"hybrid", 2});
  return out;
}

struct MaskCase {
  std::string name;
  bool causal = false;
  std::int64_t window = 0;
  bool packed = false;
};

const std::vector<MaskCase>& mask_cases() {
  static const std::vector<MaskCase> cases{
      {"none", false, 0, false},
      {"causal", true, 0, false},
      {"causal + window 3", true, 3, false},
      {"bidirectional window 2", false, 2, false},
      {"packed documents", false, 0, true},
      {"packed + causal", true, 0, true},
  };
  return cases;
}

// Three uneven documents per batch row, cut differently in each row, with ids that are neither
// consecutive nor ordered: [B, T] i64.
Tensor document_ids(std::int64_t T) {
  const std::int64_t cuts[kBatch][2] = {{T / 4, 2 * T / 3}, {T / 2, T - 1}};
  const std::int64_t ids[kBatch][3] = {{3, 1, 4}, {0, 7, 2}};
  std::vector<std::int64_t> out;
  for (std::int64_t b = 0; b < kBatch; ++b)
    for (std::int64_t p = 0; p < T; ++p) out.push_back(ids[b][p < cuts[b][0] ? 0 : p < cuts[b][1] ? 1 : 2]);
  return from_vector(out, {kBatch, T});
}

AttentionMask make_mask(const MaskCase& m, std::int64_t T) {
  AttentionMask mask;
  mask.causal = m.causal;
  mask.window = m.window;
  if (m.packed) mask.query_segments = mask.key_segments = document_ids(T);
  return mask;
}

SequenceLayout make_layout(bool balanced, std::int64_t T, int R) {
  return balanced ? SequenceLayout::balanced(T, R) : SequenceLayout::contiguous(T, R);
}

struct Case {
  std::int64_t T = 1, Hq = 4, Hkv = 4, dv = kDim;
  AttentionMask mask;
  double dropout = 0;
  std::int64_t head_offset = 0;
  std::uint64_t seed = 1;
};

struct Comparison {
  std::string what;
  std::vector<double> got, want;
};

std::string describe(const Comparison& c) {
  std::ostringstream out;
  out << c.what << ": " << c.got.size() << " values against " << c.want.size();
  return out.str();
}

// Runs one case through cp and the reference. All collectives first, then the checks.
void check_case(const ContextParallel& cp, const Case& c) {
  Communicator& comm = cp.communicator();
  const std::int64_t T = c.T;
  const Tensor q = test_util::uniform({kBatch, c.Hq, T, kDim}, c.seed, -1, 1, DType::f64);
  const Tensor k = test_util::uniform({kBatch, c.Hkv, T, kDim}, c.seed + 1, -1, 1, DType::f64);
  const Tensor v = test_util::uniform({kBatch, c.Hkv, T, c.dv}, c.seed + 2, -1, 1, DType::f64);
  const Tensor w = test_util::uniform({kBatch, c.Hq, T, c.dv}, c.seed + 3, 0.5, 2, DType::f64);

  // One process, whole sequence.
  Generator g_ref(c.seed + 100), g_cp(c.seed + 100);
  F::AttentionOptions options;
  options.mask = c.mask;
  options.dropout = c.dropout;
  options.head_offset = c.head_offset;
  options.generator = &g_ref;
  Variable qr(q.clone(), true), kr(k.clone(), true), vr(v.clone(), true);
  const Variable ref = F::attention(qr, kr, vr, options);
  F::sum(F::mul(ref, Variable(w))).backward();

  // Context parallel: this rank's rows of whole-sequence leaves.
  options.generator = &g_cp;
  Variable qa(q.clone(), true), ka(k.clone(), true), va(v.clone(), true);
  const Variable out = cp.attention(cp.shard(qa, 2), cp.shard(ka, 2), cp.shard(va, 2), options);
  F::sum(F::mul(out, cp.shard(Variable(w), 2))).backward();
  auto summed = [&](const Variable& leaf) {
    const Tensor g = leaf.grad().defined() ? leaf.grad() : zeros(leaf.shape(), DType::f64);
    return comm.allreduce(g, AllreduceOp::sum);
  };
  const Tensor gq = summed(qa), gk = summed(ka), gv = summed(va);

  const std::int64_t rows = cp.layout().local_length(comm.rank());
  REQUIRE(out.shape() == Shape{kBatch, c.Hq, rows, c.dv});
  const std::vector<Comparison> comparisons{
      {"output at this rank's positions", values(out.data()), values(cp.shard(Variable(ref.data()), 2).data())},
      {"q's gradient (summed over ranks)", values(gq), values(qr.grad())},
      {"k's gradient (summed over ranks)", values(gk), values(kr.grad())},
      {"v's gradient (summed over ranks)", values(gv), values(vr.grad())},
  };
  for (const Comparison& cmp : comparisons) {
    INFO(describe(cmp));
    REQUIRE(cmp.got.size() == cmp.want.size());
    const std::int64_t i = test_util::first_mismatch(cmp.got, cmp.want, kTol, kTol);
    INFO(test_util::mismatch_message(cmp.got, cmp.want, i));
    REQUIRE(i == -1);
  }
}

struct Heads {
  std::int64_t q, kv;
};

// The sweep of one mode: layouts x T x masks x heads (x value widths).
void sweep(const Mode& mode, const std::vector<Heads>& heads, std::int64_t dv = kDim) {
  auto comm = world();
  const int R = comm->size();
  std::vector<std::int64_t> lengths{4 * R + 3, R};
  if (R > 1) lengths.push_back(1);
  std::uint64_t seed = 1000;
  for (const bool balanced : {false, true})
    for (const std::int64_t T : lengths) {
      const ContextParallel cp(comm, make_layout(balanced, T, R), mode.ulysses);
      for (const MaskCase& m : mask_cases())
        for (const Heads& h : heads) {
          INFO(mode.name << " (ulysses_ranks " << mode.ulysses << "), " << (balanced ? "balanced" : "contiguous")
                         << ", T = " << T << ", mask " << m.name << ", Hq " << h.q << ", Hkv " << h.kv << ", rank "
                         << comm->rank() << " of " << R);
          Case c;
          c.T = T;
          c.Hq = h.q;
          c.Hkv = h.kv;
          c.mask = make_mask(m, T);
          c.dv = dv;
          c.seed = seed += 10;
          check_case(cp, c);
        }
    }
}

}  // namespace

// Errors first: each is thrown identically on every rank before any communication.
TEST_CASE("ContextParallel: errors name the problem") {
  auto comm = world();
  const int R = comm->size();
  const std::int64_t T = 2 * R + 1;
  REQUIRE_THROWS_WITH(ContextParallel(comm, SequenceLayout::contiguous(T, R + 1), 1),
                      Contains("the communicator has " + std::to_string(R)));
  REQUIRE_THROWS_WITH(ContextParallel(comm, SequenceLayout::balanced(T, R), R + 1), Contains("must divide"));
  REQUIRE_THROWS_WITH(ContextParallel(comm, SequenceLayout::balanced(T, R), 0), Contains("must divide"));
  if (R == 4) REQUIRE_THROWS_WITH(ContextParallel(comm, SequenceLayout::balanced(T, R), 3), Contains("must divide"));

  for (const Mode& mode : modes(R)) {
    INFO(mode.name);
    const ContextParallel cp(comm, SequenceLayout::balanced(T, R), mode.ulysses);
    const std::int64_t rows = cp.layout().local_length(comm->rank());
    const Variable q(zeros({kBatch, 4, rows, kDim}, DType::f64)), k(zeros({kBatch, 2, rows, kDim}, DType::f64));
    F::AttentionOptions options;
    // Segment ids of this rank's rows instead of the whole sequence's (at 1 rank they are the
    // whole sequence), and of one position too many.
    if (rows != T) {
      options.mask.query_segments = options.mask.key_segments = zeros({kBatch, rows}, DType::i64);
      REQUIRE_THROWS_WITH(cp.attention(q, k, k, options), Contains("whole sequence") && Contains("[B, T]"));
    }
    options.mask.query_segments = options.mask.key_segments = zeros({kBatch, T + 1}, DType::i64);
    REQUIRE_THROWS_WITH(cp.attention(q, k, k, options),
                        Contains("whole sequence") && Contains("[B, T] = [2, " + std::to_string(T) + "]"));
    options.mask.query_segments = options.mask.key_segments = zeros({kBatch, T, 1}, DType::i64);
    REQUIRE_THROWS_WITH(cp.attention(q, k, k, options), Contains("whole sequence"));
    options.mask.query_segments = options.mask.key_segments = zeros({kBatch, T}, DType::f64);
    REQUIRE_THROWS_WITH(cp.attention(q, k, k, options), Contains("i32 or i64"));
    options.mask.key_segments = Tensor();  // only the queries'
    options.mask.query_segments = zeros({kBatch, T}, DType::i64);
    REQUIRE_THROWS_WITH(cp.attention(q, k, k, options), Contains("whole sequence"));
    // Positions come from the layout.
    F::AttentionOptions shifted;
    shifted.mask.query_start = 0;
    REQUIRE_THROWS_WITH(cp.attention(q, k, k, shifted), Contains("query_start"));
    shifted.mask.query_start = -1;
    shifted.mask.key_start = 1;
    REQUIRE_THROWS_WITH(cp.attention(q, k, k, shifted), Contains("key_start"));
    // Heads: Hq a multiple of Hkv.
    const Variable k3(zeros({kBatch, 3, rows, kDim}, DType::f64));
    REQUIRE_THROWS_WITH(cp.attention(q, k3, k3, {}), Contains("multiple"));
    REQUIRE_THROWS_WITH(cp.attention(Variable(zeros({kBatch, rows, kDim}, DType::f64)), k, k, {}), Contains("4 axes"));
    // What a fused call would refuse after the first message: refused before any.
    REQUIRE_THROWS_WITH(cp.attention(q, Variable(zeros({kBatch, 2, rows, kDim}, DType::f32)), k, {}),
                        Contains("one dtype"));
    REQUIRE_THROWS_WITH(cp.attention(q, Variable(zeros({kBatch, 2, rows, kDim + 1}, DType::f64)), k, {}),
                        Contains("disagree"));
    F::AttentionOptions bad_window;
    bad_window.mask.window = -1;
    REQUIRE_THROWS_WITH(cp.attention(q, k, k, bad_window), Contains("window"));
    F::AttentionOptions bad_dropout;
    bad_dropout.dropout = 1;
    REQUIRE_THROWS_WITH(cp.attention(q, k, k, bad_dropout), Contains("dropout"));
  }
  // The ring checks that q, k, v hold this rank's positions (every rank passes one row too many:
  // every rank throws, before sending).
  {
    const ContextParallel cp(comm, SequenceLayout::contiguous(T, R), 1);
    const std::int64_t rows = cp.layout().local_length(comm->rank());
    const Variable q(zeros({kBatch, 2, rows + 1, kDim}, DType::f64));
    REQUIRE_THROWS_WITH(cp.attention(q, q, q, {}), Contains("holds " + std::to_string(rows) + " positions"));
  }
  // shard of a tensor whose axis is not the whole sequence.
  {
    const ContextParallel cp(comm, SequenceLayout::contiguous(T, R), 1);
    REQUIRE_THROWS_WITH(cp.shard(Variable(zeros({kBatch, 2, T + 1, kDim}, DType::f64)), 2),
                        Contains(std::to_string(T) + " positions"));
  }
  // After the errors the ranks still agree: a collective completes.
  REQUIRE(values(comm->allreduce(full({1}, 1.0, DType::f64), AllreduceOp::sum)) == std::vector<double>{double(R)});
}

TEST_CASE("ContextParallel: shard and unshard along the positions") {
  auto comm = world();
  const int R = comm->size();
  for (const bool balanced : {false, true})
    for (const std::int64_t T : {std::int64_t{4 * R + 3}, std::int64_t{1}}) {
      INFO((balanced ? "balanced" : "contiguous") << ", T = " << T);
      const ContextParallel cp(comm, make_layout(balanced, T, R), 1);
      const Tensor x = test_util::uniform({kBatch, 3, T, kDim}, 5, -1, 1, DType::f64);
      Variable leaf(x.clone(), true);
      const Variable local = cp.shard(leaf, 2);
      REQUIRE(local.shape() == Shape{kBatch, 3, cp.layout().local_length(comm->rank()), kDim});
      const Variable whole = cp.unshard(F::mul(local, 2.0), 2);
      REQUIRE(whole.shape() == x.shape());
      const std::vector<double> got = values(whole.data()), want = values(mul(x, 2.0));
      REQUIRE(test_util::first_mismatch(got, want, 0, 0) == -1);
      // unshard's backward sums every rank's gradient of the whole into this rank's rows.
      F::sum(F::mul(whole, Variable(full(x.shape(), 1.0, DType::f64)))).backward();
      REQUIRE(leaf.grad().defined());
      const Tensor summed = comm->allreduce(leaf.grad(), AllreduceOp::sum);
      const std::vector<double> g = values(summed);
      for (double e : g) REQUIRE(e == Approx(2.0 * R));
    }
}

TEST_CASE("ContextParallel: ring attention equals one process") { sweep({"ring", 1}, {{4, 4}, {4, 2}, {4, 1}}); }

TEST_CASE("ContextParallel: all-to-all (Ulysses) and hybrid attention equal one process") {
  const int R = world()->size();
  for (const Mode& mode : modes(R)) {
    if (mode.ulysses == 1) continue;
    sweep(mode, {{4, 4}, {4, 2}, {4, 1}});
  }
}

TEST_CASE("ContextParallel: all-to-all with uneven head shares that cut grouped-query groups") {
  const int R = world()->size();
  for (const Mode& mode : modes(R)) {
    if (mode.ulysses == 1) continue;
    // Shares [Hq j / U, Hq (j + 1) / U): Hq 4 / Hkv 2 over 3 ranks: 1, 1, 2 (the first two cut a
    // group of 2); over 4 ranks: 1 each; Hq 6 / Hkv 2 over 4: 1, 2, 1, 2 cut groups of 3; Hq 3
    // over 2: 1, 2. Every rank gets a head here (Hq >= U); fewer heads than ranks: the last case.
    std::vector<Heads> heads;
    for (const Heads& h : {Heads{3, 3}, Heads{3, 1}, Heads{4, 2}, Heads{6, 2}})
      if (h.q >= mode.ulysses) heads.push_back(h);
    sweep(mode, heads);
  }
}

TEST_CASE("ContextParallel: values of another width than the keys (dv = 3)") {
  const int R = world()->size();
  for (const Mode& mode : modes(R)) sweep(mode, {{4, 2}}, 3);
}

TEST_CASE("ContextParallel: dropout in train mode drops what one process drops") {
  auto comm = world();
  const int R = comm->size();
  TrainModeGuard train(true);
  std::uint64_t seed = 5000;
  for (const Mode& mode : modes(R))
    for (const bool balanced : {false, true})
      for (const std::int64_t T : {std::int64_t{4 * R + 3}, std::int64_t{R}}) {
        const ContextParallel cp(comm, make_layout(balanced, T, R), mode.ulysses);
        for (const MaskCase& m : {mask_cases()[0], mask_cases()[1], mask_cases()[5]})
          for (const Heads& h : {Heads{4, 2}, Heads{6, 2}})
            for (const std::int64_t head_offset : {0, 5}) {
              INFO(mode.name << ", " << (balanced ? "balanced" : "contiguous") << ", T = " << T << ", mask " << m.name
                             << ", Hq " << h.q << ", Hkv " << h.kv << ", head_offset " << head_offset
                             << ", dropout 0.2, rank " << comm->rank() << " of " << R);
              Case c;
              c.T = T;
              c.Hq = h.q;
              c.Hkv = h.kv;
              c.mask = make_mask(m, T);
              c.dropout = 0.2;
              c.head_offset = head_offset;
              c.seed = seed += 10;
              check_case(cp, c);
            }
      }
}

TEST_CASE("ContextParallel: dropout off outside train mode") {
  auto comm = world();
  const int R = comm->size();
  TrainModeGuard eval(false);
  for (const Mode& mode : modes(R)) {
    INFO(mode.name);
    const std::int64_t T = 4 * R + 3;
    const ContextParallel cp(comm, SequenceLayout::balanced(T, R), mode.ulysses);
    const Tensor q = test_util::uniform({kBatch, 4, T, kDim}, 71, -1, 1, DType::f64);
    const Variable local = cp.shard(Variable(q), 2);
    F::AttentionOptions with, without;
    with.dropout = 0.5;
    with.mask.causal = without.mask.causal = true;
    const std::vector<double> a = values(cp.attention(local, local, local, with).data());
    const std::vector<double> b = values(cp.attention(local, local, local, without).data());
    REQUIRE(test_util::first_mismatch(a, b, 0, 0) == -1);
  }
}

// Last (a failure here leaves the ranks at different collectives, failing every case after it):
// all-to-all with fewer query heads than ranks (Hq = U - 1), so that rank 0's share
// [0, Hq / U) is empty. Forward alone, then forward and backward. A rank that waits for another
// gives up after 5 s here (the timeout of the communicators split from the world).
TEST_CASE("ContextParallel: all-to-all with fewer query heads than ranks: a rank without heads") {
  auto comm = world();
  const int R = comm->size();
  if (R == 1) return;
  if (comm->timeout() == 0 || comm->timeout() > 5) comm->set_timeout(5);
  for (const Mode& mode : modes(R)) {
    if (mode.ulysses == 1) continue;
    const std::int64_t Hq = mode.ulysses - 1, T = 2 * R;
    INFO(mode.name << " (ulysses_ranks " << mode.ulysses << "), contiguous, T = " << T << ", no mask, Hq = Hkv = " << Hq
                   << ", rank " << comm->rank() << " of " << R);
    const ContextParallel cp(comm, SequenceLayout::contiguous(T, R), mode.ulysses);
    {
      INFO("forward only");
      const Tensor q = test_util::uniform({kBatch, Hq, T, kDim}, 81, -1, 1, DType::f64);
      const Tensor k = test_util::uniform({kBatch, Hq, T, kDim}, 82, -1, 1, DType::f64);
      const Tensor v = test_util::uniform({kBatch, Hq, T, kDim}, 83, -1, 1, DType::f64);
      const Variable ref = F::attention(Variable(q), Variable(k), Variable(v));
      const Variable out = cp.attention(cp.shard(Variable(q), 2), cp.shard(Variable(k), 2), cp.shard(Variable(v), 2));
      const std::vector<double> got = values(out.data()), want = values(cp.shard(ref, 2).data());
      REQUIRE(got.size() == want.size());
      const std::int64_t i = test_util::first_mismatch(got, want, kTol, kTol);
      INFO(test_util::mismatch_message(got, want, i));
      REQUIRE(i == -1);
    }
    for (const Heads& h : {Heads{Hq, Hq}, Heads{Hq, 1}}) {
      INFO("forward and backward, Hkv " << h.kv);
      Case c;
      c.T = T;
      c.Hq = h.q;
      c.Hkv = h.kv;
      c.seed = 90;
      check_case(cp, c);
    }
  }
}
