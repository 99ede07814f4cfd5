#include "comm/transport/background_progress.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "comm/transport/mpi_world.h"
#include "core/error.h"

namespace tandem {
namespace {

struct Helper {
  std::mutex mutex;
  std::condition_variable wake;
  int windows = 0;  // open windows
  bool quit = false;
  bool started = false;
  std::thread thread;
  std::atomic<std::uint64_t> polls{0};
};

Helper& helper() {
  static Helper* h = new Helper();  // never destroyed: the thread is stopped in MPI_Finalize
  return *h;
}

std::chrono::microseconds poll_interval() {
  const char* text = std::getenv("TANDEM_MPI_PROGRESS_US");
  if (!text || !*text) return std::chrono::microseconds(1000);
  char* end = nullptr;
  const long us = std::strtol(text, &end, 10);
  TANDEM_CHECK(end && *end == '\0' && us > 0, "comm: TANDEM_MPI_PROGRESS_US='", text,
               "' is not a positive number of microseconds");
  return std::chrono::microseconds(us);
}

void poll_while_open(Helper& h, std::chrono::microseconds interval) {
  std::unique_lock<std::mutex> lock(h.mutex);
  for (;;) {
    h.wake.wait(lock, [&] { return h.quit || h.windows > 0; });
    if (h.quit) return;
    lock.unlock();
    int flag = 0;
    // A probe for a tag that no rank ever sends on the control communicator (a duplicate of
    // MPI_COMM_WORLD, so that the probe reaches the transports that carry the peers' traffic; a
    // probe on a duplicate of MPI_COMM_SELF moved nothing): it matches nothing and moves every
    // transfer in flight, MPICH having one progress engine per process.
    MPI_Iprobe(MPI_ANY_SOURCE, comm_detail::kNeverSentTag, comm_detail::control_comm(), &flag, MPI_STATUS_IGNORE);
    h.polls.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
    h.wake.wait_for(lock, interval, [&] { return h.quit; });
  }
}

// MPI_Finalize deletes MPI_COMM_SELF's attributes first (the last set first), before it tears
// anything down: the helper stops there, whoever finalises.
int stop_helper(MPI_Comm, int, void*, void*) {
  Helper& h = helper();
  {
    std::lock_guard<std::mutex> lock(h.mutex);
    h.quit = true;
  }
  h.wake.notify_all();
  if (h.thread.joinable()) h.thread.join();
  return MPI_SUCCESS;
}

void start_helper(Helper& h) {
  const std::chrono::microseconds interval = poll_interval();
  int keyval = MPI_KEYVAL_INVALID;
  comm_detail::check_mpi(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, stop_helper, &keyval, nullptr),
                         "MPI_Comm_create_keyval");
  comm_detail::check_mpi(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr), "MPI_Comm_set_attr");
  h.thread = std::thread(poll_while_open, std::ref(h), interval);
  h.started = true;
}

}  // namespace

bool background_progress_available() {
  if (!comm_detail::mpi_active()) return false;
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided == MPI_THREAD_MULTIPLE;
}

std::uint64_t background_progress_polls() { return helper().polls.load(std::memory_order_relaxed); }

BackgroundProgressWindow open_background_progress() {
  BackgroundProgressWindow window;
  if (!background_progress_available()) return window;
  Helper& h = helper();
  {
    std::lock_guard<std::mutex> lock(h.mutex);
    if (h.quit) return window;
    if (!h.started) start_helper(h);
    ++h.windows;
  }
  h.wake.notify_all();
  window.open_ = true;
  return window;
}

void BackgroundProgressWindow::close() {
  if (!open_) return;
  open_ = false;
  Helper& h = helper();
  std::lock_guard<std::mutex> lock(h.mutex);
  --h.windows;
}

BackgroundProgressWindow::BackgroundProgressWindow(BackgroundProgressWindow&& other) noexcept : open_(other.open_) {
  other.open_ = false;
}

BackgroundProgressWindow& BackgroundProgressWindow::operator=(BackgroundProgressWindow&& other) noexcept {
  if (this != &other) {
    close();
    open_ = other.open_;
    other.open_ = false;
  }
  return *this;
}

BackgroundProgressWindow::~BackgroundProgressWindow() { close(); }

namespace comm_detail {

int mpi_thread_level_for(const char* setting, const char* local_ranks, const char* world_size) {
  const std::string mode = setting && *setting ? setting : "auto";
  if (mode == "off") return MPI_THREAD_FUNNELED;
  if (mode == "thread") return MPI_THREAD_MULTIPLE;
  TANDEM_CHECK(mode == "auto", "comm: TANDEM_MPI_PROGRESS='", mode,
               "' is not one of auto (a helper thread when the launch spans more than one host), thread "
               "(always) or off (never)");
  // Without hydra's variables (a singleton, another launcher) the hosts are unknown: one host.
  if (!local_ranks || !world_size) return MPI_THREAD_FUNNELED;
  const long local = std::atol(local_ranks), all = std::atol(world_size);
  return local > 0 && local < all ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
}

int mpi_thread_level_from_environment() {
  return mpi_thread_level_for(std::getenv("TANDEM_MPI_PROGRESS"), std::getenv("MPI_LOCALNRANKS"),
                              std::getenv("PMI_SIZE"));
}

}  // namespace comm_detail
}  // namespace tandem
