// The flight recorder in one process: the ring keeps the newest entries, states move on and
// stop at completed/failed, the pipeline context and call sites are recorded, the dump is
// self-describing JSON that read_dumps reads back, and the analysis of hand-made dumps names
// the first disagreement, a message never received and a receive never matched.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "comm/trace/analysis.h"
#include "comm/trace/flight_recorder.h"
#include "comm/trace/trace_dump.h"

using namespace tandem;
using namespace tandem::trace;
using nlohmann::json;

namespace {

FlightEntry entry(const std::string& op, bool collective, int peer, int tag, long long sequence) {
  FlightEntry e;
  e.op = op;
  e.collective = collective;
  e.comm = 0;
  e.peer = peer;
  e.tag = tag;
  e.sequence = sequence;
  e.dtype = "f32";
  e.shape = {4};
  e.site = CallSite::current();
  return e;
}

}  // namespace

TEST_CASE("flight recorder: the ring keeps the newest entries, in order") {
  FlightRecorder& recorder = FlightRecorder::instance();
  recorder.reset(3);
  for (int i = 0; i < 5; ++i) recorder.record(entry("allreduce", true, -1, -1, i));
  const auto kept = recorder.entries();
  REQUIRE(kept.size() == 3);
  CHECK(kept[0].sequence == 2);
  CHECK(kept[2].sequence == 4);
  CHECK(kept[2].id == 4);
  CHECK(recorder.dropped() == 2);
  // An entry that left the ring is ignored.
  recorder.set_state(0, FlightState::completed);
  CHECK(recorder.entries()[0].state == FlightState::posted);
  recorder.reset(0);
  CHECK_FALSE(recorder.enabled());
  CHECK(recorder.record(entry("allreduce", true, -1, -1, 0)) == -1);
  recorder.reset(2000);
}

TEST_CASE("flight recorder: states, times, the pipeline context and the call site") {
  FlightRecorder& recorder = FlightRecorder::instance();
  recorder.reset(10);
  std::int64_t id;
  {
    const timeline::StageScope context(2, 5);
    id = recorder.record(entry("recv", false, 1, 7, 3));
  }
  const std::int64_t outside = recorder.record(entry("send", false, 1, 7, 0));
  recorder.set_state(id, FlightState::matched);
  recorder.set_state(id, FlightState::failed, "boom");
  recorder.set_state(id, FlightState::completed);  // final states stay
  const auto all = recorder.entries();
  CHECK(all[0].stage == 2);
  CHECK(all[0].microbatch == 5);
  CHECK(all[1].stage == -1);
  CHECK(all[0].state == FlightState::failed);
  CHECK(all[0].error == "boom");
  CHECK(all[0].matched_us >= all[0].posted_us);
  CHECK(all[0].ended_us >= all[0].matched_us);
  CHECK(all[1].id == outside);
  CHECK_THAT(all[0].site.str(), Catch::Contains("tests/comm/trace/flight_recorder_test.cc:"));
  recorder.reset(2000);
}

TEST_CASE("flight recorder: a CallSiteScope makes the outermost site the user's") {
  const CallSite outer = CallSite::current();
  CHECK(CallSiteScope::user_site(CallSite::current()).line != outer.line);
  {
    const CallSiteScope scope(outer);
    const CallSiteScope inner(CallSite::current());  // nested: keeps the outer one
    CHECK(CallSiteScope::user_site(CallSite::current()).line == outer.line);
  }
  CHECK(CallSiteScope::user_site(CallSite{}).file == nullptr);
}

TEST_CASE("flight recorder: the dump is self-describing and read back by job") {
  const auto dir = std::filesystem::temp_directory_path() / ("tandem_trace_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  setenv("TANDEM_TRACE_DIR", dir.c_str(), 1);
  FlightRecorder& recorder = FlightRecorder::instance();
  recorder.reset(10);
  recorder.add_communicator({0, {0, 1}});
  recorder.record(entry("allreduce", true, -1, -1, 0));
  set_dump_identity({"testjob", 1, 2});
  const std::string path = write_dump("for the test");
  REQUIRE(path == dump_path(dir.string(), "testjob", 1));
  const auto dumps = read_dumps(dir.string());
  REQUIRE(dumps.size() == 1);
  const json& d = dumps[0];
  CHECK(d["job"] == "testjob");
  CHECK(d["rank"] == 1);
  CHECK(d["world_size"] == 2);
  CHECK(d["reason"] == "for the test");
  CHECK(d["pid"].get<long long>() == ::getpid());
  CHECK(d["communicators"][0]["world_ranks"] == json({0, 1}));
  CHECK(d["entries"][0]["op"] == "allreduce");
  CHECK(d["entries"][0]["shape"] == json({4}));
  CHECK(d["entries"][0]["state"] == "posted");
  CHECK(read_dumps(dir.string(), "otherjob").empty());
  unsetenv("TANDEM_TRACE_DIR");
  std::filesystem::remove_all(dir);
  recorder.reset(2000);
}

TEST_CASE("flight recorder analysis: the first disagreement, a message never received, a receive never matched") {
  auto dump = [](int rank, std::vector<json> entries) {
    return json{{"tandem_trace", 1}, {"job", "j"}, {"rank", rank}, {"world_size", 2}, {"host", "h"}, {"pid", 100 + rank},
                {"reason", "test"}, {"time_us", 1000000}, {"communicators", json::array({json{{"id", 0}, {"world_ranks", {0, 1}}}})},
                {"entries", entries}};
  };
  auto e = [](const std::string& op, bool collective, int rank, int peer, int tag, long long seq, const std::string& dtype,
              const std::string& state, const std::string& site) {
    return json{{"id", seq}, {"op", op}, {"collective", collective}, {"receive", op == "recv"}, {"context", ""},
                {"comm", 0}, {"rank", rank},
                {"peer", peer}, {"tag", tag}, {"sequence", seq}, {"dtype", dtype}, {"shape", {4}}, {"stage", -1},
                {"microbatch", -1}, {"site", site}, {"direct", site}, {"state", state}, {"posted_us", 0},
                {"matched_us", 0}, {"ended_us", 0}, {"error", ""}};
  };
  const std::string report = analyze({
      dump(0, {e("allreduce", true, 0, -1, -1, 0, "f32", "completed", "a.cc:1"),
               e("send", false, 0, 1, 3, 0, "f32", "completed", "a.cc:2"),
               e("allreduce", true, 0, -1, -1, 1, "f32", "posted", "a.cc:3")}),
      dump(1, {e("allreduce", true, 1, -1, -1, 0, "f32", "completed", "a.cc:1"),
               e("recv", false, 1, 0, 4, 0, "", "posted", "b.cc:9"),
               e("allreduce", true, 1, -1, -1, 1, "f64", "posted", "b.cc:3")}),
  });
  INFO(report);
  CHECK_THAT(report, Catch::Contains("collective #1 of communicator 0 (2 ranks): the ranks disagree"));
  CHECK_THAT(report, Catch::Contains("rank 0 is in allreduce f32[4] at a.cc:3"));
  CHECK_THAT(report, Catch::Contains("rank 1 is in allreduce f64[4] at b.cc:3"));
  CHECK_THAT(report, Catch::Contains("rank 0 sent send f32[4] (to rank 1, tag 3, message #0) at a.cc:2"));
  CHECK_THAT(report, Catch::Contains("which rank 1 never received on tag 3"));
  CHECK_THAT(report, Catch::Contains("rank 1 waits in recv (from rank 0, tag 4, message #0) at b.cc:9, which rank 0 "
                                     "never sent (it sent to rank 1 on tag(s) 3)"));
  CHECK_THAT(report, Catch::Contains("rank 0: waiting in allreduce f32[4] at a.cc:3"));
  CHECK_THAT(report, Catch::Contains("2 of 2 rank(s) dumped"));
}
