// Zero-bubble schedules (comm/pipeline/zero_bubble.h): valid and deadlock-free for every size,
// each stage's forwards, input-gradient backwards (B) and weight actions (W) in microbatch order,
// the simulated bubble rates against the formulas with equal F, B and W times, and the memory
// against 1F1B's.
#include <catch2/catch.hpp>

#include "comm/pipeline/simulator.h"
#include "comm/pipeline/zero_bubble.h"
#include "core/error.h"

using namespace tandem;
using namespace tandem::pipeline;
using Catch::Matchers::Contains;

namespace {

// F = B = W = 1 (a backward of 2 whose weight gradients take 1); `stored` kept from forward to B,
// `queued` from B to W.
SimulationOptions equal_times(std::int64_t stored = 0, std::int64_t queued = -1) {
  SimulationOptions options;
  options.stage_costs = {StageCost{1, 2, 0, stored, 1, queued}};
  return options;
}

std::vector<Schedule> zero_bubble_schedules(int p, int m) { return {zb_h1(p, m), zb_h2(p, m), zbv(p, m)}; }

}  // namespace

TEST_CASE("zb-h1, zb-h2 and zbv validate, are deadlock-free and keep microbatch order for P <= 8, M <= 24") {
  for (int p = 1; p <= 8; ++p) {
    for (int m : {1, 2, 3, p, 2 * p - 1, 2 * p, 2 * p + 1, 24}) {
      if (m < 1) continue;
      for (const Schedule& s : zero_bubble_schedules(p, m)) {
        INFO(s.describe());
        REQUIRE_NOTHROW(check_deadlock_free(s));
        // Every stage: F, B and W each once per microbatch, each kind in increasing microbatch order.
        for (int r = 0; r < p; ++r) {
          for (int stage : s.stages_of_rank(r)) {
            int next[3] = {0, 0, 0};
            for (const Action& a : s.actions[r]) {
              if (a.stage != stage) continue;
              REQUIRE(a.microbatch == next[static_cast<int>(a.kind)]++);
            }
            REQUIRE((next[0] == m && next[1] == m && next[2] == m));
          }
        }
      }
    }
  }
}

TEST_CASE("zbv places its stages in a V: stage s on rank s, then back") {
  const Schedule s = zbv(4, 8);
  REQUIRE(s.stages == 8);
  REQUIRE(s.stage_ranks == std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0});
  REQUIRE(s.stages_of_rank(0) == std::vector<int>{0, 7});
  REQUIRE(s.stages_of_rank(3) == std::vector<int>{3, 4});
  // Stages 3 and 4 share rank 3: no message between them.
  REQUIRE_FALSE(sent_by(s, forward(3, 0)).has_value());
  REQUIRE(sent_by(s, forward(4, 0))->to_rank == 2);
  REQUIRE(sent_by(s, backward(7, 0))->to_rank == 1);
}

TEST_CASE("bubble rates with equal F, B and W: 1F1B (P-1)/M, zb-h1 and zb-h2 (P-1)/(3M), zbv (P-1)/(6M)") {
  for (int p : {2, 3, 4}) {
    for (int m : {p, 2 * p, 2 * p + 1, 8, 16}) {
      INFO("P = " << p << ", M = " << m);
      // 1F1B's backward is B and W together.
      SimulationOptions whole;
      whole.stage_costs = {StageCost{1, 2, 0, 0}};
      const SimulationResult base = simulate(one_f_one_b(p, m), whole);
      REQUIRE(base.bubble_rate == Approx(double(p - 1) / m).margin(1e-12));
      const SimulationResult h1 = simulate(zb_h1(p, m), equal_times());
      REQUIRE(h1.bubble_rate == Approx(double(p - 1) / (3 * m)).margin(1e-12));
      REQUIRE(h1.step_s == 3 * m + p - 1);
      const SimulationResult h2 = simulate(zb_h2(p, m), equal_times());
      REQUIRE(h2.bubble_rate == Approx(double(p - 1) / (3 * m)).margin(1e-12));
      // Within each rank's span: the paper's zero bubble, from M >= 2P on.
      if (m >= 2 * p) REQUIRE(h2.span_bubble_rate == Approx(0).margin(1e-12));
      // Half-size stages: each rank's step holds 6M stage actions of 1.
      const SimulationResult v = simulate(zbv(p, m), equal_times());
      REQUIRE(v.bubble_rate == Approx(double(p - 1) / (6 * m)).margin(1e-12));
      REQUIRE(v.step_s == 6 * m + p - 1);
    }
  }
  // The check at P = 4, M = 8, within one point.
  REQUIRE(simulate(zb_h1(4, 8), equal_times()).bubble_rate == Approx(3.0 / 24).margin(0.01));
  REQUIRE(simulate(zbv(4, 8), equal_times()).bubble_rate == Approx(3.0 / 48).margin(0.01));
}

TEST_CASE("memory: zb-h1 and zbv peak at 1F1B's, zb-h2 at (2P-1)/P of it") {
  for (int p : {2, 3, 4}) {
    for (int m : {p, 2 * p, 16}) {
      INFO("P = " << p << ", M = " << m);
      SimulationOptions whole;
      whole.stage_costs = {StageCost{1, 2, 0, 120}};
      const std::int64_t base = simulate(one_f_one_b(p, m), whole).max_peak_stored_bytes();
      // What a B keeps for its W counted in full (an MLP's: the linear layers' inputs).
      REQUIRE(simulate(zb_h1(p, m), equal_times(120, 120)).max_peak_stored_bytes() <= base);
      REQUIRE(simulate(zb_h2(p, m), equal_times(120, 120)).max_peak_stored_bytes() <= base * (2 * p - 1) / p);
      // Two stages per rank of half the model each.
      REQUIRE(simulate(zbv(p, m), equal_times(60, 60)).max_peak_stored_bytes() <= base);
    }
  }
}

TEST_CASE("zero-bubble schedules by name, and their errors") {
  REQUIRE(schedule_by_name("zb-h1", 3, 1, 6).name == "zb-h1");
  REQUIRE(schedule_by_name("zbv", 3, 2, 6).stages == 6);
  // Each W alone (bit-identical to 1F1B); a -dw schedule's weights in one product.
  REQUIRE_FALSE(zb_h1(3, 6).combine_weights);
  REQUIRE(schedule_by_name("1f1b-dw", 3, 1, 6).combine_weights);
  REQUIRE_THROWS_WITH(schedule_by_name("zbv", 3, 1, 6), Contains("'zbv' holds 2 stages per rank, got 1"));
  REQUIRE_THROWS_WITH(schedule_by_name("zb-h2", 3, 2, 6), Contains("'zb-h2' holds 1 stage per rank, got 2"));
  REQUIRE_THROWS_WITH(zb_h1(0, 4), Contains("zb-h1: ranks must be at least 1, got 0"));
  REQUIRE_THROWS_WITH(zbv(2, 0), Contains("zbv: microbatches must be at least 1, got 0"));
  REQUIRE_THROWS_WITH(schedule_by_name("zb-h3", 2, 1, 4), Contains("'zb-h1', 'zb-h2', 'zbv'"));
}
