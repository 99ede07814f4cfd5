// The fused LSTM cell for the CPU backend: one pass over each row's four gate blocks, with
// Eigen's vectorised exp/tanh. Rows are independent and spread over threads.
#include <Eigen/Core>

#include "core/cpu/cpu_backend.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tandem {

namespace {

template <typename T>
using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
template <typename T>
using ArrayMap = Eigen::Map<Array<T>>;
template <typename T>
using ConstArrayMap = Eigen::Map<const Array<T>>;

// Work per row relative to one element-wise operation: four gates of transcendental math.
constexpr std::int64_t kCellCost = 32;

}  // namespace

void CpuBackend::lstm_cell_forward(Tensor& gates, const Tensor& c_prev, Tensor& c, Tensor& h) {
  const std::int64_t batch = c_prev.size(0), units = c_prev.size(1);
  if (batch == 0 || units == 0) return;
  TANDEM_DISPATCH_FLOAT(gates.dtype(), "lstm_cell_forward", [&] {
    using T = scalar_t;
    T* pg = gates.data<T>();
    const T* pcp = c_prev.data<T>();
    T* pc = c.data<T>();
    T* ph = h.data<T>();
    cpu::parallel_for(batch, units * kCellCost, cpu::kElementwiseGrain, [&](std::int64_t b0, std::int64_t b1) {
      for (std::int64_t b = b0; b < b1; ++b) {
        T* g = pg + b * 4 * units;
        ArrayMap<T> i(g, units), f(g + units, units), a(g + 2 * units, units), o(g + 3 * units, units);
        i = T(1) / (T(1) + (-i).exp());
        f = T(1) / (T(1) + (-f).exp());
        a = a.tanh();
        o = T(1) / (T(1) + (-o).exp());
        ConstArrayMap<T> cp(pcp + b * units, units);
        ArrayMap<T> cb(pc + b * units, units), hb(ph + b * units, units);
        cb = f * cp + i * a;
        hb = o * cb.tanh();
      }
    });
  });
}

void CpuBackend::lstm_cell_backward(const Tensor& activations, const Tensor& c_prev, const Tensor& c,
                                    const Tensor& gh, const Tensor& gc, Tensor& ggates, Tensor& gc_prev) {
  const std::int64_t batch = c_prev.size(0), units = c_prev.size(1);
  if (batch == 0 || units == 0) return;
  TANDEM_DISPATCH_FLOAT(activations.dtype(), "lstm_cell_backward", [&] {
    using T = scalar_t;
    const T* pact = activations.data<T>();
    const T* pcp = c_prev.data<T>();
    const T* pc = c.data<T>();
    const T* pgh = gh.data<T>();
    const T* pgc = gc.data<T>();
    T* pgg = ggates.data<T>();
    T* pgcp = gc_prev.data<T>();
    cpu::parallel_for(batch, units * kCellCost, cpu::kElementwiseGrain, [&](std::int64_t b0, std::int64_t b1) {
      Array<T> tc(units), gct(units);
      for (std::int64_t b = b0; b < b1; ++b) {
        const T* g = pact + b * 4 * units;
        ConstArrayMap<T> i(g, units), f(g + units, units), a(g + 2 * units, units), o(g + 3 * units, units);
        ConstArrayMap<T> cp(pcp + b * units, units), cb(pc + b * units, units);
        ConstArrayMap<T> dh(pgh + b * units, units), dc(pgc + b * units, units);
        tc = cb.tanh();
        // The total gradient of c: directly, and through h = o * tanh(c). Computed before
        // gc_prev is written, which may be the same memory as gc.
        gct = dc + dh * o * (T(1) - tc.square());
        T* gg = pgg + b * 4 * units;
        ArrayMap<T> gi(gg, units), gf(gg + units, units), ga(gg + 2 * units, units), go(gg + 3 * units, units);
        gi = gct * a * i * (T(1) - i);
        gf = gct * cp * f * (T(1) - f);
        ga = gct * i * (T(1) - a.square());
        go = dh * tc * o * (T(1) - o);
        ArrayMap<T>(pgcp + b * units, units) = gct * f;
      }
    });
  });
}

}  // namespace tandem
