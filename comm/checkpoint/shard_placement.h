// Where a rank's piece of a tensor sits in the whole (global) tensor, and the copies between
// two pieces: what lets a checkpoint written under one layout load under another.
//
// A piece is a box of the global tensor (an offset and an extent per axis: a tensor-parallel
// rank's rows or columns) and, within the box, a range of elements in row-major order (a ZeRO
// rank's slice of a flattened parameter; the whole box otherwise). Its elements are stored
// back to back in that order. Any two pieces of one tensor share a set of elements that
// for_each_shared_run lists as runs that are contiguous in both.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/shape.h"

namespace tandem {

struct ShardPlacement {
  Shape global;                       // the whole tensor's shape
  std::vector<std::int64_t> offsets;  // the box's first element, per axis
  Shape box;                          // the box's extents
  std::int64_t begin = 0, end = 0;    // elements [begin, end) of the box, row-major

  std::int64_t numel() const { return end - begin; }
  // "[0:4, 8:16][0:16]" (the box, then the range of its elements when not the whole box).
  std::string str() const;
  // The whole tensor as one piece.
  static ShardPlacement whole(const Shape& global);
  // Errors (naming `what`): the box outside the tensor, the range outside the box.
  void check(const std::string& what) const;
};

// Calls run(from, to, count) for every run of elements that `source` and `target` share:
// elements from .. from + count of source's stored elements are to .. to + count of target's.
// Both must be pieces of tensors of the same global shape.
void for_each_shared_run(const ShardPlacement& source, const ShardPlacement& target,
                         const std::function<void(std::int64_t from, std::int64_t to, std::int64_t count)>& run);

// Copies the shared elements of source's data into target's data (element_size bytes each).
// Returns how many elements it copied.
std::int64_t copy_shared(const ShardPlacement& source, const void* source_data, const ShardPlacement& target,
                         void* target_data, std::size_t element_size);

}  // namespace tandem
