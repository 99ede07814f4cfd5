// Attention dropout's random numbers (core/ops/attention.h): one uniform number per attention
// weight, a pure function of (seed, batch row, global head, query position, key position), so that
// backward redraws forward's mask without storing it, tiles of any size draw the same numbers, and
// a sequence split over ranks (context parallelism) or heads split over ranks (tensor parallelism)
// draws what one process draws. Header-only and TANDEM_HOST_DEVICE, for device kernels too.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "core/philox.h"

namespace tandem {

// Philox4x32-10 with the seed as key and the counter (key position / 2, query position, head,
// batch row): two numbers per block (key positions 2s and 2s + 1), 53 bits each, on [0, 1) as
// philox::uniform_f64 maps them.
TANDEM_HOST_DEVICE inline double attention_dropout_uniform(std::uint64_t seed, std::int64_t batch, std::int64_t head,
                                                           std::int64_t query_position, std::int64_t key_position) {
  const philox::Block counter{{static_cast<std::uint32_t>(key_position / 2), static_cast<std::uint32_t>(query_position),
                               static_cast<std::uint32_t>(head), static_cast<std::uint32_t>(batch)}};
  const philox::Block b =
      philox::philox4x32_10(counter, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  const int lane = static_cast<int>(key_position % 2);
  const std::uint32_t a = b.v[2 * lane] >> 5, c = b.v[2 * lane + 1] >> 6;
  return (static_cast<double>(a) * 67108864.0 + static_cast<double>(c)) * (1.0 / 9007199254740992.0);
}

}  // namespace tandem
