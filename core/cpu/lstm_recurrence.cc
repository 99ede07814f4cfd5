// One LSTM layer's recurrence on two or more threads as a single parallel region for all its
// steps (Backend::lstm_recurrence_forward / _backward; core/ops/recurrent.cc runs the loop cell
// by cell where this declines).
//
// Why: cell by cell, every step's product and cell are a parallel region each, and under
// OMP_WAIT_POLICY=PASSIVE every region wakes a sleeping team, which on virtual machines costs a
// sizeable share of a step's product of a 256-unit LSTM over 64 sequences (core/cpu/parallel.h).
// The second thread then bought nothing: 25 steps of that product ran as fast on two threads as on
// one, where two threads that never sleep ran them much faster (docs/performance.md, "Threads").
//
// How: each thread owns a contiguous share of the H hidden units and the four gate columns of
// each. Forward, per step: h_{t-1} times its units' rows of wh (its four gate blocks, copied next
// to each other once per call) into a scratch block, one serial product; then the cell on its
// units, the scratch added to the input projection on the way. Backward, per step: the cell's
// backward on its units, then the whole step's ggates times its units' columns of wh (copied
// once per call) into its columns of dh. A step needs all of h_{t-1} (forward) or of ggates_t
// (backward), written by every thread, so the threads meet once per step, at a barrier that
// spins, and sleeps only after a while (a team on an oversubscribed machine).
#include <Eigen/Core>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <vector>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/gemm.h"
#include "core/cpu/parallel.h"
#include "core/deterministic.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tandem {

namespace {

template <typename T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// A thread's share of the units is a whole number of 8 (a vector of floats), and at least that.
constexpr std::int64_t kUnitAlignment = 8;
// Steps whose product (2 * B * 4H * H flops for the first step's B rows) is smaller than this
// take about as long as the threads' meeting: they run cell by cell.
constexpr double kMinStepFlops = double(1 << 20);
// Pauses a waiting thread spins through before it sleeps: long against the spread of a step's
// threads, which arrive within microseconds of each other on a machine with a core each and so
// never sleep, short against a step (how long: docs/performance.md, "Threads").
constexpr int kSpinsBeforeSleep = 4000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// A barrier for the threads of one parallel region that spins first and sleeps only after a while:
// where the team has a core per thread, waking a sleeping thread costs what splitting saves (the
// reason this kernel exists); where it has not (two such processes on two cores), a thread that
// spun or yielded on would keep the core its peer needs (with a barrier that only spun and yielded
// the LSTM steps ran slower than cell by cell: docs/performance.md, "Threads"). A thread that fails
// calls fail(): every wait then returns false, so that no thread waits for it forever.
class SpinBarrier {
 public:
  // Each thread says the team's size before its first wait (all say the same).
  void set_team(int threads) { team_.store(threads, std::memory_order_relaxed); }
  bool wait() {
    const unsigned generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == team_.load(std::memory_order_relaxed) - 1) {
      arrived_.store(0, std::memory_order_relaxed);
      // Sequentially consistent with the sleepers' count (below): either a sleeper sees the new
      // generation before it sleeps, or this sees it counted and wakes it.
      generation_.store(generation + 1, std::memory_order_seq_cst);
      if (sleepers_.load(std::memory_order_seq_cst) > 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        wake_.notify_all();
      }
      return !failed_.load(std::memory_order_relaxed);
    }
    auto released = [&] {
      return generation_.load(std::memory_order_seq_cst) != generation || failed_.load(std::memory_order_seq_cst);
    };
    for (int spins = 0; spins < kSpinsBeforeSleep; ++spins) {
      if (released()) return !failed_.load(std::memory_order_relaxed);
      cpu_relax();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    wake_.wait(lock, released);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    return !failed_.load(std::memory_order_relaxed);
  }
  void fail() {
    failed_.store(true, std::memory_order_seq_cst);
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }

 private:
  std::atomic<int> team_{0}, arrived_{0}, sleepers_{0};
  std::atomic<unsigned> generation_{0};
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

// How many threads share the units: 0 where the loop should run cell by cell (one thread, a
// dtype without serial products, or steps too small to split).
int team_size(const std::vector<std::int64_t>& batch_sizes, std::int64_t H, DType dtype) {
  // Deterministic mode: cell by cell, whose products are cut alike at any thread count (a
  // thread's share of the units would change each product's shape with the count).
  if (batch_sizes.empty() || (dtype != DType::f32 && dtype != DType::f64) || deterministic()) return 0;
  const std::int64_t threads = std::min<std::int64_t>(cpu::max_chunks(), H / kUnitAlignment);
  if (threads < 2 || 8.0 * double(batch_sizes[0]) * double(H) * double(H) < kMinStepFlops) return 0;
  return static_cast<int>(threads);
}

// Thread p's units [begin(p), begin(p + 1)) of H among `threads`.
std::int64_t units_begin(std::int64_t H, int p, int threads) {
  if (p >= threads) return H;
  return H * p / threads / kUnitAlignment * kUnitAlignment;
}

// Runs body(p, threads, barrier) on every thread of one region; an exception thrown by any
// thread is rethrown here, after the others have left their loops.
template <typename Body>
void run_team(int threads, const Body& body) {
  SpinBarrier barrier;
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
#ifdef _OPENMP
    const int p = omp_get_thread_num(), team = omp_get_num_threads();
#else
    const int p = 0, team = 1;
#endif
    barrier.set_team(team);
    try {
      body(p, team, barrier);
    } catch (...) {
      barrier.fail();
#pragma omp critical(tandem_lstm_recurrence_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

template <typename T>
void forward_team(const std::vector<std::int64_t>& batch_sizes, int threads, T* gates, const T* wh, const T* h0,
                  const T* c0, T* hs, T* cs, std::int64_t H) {
  run_team(threads, [&](int p, int team, SpinBarrier& barrier) {
    const std::int64_t j0 = units_begin(H, p, team), hp = units_begin(H, p + 1, team) - j0;
    // This thread's rows of wh, gate block by gate block: [4 * hp, H].
    std::vector<T> w(static_cast<std::size_t>(4 * hp * H));
    for (std::int64_t q = 0; q < 4; ++q)
      for (std::int64_t j = 0; j < hp; ++j)
        std::copy(wh + (q * H + j0 + j) * H, wh + (q * H + j0 + j + 1) * H, w.data() + (q * hp + j) * H);
    std::vector<T> scratch(static_cast<std::size_t>(batch_sizes[0] * 4 * hp));
    std::int64_t off = 0, prev = 0;
    for (std::size_t t = 0; t < batch_sizes.size(); ++t) {
      const std::int64_t bt = batch_sizes[t];
      const T* h_prev = t == 0 ? h0 : hs + prev * H;
      const T* c_prev = t == 0 ? c0 : cs + prev * H;
      if (hp > 0) cpu::gemm<T>(h_prev, w.data(), scratch.data(), bt, 4 * hp, H, false, true, false);
      for (std::int64_t r = 0; r < bt && hp > 0; ++r) {
        T* g = gates + (off + r) * 4 * H + j0;
        const T* s = scratch.data() + r * 4 * hp;
        ArrayMap<T> i(g, hp), f(g + H, hp), a(g + 2 * H, hp), o(g + 3 * H, hp);
        i = T(1) / (T(1) + (-(i + ConstArrayMap<T>(s, hp))).exp());
        f = T(1) / (T(1) + (-(f + ConstArrayMap<T>(s + hp, hp))).exp());
        a = (a + ConstArrayMap<T>(s + 2 * hp, hp)).tanh();
        o = T(1) / (T(1) + (-(o + ConstArrayMap<T>(s + 3 * hp, hp))).exp());
        ArrayMap<T> c(cs + (off + r) * H + j0, hp), h(hs + (off + r) * H + j0, hp);
        c = f * ConstArrayMap<T>(c_prev + r * H + j0, hp) + i * a;
        h = o * c.tanh();
      }
      prev = off;
      off += bt;
      // The next step reads every thread's h_t.
      if (t + 1 < batch_sizes.size() && !barrier.wait()) return;
    }
  });
}

template <typename T>
void backward_team(const std::vector<std::int64_t>& batch_sizes, int threads, const T* act, const T* cs, const T* c0,
                   const T* wh, const T* ghs, T* dh, T* dc, T* ggates, std::int64_t H) {
  std::vector<std::int64_t> offsets(batch_sizes.size(), 0);
  for (std::size_t t = 1; t < batch_sizes.size(); ++t) offsets[t] = offsets[t - 1] + batch_sizes[t - 1];
  run_team(threads, [&](int p, int team, SpinBarrier& barrier) {
    const std::int64_t j0 = units_begin(H, p, team), hp = units_begin(H, p + 1, team) - j0;
    // This thread's columns of wh: [4H, hp].
    std::vector<T> w(static_cast<std::size_t>(4 * H * hp));
    for (std::int64_t k = 0; k < 4 * H; ++k) std::copy(wh + k * H + j0, wh + k * H + j0 + hp, w.data() + k * hp);
    std::vector<T> tc(static_cast<std::size_t>(hp)), gct(static_cast<std::size_t>(hp));
    for (std::size_t step = batch_sizes.size(); step-- > 0;) {
      const std::int64_t bt = batch_sizes[step], off = offsets[step];
      const T* c_prev = step == 0 ? c0 : cs + offsets[step - 1] * H;
      for (std::int64_t r = 0; r < bt && hp > 0; ++r) {
        ArrayMap<T> dh_r(dh + r * H + j0, hp), dc_r(dc + r * H + j0, hp);
        dh_r += ConstArrayMap<T>(ghs + (off + r) * H + j0, hp);
        const T* g = act + (off + r) * 4 * H + j0;
        ConstArrayMap<T> i(g, hp), f(g + H, hp), a(g + 2 * H, hp), o(g + 3 * H, hp);
        ConstArrayMap<T> cp(c_prev + r * H + j0, hp), c(cs + (off + r) * H + j0, hp);
        ArrayMap<T> tanh_c(tc.data(), hp), total(gct.data(), hp);
        tanh_c = c.tanh();
        // The whole gradient of c: its own, and through h = o * tanh(c).
        total = dc_r + dh_r * o * (T(1) - tanh_c.square());
        T* gg = ggates + (off + r) * 4 * H + j0;
        ArrayMap<T>(gg, hp) = total * a * i * (T(1) - i);
        ArrayMap<T>(gg + H, hp) = total * cp * f * (T(1) - f);
        ArrayMap<T>(gg + 2 * H, hp) = total * i * (T(1) - a.square());
        ArrayMap<T>(gg + 3 * H, hp) = dh_r * tanh_c * o * (T(1) - o);
        dc_r = total * f;
      }
      // The product reads every thread's ggates_t.
      if (!barrier.wait()) return;
      if (hp > 0) cpu::gemm<T>(ggates + off * 4 * H, w.data(), dh + j0, bt, hp, 4 * H, false, false, false, H);
    }
  });
}

}  // namespace

bool CpuBackend::lstm_recurrence_forward(const std::vector<std::int64_t>& batch_sizes, Tensor& gates, const Tensor& wh,
                                         const Tensor& h0, const Tensor& c0, Tensor& hs, Tensor& cs) {
  const std::int64_t H = wh.size(1);
  const int threads = team_size(batch_sizes, H, gates.dtype());
  if (threads == 0) return false;
  TANDEM_DISPATCH_FLOAT(gates.dtype(), "lstm_recurrence_forward", [&] {
    using T = scalar_t;
    forward_team<T>(batch_sizes, threads, gates.data<T>(), wh.data<T>(), h0.data<T>(), c0.data<T>(), hs.data<T>(),
                    cs.data<T>(), H);
  });
  return true;
}

bool CpuBackend::lstm_recurrence_backward(const std::vector<std::int64_t>& batch_sizes, const Tensor& activations,
                                          const Tensor& cs, const Tensor& c0, const Tensor& wh, const Tensor& ghs,
                                          Tensor& dh, Tensor& dc, Tensor& ggates) {
  const std::int64_t H = wh.size(1);
  const int threads = team_size(batch_sizes, H, activations.dtype());
  if (threads == 0) return false;
  TANDEM_DISPATCH_FLOAT(activations.dtype(), "lstm_recurrence_backward", [&] {
    using T = scalar_t;
    backward_team<T>(batch_sizes, threads, activations.data<T>(), cs.data<T>(), c0.data<T>(), wh.data<T>(),
                     ghs.data<T>(), dh.data<T>(), dc.data<T>(), ggates.data<T>(), H);
  });
  return true;
}

}  // namespace tandem
