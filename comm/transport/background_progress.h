// Background progress: MPI moves a started (non-blocking) transfer only while some thread of the
// process is inside an MPI call. Over TCP (ranks on different hosts) a collective started while the
// caller computes therefore moves only when the caller next calls the communicator, which may be
// tens of milliseconds later (between two steps of a backward pass at a large batch), and the link idles
// in between; without a helper, overlapping the buckets
// with backward bought little across simulated hosts at 1 Gbit/s (bench/data_parallel_bench at
// BENCH_BATCH=1024, dp.big.train.after against .overlap: docs/performance.md, "Data parallelism
// across hosts").
//
// While a window opened here is open, a helper thread calls into MPI every
// TANDEM_MPI_PROGRESS_US microseconds (1000 unless set) and sleeps in between; with no window
// open it sleeps until one opens. It needs MPI at MPI_THREAD_MULTIPLE, which tandem asks for at
// initialisation when TANDEM_MPI_PROGRESS says so:
//   auto (the default)  when the launch spans more than one host (hydra's MPI_LOCALNRANKS below
//                       PMI_SIZE): within one host MPI moves data by copies on the compute cores,
//                       which a helper cannot take off them, so the thread level stays FUNNELED
//   thread              always
//   off                 never (FUNNELED)
// Where MPI runs below MPI_THREAD_MULTIPLE (a program that initialised MPI itself, or off), a
// window is inert and nothing changes.
#pragma once

#include <cstdint>

namespace tandem {

class BackgroundProgressWindow {
 public:
  BackgroundProgressWindow() = default;  // closed
  BackgroundProgressWindow(BackgroundProgressWindow&& other) noexcept;
  BackgroundProgressWindow& operator=(BackgroundProgressWindow&& other) noexcept;
  BackgroundProgressWindow(const BackgroundProgressWindow&) = delete;
  BackgroundProgressWindow& operator=(const BackgroundProgressWindow&) = delete;
  ~BackgroundProgressWindow();

  // Whether this window keeps the helper polling (false when closed or inert).
  bool open() const { return open_; }
  void close();

 private:
  friend BackgroundProgressWindow open_background_progress();
  bool open_ = false;
};

// Opens a window (windows nest: the helper polls while any is open). Inert where background
// progress is unavailable. Call it on the thread that initialised MPI.
BackgroundProgressWindow open_background_progress();

// Whether MPI runs at MPI_THREAD_MULTIPLE here, so that windows poll.
bool background_progress_available();

// How many times the helper has called into MPI so far (for tests and reports).
std::uint64_t background_progress_polls();

namespace comm_detail {

// The thread level to ask MPI_Init_thread for, from TANDEM_MPI_PROGRESS and hydra's
// MPI_LOCALNRANKS / PMI_SIZE (each may be null: unset). A malformed setting is an error that
// names the variable and the values it takes.
int mpi_thread_level_for(const char* setting, const char* local_ranks, const char* world_size);
int mpi_thread_level_from_environment();

}  // namespace comm_detail
}  // namespace tandem
