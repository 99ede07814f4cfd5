// Index arithmetic of the per-channel CUDA kernels (batch normalisation, cuda/normalization.cu),
// over x viewed as [outer, channels, inner]. Position j in [0, outer * inner) of channel c is the
// element (j / inner, c, j % inner), at flat offset ((j / inner) * channels + c) * inner + j % inner.
// Plain C++ (TANDEM_HOST_DEVICE), so that the same code can be checked on the host without a GPU.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace tandem {
namespace cuda {

// Walks the positions start, start + step, start + 2 * step, ... of one channel and yields their
// flat offsets without a division per step: a step of `step` positions is `step / inner` whole
// outer rows plus `step % inner` inner positions, with at most one carry into the outer index.
// Requires inner > 0 (there is no position to walk otherwise) and step > 0.
struct ChannelWalk {
  std::int64_t channel, channels, inner;
  std::int64_t step_outer, step_inner;  // the step, split like a position
  std::int64_t outer_index, inner_index;  // the current position, split

  TANDEM_HOST_DEVICE ChannelWalk(std::int64_t channel_, std::int64_t channels_, std::int64_t inner_,
                                 std::int64_t start, std::int64_t step)
      : channel(channel_),
        channels(channels_),
        inner(inner_),
        step_outer(step / inner_),
        step_inner(step % inner_),
        outer_index(start / inner_),
        inner_index(start % inner_) {}

  TANDEM_HOST_DEVICE std::int64_t offset() const { return (outer_index * channels + channel) * inner + inner_index; }

  TANDEM_HOST_DEVICE void advance() {
    outer_index += step_outer;
    inner_index += step_inner;  // < 2 * inner: both summands are < inner
    if (inner_index >= inner) {
      inner_index -= inner;
      ++outer_index;
    }
  }
};

// How the per-channel sums are split over blocks: each channel's `count` positions are cut into
// `chunks` consecutive chunks of `chunk_size` positions (the last may be shorter), one block per
// (channel, chunk). The split depends only on the shape, never on the GPU, so that the order of
// additions (and hence every rounding) is the same on every device.
struct ChannelChunks {
  std::int64_t chunks = 0;      // per channel; 0 when count == 0
  std::int64_t chunk_size = 0;  // positions per chunk
};

// About kChannelTargetBlocks blocks in all (enough to fill any current GPU several times over),
// but no chunk below kChannelMinChunk positions unless the whole channel is shorter (a block of
// 256 threads then adds at least 16 terms per thread).
constexpr std::int64_t kChannelTargetBlocks = 1024;
constexpr std::int64_t kChannelMinChunk = 4096;

TANDEM_HOST_DEVICE inline ChannelChunks plan_channel_chunks(std::int64_t channels, std::int64_t count) {
  ChannelChunks plan;
  if (channels <= 0 || count <= 0) return plan;
  std::int64_t chunks = (kChannelTargetBlocks + channels - 1) / channels;
  const std::int64_t by_size = count / kChannelMinChunk;  // chunks of at least kChannelMinChunk
  if (chunks > by_size) chunks = by_size;
  if (chunks < 1) chunks = 1;
  plan.chunk_size = (count + chunks - 1) / chunks;
  // Rounding the size up may leave trailing chunks empty: drop them.
  plan.chunks = (count + plan.chunk_size - 1) / plan.chunk_size;
  return plan;
}

// The channel of flat element `flat` of [outer, channels, inner] (Index: a 32-bit type when every
// flat index fits, for cheaper division).
template <typename Index>
TANDEM_HOST_DEVICE inline Index channel_of(Index flat, Index channels, Index inner) {
  return (flat / inner) % channels;
}

}  // namespace cuda
}  // namespace tandem
