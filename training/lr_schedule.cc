#include "training/lr_schedule.h"

#include <cmath>

#include "core/error.h"

namespace tandem {

double warmup_cosine(std::int64_t step, std::int64_t warmup, std::int64_t total, double min_ratio) {
  TANDEM_CHECK(warmup >= 0 && total > warmup && min_ratio >= 0 && min_ratio <= 1, "warmup_cosine: needs 0 <= warmup ",
               warmup, " < total ", total, " and min_ratio ", min_ratio, " in [0, 1]");
  if (step < warmup) return static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total) return min_ratio;
  const double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
  return min_ratio + 0.5 * (1.0 - min_ratio) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace tandem
