// Background progress (comm/transport/background_progress.h): while a window is open, a helper
// thread calls into MPI, so that a started collective completes while the rank computes without
// calling MPI itself. Run under TANDEM_MPI_PROGRESS=thread (MPI at MPI_THREAD_MULTIPLE) and, as
// background_progress_test_off_2ranks, under off, where a window is inert.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "comm/transport/background_progress.h"
#include "comm/transport/communicator.h"
#include "core/error.h"
#include "tests/core/test_util.h"

using namespace tandem;
using test_util::require_values;
using test_util::uniform;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

bool helper_expected() {
  const char* setting = std::getenv("TANDEM_MPI_PROGRESS");
  return setting && std::string(setting) == "thread";
}

void compute_for(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

TEST_CASE("background progress: the thread level asked of MPI follows TANDEM_MPI_PROGRESS and the hosts") {
  using comm_detail::mpi_thread_level_for;
  CHECK(mpi_thread_level_for(nullptr, nullptr, nullptr) == MPI_THREAD_FUNNELED);
  CHECK(mpi_thread_level_for("auto", "4", "4") == MPI_THREAD_FUNNELED);   // one host
  CHECK(mpi_thread_level_for("auto", "2", "4") == MPI_THREAD_MULTIPLE);   // two hosts
  CHECK(mpi_thread_level_for("", "1", "2") == MPI_THREAD_MULTIPLE);       // empty is auto
  CHECK(mpi_thread_level_for("auto", nullptr, "2") == MPI_THREAD_FUNNELED);  // another launcher
  CHECK(mpi_thread_level_for("thread", "4", "4") == MPI_THREAD_MULTIPLE);
  CHECK(mpi_thread_level_for("off", "1", "4") == MPI_THREAD_FUNNELED);
  try {
    mpi_thread_level_for("threads", "1", "2");
    FAIL("a malformed TANDEM_MPI_PROGRESS was accepted");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("TANDEM_MPI_PROGRESS='threads'") != std::string::npos);
    CHECK(what.find("auto") != std::string::npos);
    CHECK(what.find("off") != std::string::npos);
  }
}

TEST_CASE("background progress: the helper polls while a window is open, and only then") {
  world();  // MPI initialised
  REQUIRE(background_progress_available() == helper_expected());
  const std::uint64_t before = background_progress_polls();
  {
    BackgroundProgressWindow window = open_background_progress();
    CHECK(window.open() == helper_expected());
    compute_for(60);
    if (helper_expected()) CHECK(background_progress_polls() - before >= 10);  // every 1 ms
    else CHECK(background_progress_polls() == before);

    // Windows nest; a moved-from window is closed; assigning over an open one closes it.
    BackgroundProgressWindow inner = open_background_progress();
    BackgroundProgressWindow moved = std::move(inner);
    CHECK_FALSE(inner.open());
    CHECK(moved.open() == helper_expected());
    moved = BackgroundProgressWindow();
    CHECK_FALSE(moved.open());
    const std::uint64_t still = background_progress_polls();
    compute_for(30);
    if (helper_expected()) CHECK(background_progress_polls() - still >= 5);  // the outer one is open
  }
  compute_for(10);  // a poll under way when the window closed ends
  const std::uint64_t closed = background_progress_polls();
  compute_for(60);
  CHECK(background_progress_polls() == closed);
}

TEST_CASE("background progress: a started allreduce completes while the rank computes without calling MPI") {
  CommunicatorPtr comm = world();
  const int r = comm->rank();
  // 8 MB per rank: far past MPI's eager limit, so it needs many turns of the progress engine.
  const Tensor x = uniform({1 << 20}, 30 + r, -1, 1, DType::f64);
  const Tensor expected = comm->allreduce(x);
  for (int round = 0; round < 3; ++round) {
    comm->barrier();
    std::unique_ptr<PendingCollective> pending = comm->start_allreduce_sum(x, 7, "background bucket");
    BackgroundProgressWindow window = open_background_progress();
    compute_for(20);
    pending->test();  // posts the data phase (this thread's work) once the peers' headers are here
    compute_for(400);  // no MPI call on this thread
    int done_after_computing = pending->test() ? 1 : 0;
    window.close();
    // Every rank's verdict: a rank whose helper moved nothing still holds its collective here
    // (under off, all_done was 0 in every round tried: a test() or two does not finish 8 MB).
    int all_done = 0;
    MPI_Allreduce(&done_after_computing, &all_done, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (helper_expected()) CHECK(all_done == 1);
    require_values(pending->wait(), expected.to_vector<double>());
  }
}
