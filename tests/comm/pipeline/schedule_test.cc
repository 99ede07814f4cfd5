// The built-in schedules validate and are deadlock-free over a grid of sizes; hand-broken
// schedules are rejected with the rank and action named.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "comm/pipeline/schedule.h"
#include "comm/pipeline/simulator.h"
#include "core/error.h"

using namespace tandem;
using namespace tandem::pipeline;
using Catch::Matchers::Contains;

namespace {

// The microbatch counts of the grid for P ranks: 1, P, 2P + 1 and 64 (where <= 64).
std::vector<int> microbatch_grid(int ranks) {
  std::vector<int> grid;
  for (int m : {1, ranks, 2 * ranks + 1, 64}) {
    if (m <= 64 && std::find(grid.begin(), grid.end(), m) == grid.end()) grid.push_back(m);
  }
  return grid;
}

std::string error_of(const Schedule& s) {
  try {
    check_deadlock_free(s);
  } catch (const Error& e) { return e.what(); }
  return "";
}

}  // namespace

TEST_CASE("gpipe and 1f1b validate and are deadlock-free for P <= 16, M <= 64") {
  for (int p = 1; p <= 16; ++p) {
    for (int m : microbatch_grid(p)) {
      INFO("P = " << p << ", M = " << m);
      for (const Schedule& s : {gpipe(p, m), one_f_one_b(p, m)}) {
        REQUIRE(s.stages == p);
        REQUIRE_NOTHROW(validate(s));
        REQUIRE_NOTHROW(check_deadlock_free(s));
      }
    }
  }
}

TEST_CASE("interleaved 1f1b with 2 stages per rank is deadlock-free for P <= 16, M <= 64") {
  for (int p = 1; p <= 16; ++p) {
    // Megatron's restriction: M a multiple of P.
    for (int m : {p, 2 * p, 3 * p, 64 / p * p}) {
      INFO("P = " << p << ", M = " << m);
      const Schedule s = interleaved_1f1b(p, 2, m);
      REQUIRE(s.stages == 2 * p);
      REQUIRE_NOTHROW(check_deadlock_free(s));
    }
  }
  // Other depths of interleaving too.
  for (int v : {1, 3, 4}) {
    for (int p : {1, 2, 4, 5}) {
      INFO("v = " << v << ", P = " << p);
      REQUIRE_NOTHROW(check_deadlock_free(interleaved_1f1b(p, v, 4 * p)));
    }
  }
}

TEST_CASE("1f1b is PipeDream-Flush: warm-up, one forward one backward, cool-down") {
  const Schedule s = one_f_one_b(3, 4);
  REQUIRE(s.actions[0] == std::vector<Action>{forward(0, 0), forward(0, 1), forward(0, 2), backward(0, 0),
                                              forward(0, 3), backward(0, 1), backward(0, 2), backward(0, 3)});
  REQUIRE(s.actions[2] == std::vector<Action>{forward(2, 0), backward(2, 0), forward(2, 1), backward(2, 1),
                                              forward(2, 2), backward(2, 2), forward(2, 3), backward(2, 3)});
}

TEST_CASE("interleaved 1f1b follows Megatron's chunk order and warm-up") {
  // P = 2, v = 2, M = 4: rank 0 warms up with (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 forwards,
  // rank 1 with 2; stages 0 and 2 on rank 0, 1 and 3 on rank 1.
  const Schedule s = interleaved_1f1b(2, 2, 4);
  REQUIRE(s.actions[0] == std::vector<Action>{forward(0, 0), forward(0, 1), forward(2, 0), forward(2, 1), forward(0, 2),
                                              backward(2, 0), forward(0, 3), backward(2, 1), forward(2, 2),
                                              backward(0, 0), forward(2, 3), backward(0, 1), backward(2, 2),
                                              backward(2, 3), backward(0, 2), backward(0, 3)});
  REQUIRE(s.actions[1] == std::vector<Action>{forward(1, 0), forward(1, 1), forward(3, 0), backward(3, 0),
                                              forward(3, 1), backward(3, 1), forward(1, 2), backward(1, 0),
                                              forward(1, 3), backward(1, 1), forward(3, 2), backward(3, 2),
                                              forward(3, 3), backward(3, 3), backward(1, 2), backward(1, 3)});
  REQUIRE(s.rank_of_stage(5) == 1);
  REQUIRE_THROWS_WITH(interleaved_1f1b(4, 2, 6), Contains("must be a multiple of the number of ranks (4)"));
}

TEST_CASE("schedule_by_name knows the built-ins and lists them otherwise") {
  REQUIRE(schedule_by_name("gpipe", 3, 1, 5).actions == gpipe(3, 5).actions);
  REQUIRE(schedule_by_name("1f1b", 3, 1, 5).actions == one_f_one_b(3, 5).actions);
  REQUIRE(schedule_by_name("interleaved", 2, 2, 4).actions == interleaved_1f1b(2, 2, 4).actions);
  REQUIRE_THROWS_WITH(schedule_by_name("zero-bubble", 2, 1, 4), Contains("unknown pipeline schedule 'zero-bubble'") &&
                                                                    Contains("'gpipe', '1f1b', 'interleaved'"));
  REQUIRE_THROWS_WITH(schedule_by_name("1f1b", 2, 2, 4), Contains("use 'interleaved'"));
}

TEST_CASE("the messages a schedule implies, and their tags") {
  const Schedule s = interleaved_1f1b(2, 2, 2);  // stages 0, 2 on rank 0; 1, 3 on rank 1
  REQUIRE_FALSE(received_by(s, forward(0, 1)));
  const Message in = *received_by(s, forward(2, 1));
  REQUIRE(in.kind == MessageKind::activation);
  REQUIRE((in.from_stage == 1 && in.to_stage == 2 && in.from_rank == 1 && in.to_rank == 0));
  REQUIRE(message_tag(in) == 2);
  REQUIRE(message_tag(*sent_by(s, forward(1, 1))) == 2);  // the same channel on both sides
  const Message grad = *sent_by(s, backward(2, 0));
  REQUIRE((grad.kind == MessageKind::gradient && grad.to_stage == 1 && grad.to_rank == 1));
  REQUIRE(message_tag(grad) == 3);
  REQUIRE(message_tag(*received_by(s, backward(1, 0))) == 3);
  REQUIRE_FALSE(sent_by(s, backward(0, 0)));
  REQUIRE_FALSE(sent_by(s, forward(3, 0)));
  // One rank: every stage passes through memory.
  const Schedule one = interleaved_1f1b(1, 3, 2);
  REQUIRE_FALSE(received_by(one, forward(1, 0)));
  REQUIRE(*producer_of(one, forward(1, 0)) == forward(0, 0));
  REQUIRE(*producer_of(one, backward(1, 0)) == backward(2, 0));
  REQUIRE_FALSE(producer_of(one, backward(2, 0)));
}

TEST_CASE("a swapped pair that makes two ranks wait for each other is a deadlock, named") {
  // GPipe on 4 ranks: rank 1 runs its backward of microbatch 0 before its last forward, which
  // rank 2 needs before it can send that gradient.
  Schedule s = gpipe(4, 8);
  std::swap(s.actions[1][7], s.actions[1][8]);
  REQUIRE_NOTHROW(validate(s));  // structurally fine: only running it shows the cycle
  const std::string error = error_of(s);
  INFO(error);
  REQUIRE_THAT(error, Contains("'gpipe' (4 ranks, 4 stages, 8 microbatches) deadlocks"));
  REQUIRE_THAT(error, Contains("rank 1 is blocked at action 7 (backward of microbatch 0 on "
                               "stage 1), waiting for the gradient of microbatch 0 from stage 2 "
                               "on rank 2, which rank 2 sends only after its action 8 (backward "
                               "of microbatch 0 on stage 2)"));
  REQUIRE_THAT(error, Contains("rank 2 is blocked at action 7 (forward of microbatch 7 on stage "
                               "2), waiting for the activation of microbatch 7 from stage 1 on "
                               "rank 1, which rank 1 sends only after its action 8 (forward of "
                               "microbatch 7 on stage 1)"));
  REQUIRE_THAT(error, Contains("Cycle: rank 1 -> rank 2 -> rank 1."));
  REQUIRE_THAT(error, Contains("Blocked behind it: rank 0 at action 8 (backward of microbatch 0 "
                               "on stage 0), rank 3 at action 7 (forward of microbatch 7 on "
                               "stage 3)."));
}

TEST_CASE("a cycle between two ranks holding two stages each is a deadlock, named") {
  // Rank 0 runs stage 0's backward before stage 2's forward; rank 1 needs stage 2's output
  // (for stage 3) before it runs stage 1's backward, which sends what rank 0 waits for.
  Schedule s;
  s.name = "mine";
  s.ranks = 2;
  s.stages = 4;
  s.microbatches = 1;
  s.actions = {{forward(0, 0), backward(0, 0), forward(2, 0), backward(2, 0)},
               {forward(1, 0), forward(3, 0), backward(3, 0), backward(1, 0)}};
  const std::string error = error_of(s);
  INFO(error);
  REQUIRE_THAT(error, Contains("rank 0 is blocked at action 1 (backward of microbatch 0 on stage "
                               "0), waiting for the gradient of microbatch 0 from stage 1 on "
                               "rank 1, which rank 1 sends only after its action 3"));
  REQUIRE_THAT(error, Contains("rank 1 is blocked at action 1 (forward of microbatch 0 on stage "
                               "3), waiting for the activation of microbatch 0 from stage 2 on "
                               "rank 0, which rank 0 sends only after its action 2"));
  REQUIRE_THAT(error, Contains("Cycle: rank 0 -> rank 1 -> rank 0."));
}

TEST_CASE("a rank waiting on its own later action is a deadlock of one") {
  Schedule s{"mine", 1, 2, 1, {{forward(1, 0), forward(0, 0), backward(1, 0), backward(0, 0)}}};
  const std::string error = error_of(s);
  INFO(error);
  REQUIRE_THAT(error, Contains("rank 0 is blocked at action 0 (forward of microbatch 0 on stage "
                               "1), waiting for the result of its own action 1 (forward of "
                               "microbatch 0 on stage 0), which comes later in its order"));
  REQUIRE_THAT(error, Contains("Cycle: rank 0 -> rank 0."));
}

TEST_CASE("validate names the rank and action of a structural mistake") {
  SECTION("a missing backward") {
    Schedule s = one_f_one_b(3, 4);
    auto& list = s.actions[1];
    list.erase(std::find(list.begin(), list.end(), backward(1, 2)));
    REQUIRE_THROWS_WITH(validate(s), Contains("rank 1 never runs the backward of microbatch 2 on stage 1"));
  }
  SECTION("an action on the wrong rank") {
    Schedule s = gpipe(3, 2);
    s.actions[1][0] = forward(2, 0);
    REQUIRE_THROWS_WITH(validate(s), Contains("rank 1, action 0 (forward of microbatch 0 on "
                                              "stage 2) is on the wrong rank: stage 2 runs on "
                                              "rank 2"));
  }
  SECTION("a duplicated forward") {
    Schedule s = gpipe(2, 3);
    s.actions[0].push_back(forward(0, 1));
    REQUIRE_THROWS_WITH(validate(s), Contains("rank 0 runs the forward of microbatch 1 on stage 0 "
                                              "twice, as actions 1 and 6"));
  }
  SECTION("a backward before its forward") {
    Schedule s = one_f_one_b(2, 2);
    std::swap(s.actions[1][0], s.actions[1][1]);  // the last stage: B0 before F0
    REQUIRE_THROWS_WITH(validate(s), Contains("rank 1, action 0 (backward of microbatch 0 on "
                                              "stage 1) comes before action 1 (forward of "
                                              "microbatch 0 on stage 1)"));
  }
  SECTION("forwards received in another order than they were sent") {
    Schedule s = gpipe(2, 3);
    std::swap(s.actions[1][1], s.actions[1][2]);  // rank 1: F0 F2 F1
    REQUIRE_THROWS_WITH(validate(s), Contains("rank 1, action 1 (forward of microbatch 2 on "
                                              "stage 1) would receive the activation of "
                                              "microbatch 1") &&
                                         Contains("order 0, 1, 2") && Contains("order 0, 2, 1"));
  }
  SECTION("backwards out of order between sender and receiver") {
    Schedule s = gpipe(2, 2);
    std::swap(s.actions[1][2], s.actions[1][3]);  // rank 1 sends gradients 1, 0
    REQUIRE_THROWS_WITH(validate(s), Contains("rank 0, action 2 (backward of microbatch 0 on "
                                              "stage 0) would receive the gradient of "
                                              "microbatch 1"));
  }
  SECTION("sizes and ranges") {
    Schedule s = gpipe(2, 2);
    s.actions.pop_back();
    REQUIRE_THROWS_WITH(validate(s), Contains("has 1 action lists for 2 ranks"));
    s = gpipe(2, 2);
    s.actions[0][0].microbatch = 5;
    REQUIRE_THROWS_WITH(validate(s), Contains("rank 0, action 0 names microbatch 5, outside 0..1"));
    s = gpipe(2, 2);
    s.actions[1][0].stage = -1;
    REQUIRE_THROWS_WITH(validate(s), Contains("rank 1, action 0 names stage -1"));
    s.microbatches = 0;
    REQUIRE_THROWS_WITH(validate(s), Contains("must all be at least 1"));
  }
  SECTION("order within one rank is free where the stages share it") {
    // One rank, two stages: no channel between them, so no ordering rule, only dependencies.
    Schedule s{"mine",
               1,
               2,
               2,
               {{forward(0, 0), forward(0, 1), forward(1, 1), forward(1, 0), backward(1, 0), backward(0, 0),
                 backward(1, 1), backward(0, 1)}}};
    REQUIRE_NOTHROW(validate(s));
    REQUIRE_NOTHROW(check_deadlock_free(s));
  }
}

TEST_CASE("deferred weight gradients: every built-in with -dw validates and is deadlock-free for P <= 16, M <= 64") {
  for (int p = 1; p <= 16; ++p) {
    for (int m : microbatch_grid(p)) {
      INFO("P = " << p << ", M = " << m);
      std::vector<Schedule> schedules = {schedule_by_name("gpipe-dw", p, 1, m), schedule_by_name("1f1b-dw", p, 1, m)};
      if (m % p == 0) schedules.push_back(schedule_by_name("interleaved-dw", p, 2, m));
      for (const Schedule& s : schedules) {
        INFO(s.describe());
        REQUIRE_NOTHROW(check_deadlock_free(s));
        // Each rank's list: the base schedule's, then its stages' weight actions, stage by stage,
        // each stage's in the order of its backwards.
        const std::string base = s.name.substr(0, s.name.size() - 3);
        const Schedule plain = schedule_by_name(base, p, s.stages / p, m);
        for (int r = 0; r < p; ++r) {
          const std::vector<Action>& list = s.actions[r];
          const std::vector<Action>& before = plain.actions[r];
          const std::size_t n = before.size();
          REQUIRE(std::equal(before.begin(), before.end(), list.begin()));
          REQUIRE(list.size() == n + static_cast<std::size_t>(m * (s.stages / p)));
          std::vector<Action> expected;
          for (int stage : s.stages_of_rank(r))
            for (const Action& a : before)
              if (a.kind == ActionKind::backward && a.stage == stage) expected.push_back(weight(stage, a.microbatch));
          REQUIRE(std::equal(expected.begin(), expected.end(), list.begin() + static_cast<std::ptrdiff_t>(n)));
        }
      }
    }
  }
  REQUIRE_THROWS_WITH(defer_weight_gradients(defer_weight_gradients(gpipe(2, 2))),
                      Contains("already has weight actions (weight gradients of microbatch 0 on stage 0)"));
  REQUIRE(weight(3, 5).label(true) == "W5/s3");
}

TEST_CASE("weight actions out of place are named: before their backward, missing, twice, out of order, wrong rank") {
  Schedule s = one_f_one_b(2, 2);  // rank 1: F0 B0 F1 B1
  s.name = "hand-made";
  {
    Schedule bad = s;
    bad.actions[1].insert(bad.actions[1].begin() + 1, weight(1, 0));  // F0 W0 B0 F1 B1
    REQUIRE_THROWS_WITH(validate(bad), Contains("rank 1, action 1 (weight gradients of microbatch 0 on stage 1) comes "
                                                "before the backward of microbatch 0 on stage 1"));
  }
  {
    Schedule bad = s;
    bad.actions[1].insert(bad.actions[1].begin() + 2, weight(1, 0));  // F0 B0 W0 F1 B1
    REQUIRE_THROWS_WITH(validate(bad), Contains("rank 1 never runs the weight gradients of microbatch 1 on stage 1"));
    bad.actions[1].push_back(weight(1, 1));
    REQUIRE_NOTHROW(check_deadlock_free(bad));  // W after each backward: fine
    bad.actions[1].push_back(weight(1, 1));
    REQUIRE_THROWS_WITH(validate(bad), Contains("rank 1 runs the weight gradients of microbatch 1 on stage 1 twice, "
                                                "as actions 5 and 6"));
  }
  {
    Schedule bad = s;  // F0 B0 F1 B1 W1 W0: the weight gradients summed in another order than 1F1B's
    bad.actions[1].push_back(weight(1, 1));
    bad.actions[1].push_back(weight(1, 0));
    REQUIRE_THROWS_WITH(validate(bad), Contains("rank 1, action 4 (weight gradients of microbatch 1 on stage 1) is "
                                                "stage 1's weight action number 0, but its backward number 0 is "
                                                "microbatch 0"));
  }
  {
    Schedule bad = s;
    bad.actions[0].push_back(weight(1, 1));  // stage 1 lives on rank 1
    REQUIRE_THROWS_WITH(validate(bad), Contains("is on the wrong rank"));
  }
  {
    Schedule bad = s;
    bad.stage_ranks = {0, 2};
    REQUIRE_THROWS_WITH(validate(bad), Contains("places stage 1 on rank 2, outside 0..1"));
    bad.stage_ranks = {0};
    REQUIRE_THROWS_WITH(validate(bad), Contains("places 1 stages on ranks (stage_ranks) but has 2"));
  }
}
