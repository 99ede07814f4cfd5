#include "comm/checkpoint/shard_placement.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "core/error.h"

namespace tandem {

namespace {

// The number of elements; INT64_MAX when that overflows (a box read from a damaged manifest,
// named in an error before it is rejected).
std::int64_t product(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t e : shape)
    if (__builtin_mul_overflow(n, e, &n)) return INT64_MAX;
  return n;
}

}  // namespace

ShardPlacement ShardPlacement::whole(const Shape& global) {
  ShardPlacement p;
  p.global = global;
  p.offsets.assign(global.size(), 0);
  p.box = global;
  p.begin = 0;
  p.end = product(global);
  return p;
}

std::string ShardPlacement::str() const {
  std::ostringstream out;
  out << "[";
  for (std::size_t a = 0; a < box.size(); ++a) out << (a ? ", " : "") << offsets[a] << ":" << offsets[a] + box[a];
  out << "]";
  if (begin != 0 || end != product(box)) out << "[" << begin << ":" << end << "]";
  return out.str();
}

void ShardPlacement::check(const std::string& what) const {
  TANDEM_CHECK(offsets.size() == global.size() && box.size() == global.size(), what, ": a piece of a tensor of shape ",
               global, " needs ", global.size(), " offsets and extents, got ", offsets.size(), " and ", box.size());
  for (std::size_t a = 0; a < global.size(); ++a)
    TANDEM_CHECK(offsets[a] >= 0 && box[a] >= 0 && offsets[a] + box[a] <= global[a], what, ": the piece ", str(),
                 " is outside the tensor of shape ", global, " on axis ", a);
  TANDEM_CHECK(0 <= begin && begin <= end && end <= product(box), what, ": elements [", begin, ", ", end,
               ") are outside the box ", box, " of ", product(box), " elements");
}

void for_each_shared_run(const ShardPlacement& source, const ShardPlacement& target,
                         const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& run) {
  TANDEM_CHECK(source.global == target.global, "for_each_shared_run: pieces of tensors of shapes ", source.global,
               " and ", target.global);
  // A scalar is one row of one element.
  const std::size_t axes = source.global.size();
  std::vector<std::int64_t> lo(axes), hi(axes);
  for (std::size_t a = 0; a < axes; ++a) {
    lo[a] = std::max(source.offsets[a], target.offsets[a]);
    hi[a] = std::min(source.offsets[a] + source.box[a], target.offsets[a] + target.box[a]);
    if (lo[a] >= hi[a]) return;  // the boxes do not meet
  }
  // Row-major strides of both boxes.
  std::vector<std::int64_t> source_stride(axes, 1), target_stride(axes, 1);
  for (std::size_t a = axes; a-- > 1;) {
    source_stride[a - 1] = source_stride[a] * source.box[a];
    target_stride[a - 1] = target_stride[a] * target.box[a];
  }
  const std::int64_t row = axes == 0 ? 1 : hi[axes - 1] - lo[axes - 1];
  // Every row of the intersection (all axes but the last), in order.
  std::vector<std::int64_t> at(lo);
  while (true) {
    std::int64_t s = 0, t = 0;
    for (std::size_t a = 0; a < axes; ++a) {
      s += (at[a] - source.offsets[a]) * source_stride[a];
      t += (at[a] - target.offsets[a]) * target_stride[a];
    }
    // Element j of the row is s + j of the source box and t + j of the target box; both must lie
    // in their piece's range.
    const std::int64_t first = std::max({std::int64_t(0), source.begin - s, target.begin - t});
    const std::int64_t last = std::min({row, source.end - s, target.end - t});
    if (first < last) run(s + first - source.begin, t + first - target.begin, last - first);
    // The next row: the last axis but one counts fastest.
    if (axes <= 1) return;
    std::size_t a = axes - 1;
    while (a-- > 0) {
      if (++at[a] < hi[a]) break;
      at[a] = lo[a];
      if (a == 0) return;
    }
  }
}

std::int64_t copy_shared(const ShardPlacement& source, const void* source_data, const ShardPlacement& target,
                         void* target_data, std::size_t element_size) {
  std::int64_t copied = 0;
  const auto* from = static_cast<const char*>(source_data);
  auto* to = static_cast<char*>(target_data);
  for_each_shared_run(source, target, [&](std::int64_t s, std::int64_t t, std::int64_t n) {
    std::memcpy(to + t * element_size, from + s * element_size, n * element_size);
    copied += n;
  });
  return copied;
}

}  // namespace tandem
