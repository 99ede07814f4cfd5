// The host-side arithmetic of cuDNN's benchmark mode (cuda::set_cudnn_benchmark, cuda/conv.cu):
// a candidate's time is the median of its timed runs, and the candidates are taken fastest
// first. Plain C++ without CUDA, so that tests/cuda checks it on any machine.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace tandem {
namespace cuda {

// The time of a candidate that could not be timed (its workspace did not fit, cuDNN refused it).
constexpr double kNotTimed = -1;

// Whether `ms` is a measured time (finite and >= 0), not kNotTimed or a NaN.
inline bool was_timed(double ms) { return std::isfinite(ms) && ms >= 0; }

// The median of `samples` (the mean of the middle two for an even count); kNotTimed when there
// are none. The median rather than the mean, so that one run slowed by something else on the
// device (a clock ramping up, another process) does not decide the choice.
inline double median_ms(std::vector<double> samples) {
  if (samples.empty()) return kNotTimed;
  std::sort(samples.begin(), samples.end());
  const std::size_t mid = samples.size() / 2;
  return samples.size() % 2 == 1 ? samples[mid] : (samples[mid - 1] + samples[mid]) / 2;
}

// The indices of the candidates that were timed, fastest first. Equal times keep the ranking
// order (cuDNN's heuristics first), so that a tie never depends on how the sort breaks it.
inline std::vector<std::size_t> fastest_first(const std::vector<double>& ms) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < ms.size(); ++i)
    if (was_timed(ms[i])) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ms[a] < ms[b]; });
  return order;
}

}  // namespace cuda
}  // namespace tandem
