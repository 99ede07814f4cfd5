// Learning-rate schedules as multipliers of the optimizer's base rate (Adam's eta, SGD's lr
// scaled by the caller), as a function of the number of updates done: a trainer sets the
// multiplier before each update from optimizer.t(), so a resumed run continues the schedule.
#pragma once

#include <cstdint>

namespace tandem {

// GPT-2's (and nanoGPT's, llm.c's) schedule: a linear warmup from 1/warmup to 1 over the first
// `warmup` updates, then a cosine decay from 1 to min_ratio at update `total`, min_ratio after.
// step counts updates done (0 for the first). warmup may be 0; total > warmup.
double warmup_cosine(std::int64_t step, std::int64_t warmup, std::int64_t total, double min_ratio);

}  // namespace tandem
