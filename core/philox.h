// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. Random number i of a stream is a pure function of (seed, i), so every
// element of a tensor is drawn independently, in parallel, on any device, and the CPU and the
// GPU produce the same bits. Dropout masks are drawn this way (Backend::random_uniform).
//
// Header-only and free of CUDA: the CUDA kernels include it too (the functions are
// TANDEM_HOST_DEVICE, core/host_device.h).
#pragma once

#include <math.h>

#include <cstdint>

#include "core/host_device.h"

namespace tandem {
namespace philox {

struct Block {
  std::uint32_t v[4];
};

// The ten rounds of Philox4x32 on `counter` under `key`.
TANDEM_HOST_DEVICE inline Block philox4x32_10(Block counter, std::uint32_t key0, std::uint32_t key1) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * counter.v[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * counter.v[2];
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    counter = Block{{hi1 ^ counter.v[1] ^ key0, lo1, hi0 ^ counter.v[3] ^ key1, lo0}};
  }
  return counter;
}

// The block holding the bits of element `index` of stream `seed`: the counter is the block
// number, the key the seed.
TANDEM_HOST_DEVICE inline Block block(std::uint64_t seed, std::uint64_t block_index) {
  return philox4x32_10(Block{{static_cast<std::uint32_t>(block_index), static_cast<std::uint32_t>(block_index >> 32), 0u, 0u}},
                       static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// Element `index` of a uniform stream on [low, high): 53 bits from two 32-bit lanes (two
// elements per block), mapped by one explicit fused multiply-add in double, so that no compiler
// contracts it differently on either side. f32 rounds that double, so a stream drawn in f32 is
// the f64 stream rounded (dropout in f32 and f64 keeps the same elements); a value that rounds up
// to `high` is pulled back below it.
TANDEM_HOST_DEVICE inline double uniform_f64(std::uint64_t seed, std::uint64_t index, double low, double high) {
  const Block b = block(seed, index / 2);
  const std::uint32_t a = b.v[2 * (index % 2)] >> 5, c = b.v[2 * (index % 2) + 1] >> 6;
  const double unit = (static_cast<double>(a) * 67108864.0 + static_cast<double>(c)) * (1.0 / 9007199254740992.0);
  return fma(high - low, unit, low);
}

TANDEM_HOST_DEVICE inline float uniform_f32(std::uint64_t seed, std::uint64_t index, double low, double high) {
  const float value = static_cast<float>(uniform_f64(seed, index, low, high));
  const float top = static_cast<float>(high);
  return value >= top && top > static_cast<float>(low) ? nextafterf(top, static_cast<float>(low)) : value;
}

}  // namespace philox
}  // namespace tandem
