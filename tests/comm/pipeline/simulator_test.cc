// The simulator's predictions against hand computations: GPipe's and 1F1B's bubble
// (P-1)/(M+P-1), Megatron's interleaved bubble, stored activations, link latency and bandwidth,
// and activation recomputation.
#include <catch2/catch.hpp>

#include "comm/pipeline/simulator.h"
#include "core/error.h"

using namespace tandem;
using namespace tandem::pipeline;
using Catch::Matchers::Contains;

namespace {

SimulationOptions equal_stages(double f, double b, std::int64_t activation = 0,
                               std::int64_t stored = 0) {
  SimulationOptions options;
  options.stage_costs = {StageCost{f, b, activation, stored}};
  return options;
}

}  // namespace

TEST_CASE("GPipe and 1F1B with equal stages: step (M + P - 1)(f + b), bubble (P-1)/(M+P-1)") {
  for (int p : {1, 2, 3, 4, 8, 13}) {
    for (int m : {1, 2, p, 3 * p + 1, 32}) {
      INFO("P = " << p << ", M = " << m);
      const double f = 1.5, b = 2.25;
      const SimulationOptions options = equal_stages(f, b, 1000, 100);
      const SimulationResult g = simulate(gpipe(p, m), options);
      const SimulationResult o = simulate(one_f_one_b(p, m), options);
      const double bubble = static_cast<double>(p - 1) / (m + p - 1);
      REQUIRE(g.step_s == Approx((m + p - 1) * (f + b)).epsilon(1e-12));
      REQUIRE(o.step_s == Approx((m + p - 1) * (f + b)).epsilon(1e-12));
      REQUIRE(std::abs(g.bubble_fraction - bubble) < 1e-12);
      REQUIRE(std::abs(o.bubble_fraction - bubble) < 1e-12);
      for (int r = 0; r < p; ++r) {
        REQUIRE(g.ranks[r].busy_s == Approx(m * (f + b)));
        // GPipe keeps every microbatch; 1F1B at most P - r on rank r.
        REQUIRE(g.ranks[r].peak_in_flight == m);
        REQUIRE(g.ranks[r].peak_stored_bytes == 100 * m);
        REQUIRE(o.ranks[r].peak_in_flight == std::min(p - r, m));
        REQUIRE(o.ranks[r].peak_stored_bytes == 100 * std::min(p - r, m));
      }
      REQUIRE(g.messages.size() == static_cast<std::size_t>(2 * (p - 1) * m));
    }
  }
}

TEST_CASE("GPipe's times by hand on 3 ranks, 2 microbatches") {
  const SimulationResult r = simulate(gpipe(3, 2), equal_stages(1, 2));
  // Forwards staircase down, backwards (in microbatch order) back up.
  REQUIRE(r.ranks[2].actions[0].start_s == 2);  // F0 on stage 2
  REQUIRE(r.ranks[2].actions[2].start_s == 4);  // B0 on stage 2, after F1 ends
  REQUIRE(r.ranks[1].actions[2].start_s == 6);  // B0 on stage 1
  REQUIRE(r.ranks[0].actions[3].start_s == 10); // B1 on stage 0
  REQUIRE(r.step_s == 12);
  REQUIRE(r.bubble_fraction == Approx(1 - 3 * 6.0 / (3 * 12)).epsilon(1e-15));
}

TEST_CASE("interleaved 1F1B against a hand computation and Megatron's bubble") {
  // Chunks of f = 1, b = 2 on 2 ranks, 2 stages each (worked through by hand: see
  // schedule_test for the order). M = P: every forward first; M = 2P: the steady phase.
  SECTION("M = P = 2") {
    const SimulationResult r = simulate(interleaved_1f1b(2, 2, 2), equal_stages(1, 2));
    REQUIRE(r.step_s == 15);
    REQUIRE(r.bubble_fraction == Approx(0.2).epsilon(1e-15));
  }
  SECTION("M = 4") {
    const SimulationResult r = simulate(interleaved_1f1b(2, 2, 4), equal_stages(1, 2));
    REQUIRE(r.step_s == 27);
    // Rank 1's forward of microbatch 1 on stage 3 waits for rank 1's backward (4..6).
    REQUIRE(r.ranks[1].actions[4].action == forward(3, 1));
    REQUIRE(r.ranks[1].actions[4].start_s == 6);
    REQUIRE(r.ranks[0].actions.back().end_s == 27);
    // Megatron: bubble time (P-1)(f+b) against v M (f+b) of work: (P-1)/(vM + P-1).
    REQUIRE(std::abs(r.bubble_fraction - 1.0 / 9) < 1e-12);
  }
  SECTION("Megatron's formula where chunk costs are equal") {
    for (int p : {2, 4, 8}) {
      for (int v : {2, 4}) {
        for (int m : {2 * p, 4 * p}) {
          INFO("P = " << p << ", v = " << v << ", M = " << m);
          const SimulationResult r = simulate(interleaved_1f1b(p, v, m), equal_stages(1, 1));
          REQUIRE(std::abs(r.bubble_fraction - (p - 1.0) / (v * m + p - 1)) < 1e-12);
        }
      }
    }
  }
}

TEST_CASE("the link delays arrivals by latency + bytes / bandwidth, one message at a time") {
  SimulationOptions options = equal_stages(1, 2, 1000);
  options.link = {0.5, 1000};  // 0.5 s + 1 s for 1000 bytes
  SECTION("one microbatch") {
    const SimulationResult r = simulate(gpipe(2, 1), options);
    REQUIRE(r.messages.size() == 2);
    REQUIRE(r.messages[0].message.kind == MessageKind::activation);
    REQUIRE(r.messages[0].send_s == 1);
    REQUIRE(r.messages[0].arrival_s == 2.5);
    REQUIRE(r.ranks[1].actions[0].start_s == 2.5);
    REQUIRE(r.messages[1].message.kind == MessageKind::gradient);
    REQUIRE(r.messages[1].send_s == 5.5);
    REQUIRE(r.messages[1].arrival_s == 7);
    REQUIRE(r.step_s == 9);
    REQUIRE(r.messages[0].bytes == 1000);
  }
  SECTION("a message waits while the link carries the one before") {
    options.stage_costs[0].activation_bytes = 3000;  // 3 s on the link, longer than a forward
    const SimulationResult r = simulate(gpipe(2, 2), options);
    REQUIRE(r.messages[0].arrival_s == 4.5);   // sent at 1, on the link 1..4
    REQUIRE(r.messages[1].send_s == 2);
    REQUIRE(r.messages[1].arrival_s == 7.5);  // on the link 4..7
  }
  SECTION("stages on one rank pass through memory") {
    const SimulationResult r = simulate(interleaved_1f1b(1, 2, 1), options);
    REQUIRE(r.messages.empty());
    REQUIRE(r.step_s == 6);
    REQUIRE(r.bubble_fraction == 0);
  }
}

TEST_CASE("recomputation keeps only stage inputs and runs the forward again in backward") {
  const int p = 4, m = 8;
  SimulationOptions options = equal_stages(1, 2, /*activation=*/10, /*stored=*/100);
  const SimulationResult plain = simulate(one_f_one_b(p, m), options);
  options.recompute = true;
  const SimulationResult again = simulate(one_f_one_b(p, m), options);
  for (int r = 0; r < p; ++r) {
    INFO("rank " << r);
    REQUIRE(plain.ranks[r].peak_stored_bytes == 100 * (p - r));
    // P - r - 1 other microbatches keep their inputs while one has all of its activations live.
    REQUIRE(again.ranks[r].peak_stored_bytes == 10 * (p - r - 1) + 100);
    REQUIRE(again.ranks[r].busy_s == m * (1 + 1 + 2));
  }
  REQUIRE(again.step_s == (m + p - 1) * (1 + 1 + 2));
  REQUIRE(std::abs(again.bubble_fraction - (p - 1.0) / (m + p - 1)) < 1e-12);
  options.recompute = false;
  const SimulationResult g = simulate(gpipe(p, m), options);
  options.recompute = true;
  REQUIRE(simulate(gpipe(p, m), options).max_peak_stored_bytes() == 10 * (m - 1) + 100);
  REQUIRE(g.max_peak_stored_bytes() == 100 * m);
}

TEST_CASE("per-stage costs: the slowest stage sets the pace") {
  SimulationOptions options;
  options.stage_costs = {{1, 1, 0, 0}, {3, 3, 0, 0}, {1, 1, 0, 0}};
  const SimulationResult r = simulate(gpipe(3, 4), options);
  // Forwards: the middle stage takes 3 per microbatch: F3 on stage 2 ends at 1 + 4*3 + 1.
  REQUIRE(r.ranks[2].actions[3].end_s == 14);
  REQUIRE(r.ranks[0].busy_s == 8);
  REQUIRE(r.ranks[1].busy_s == 24);
  REQUIRE_THROWS_WITH(simulate(gpipe(4, 4), options),
                      Contains("3 stage costs for 4 stages"));
  options.stage_costs = {{-1, 1, 0, 0}};
  REQUIRE_THROWS_WITH(simulate(gpipe(2, 2), options), Contains("must be finite and >= 0"));
  options = equal_stages(1, 1);
  options.link.bandwidth_bytes_per_s = -5;
  REQUIRE_THROWS_WITH(simulate(gpipe(2, 2), options), Contains("bandwidth"));
}

TEST_CASE("deferred weight gradients: shorter backwards, the weights at the end, queued bytes kept until then") {
  for (int p : {1, 2, 3, 5}) {
    for (int m : {1, p, 2 * p + 1, 16}) {
      INFO("P = " << p << ", M = " << m);
      const double f = 1, b = 2, w = 0.75;
      SimulationOptions options;
      options.stage_costs = {StageCost{f, b, 0, 100, w, 50}};
      const SimulationResult o = simulate(schedule_by_name("1f1b-dw", p, 1, m), options);
      const SimulationResult g = simulate(schedule_by_name("gpipe-dw", p, 1, m), options);
      // Rank 0's last backward ends as in 1F1B with backwards of b - w; then its M weight actions.
      const double step = (m + p - 1) * (f + b - w) + m * w;
      REQUIRE(o.step_s == Approx(step).epsilon(1e-12));
      REQUIRE(g.step_s == Approx(step).epsilon(1e-12));
      REQUIRE(o.bubble_fraction == Approx(1 - m * (f + b) / step).margin(1e-12));
      const TimedAction& last = o.ranks[0].actions.back();
      REQUIRE(last.action.kind == ActionKind::weight);
      REQUIRE(last.end_s - last.start_s == Approx(w));
      // The last rank keeps 50 per microbatch after its backward: most alive during its last forward.
      REQUIRE(o.ranks[p - 1].peak_stored_bytes == 50 * (m - 1) + 100);
      REQUIRE(g.ranks[0].peak_stored_bytes == 100 * m);
    }
  }
  SimulationOptions options;
  options.stage_costs = {StageCost{1, 2, 0, 0, 3}};
  REQUIRE_THROWS_WITH(simulate(one_f_one_b(2, 2), options), Contains("weight gradients 3 s of it"));
}
