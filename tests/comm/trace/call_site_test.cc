// The flight recorder names the user's line for every communication (2 ranks): a direct
// Communicator call, the differentiable send and recv, and the messages their backward sends,
// which carry the line of the forward call that made them (not tandem's own lines).
#include <catch2/catch.hpp>

#include <string>

#include "autograd/functions.h"
#include "comm/functions.h"
#include "comm/trace/flight_recorder.h"
#include "comm/transport/communicator.h"
#include "core/ops.h"

using namespace tandem;
namespace F = tandem::functions;

namespace {

Communicator& world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return *comm;
}

// This file's entries since `first`, as "op@line".
std::vector<std::string> sites_since(std::int64_t first) {
  std::vector<std::string> out;
  for (const trace::FlightEntry& e : trace::FlightRecorder::instance().entries()) {
    if (e.id < first) continue;
    const std::string file = e.site.file ? e.site.file : "";
    const bool here = file.find("call_site_test.cc") != std::string::npos;
    out.push_back(e.op + (e.receive ? "<" : ">") + "@" + (here ? std::to_string(e.site.line) : file));
  }
  return out;
}

std::int64_t next_id() {
  const auto all = trace::FlightRecorder::instance().entries();
  return all.empty() ? 0 : all.back().id + 1;
}

}  // namespace

TEST_CASE("call sites: a direct allreduce records the caller's line") {
  Communicator& comm = world();
  const std::int64_t first = next_id();
  const int line = __LINE__ + 1;
  comm.allreduce(full({3}, 1.0, DType::f32));
  const auto sites = sites_since(first);
  REQUIRE(sites.size() == 1);
  CHECK(sites[0] == "allreduce>@" + std::to_string(line));
}

TEST_CASE("call sites: the differentiable send and recv, forward and backward, name the user's lines") {
  Communicator& comm = world();
  REQUIRE(comm.size() == 2);
  const std::int64_t first = next_id();
  int send_line = 0, recv_line = 0;
  if (comm.rank() == 0) {
    Variable x(full({2, 2}, 1.5, DType::f64), true);
    send_line = __LINE__ + 1;
    Variable delegate = F::send(F::mul(x, x), comm, 1);
    delegate.backward();  // receives the gradient from rank 1
    const auto sites = sites_since(first);
    INFO(sites.size());
    REQUIRE(sites.size() == 2);
    CHECK(sites[0].find(">@" + std::to_string(send_line)) != std::string::npos);  // the forward message
    CHECK(sites[1].find("<@" + std::to_string(send_line)) != std::string::npos);  // its gradient, in backward
  } else {
    recv_line = __LINE__ + 1;
    Variable y = F::recv(comm, 0);
    F::sum(F::mul(y, y)).backward();  // sends the gradient back to rank 0
    const auto sites = sites_since(first);
    REQUIRE(sites.size() == 2);
    CHECK(sites[0].find("<@" + std::to_string(recv_line)) != std::string::npos);
    CHECK(sites[1].find(">@" + std::to_string(recv_line)) != std::string::npos);
  }
  const auto entries = trace::FlightRecorder::instance().entries();
  CHECK(entries.back().context == "in backward");
  CHECK(entries.back().state == trace::FlightState::completed);
}
