// The layout of a data-parallel step's gradient traffic: parameters in buckets, and each
// bucket's flat buffer as the collective moves it.
//
// A bucket holds consecutive parameters of one dtype. Its flat buffer is `stripes` stripes (one
// per rank when sharded, else one), each `stripe_data` gradient elements (the bucket's
// parameters back to back, split evenly; the last stripe padded with zeros) followed by a tail
// that every rank fills the same way and the sum makes a census:
//   [presence of each parameter here (1/0)] [per rank: 1 + step mod census_step_modulus if it
//   ran backward] [per rank: 1 + index in the bucket of its first NaN/Inf gradient under
//   check_finite]
// Every stripe carries the tail, so that a reduce-scatter gives each rank the whole census. Its
// numbers must be exact in the buffer's dtype (the wire's): bf16 holds the integers up to 256 only, f16 up to
// 2048, so a 16-bit bucket holds fewer parameters than that, its step counts modulo 255 (2047),
// and a 16-bit gradient needs fewer ranks than that.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/data_parallel/data_parallel.h"

namespace tandem {

struct GradientBucket {
  DType dtype = DType::f32;            // its parameters' and gradients'
  DType wire = DType::f32;             // its flat buffer's: dtype, or allreduce_grad_dtype
  std::vector<std::size_t> params;     // indices into the plan's parameter list
  std::vector<std::int64_t> offsets;   // each parameter's first element in the bucket
  std::int64_t numel = 0;              // gradient elements (unpadded)
  std::int64_t stripes = 1;
  std::int64_t stripe_data = 0;        // gradient elements per stripe
  std::int64_t tail = 0;               // census elements per stripe
  std::uint64_t digest = 0;            // names, dtypes, shapes and layout: the header's
  std::int64_t stripe_size() const { return stripe_data + tail; }
  std::int64_t flat_size() const { return stripes * stripe_size(); }
};

// Every integer in [0, exact_integers(dtype)] is exact in the floating dtype (2^8 for bf16, 2^11
// for f16, 2^24 for f32, 2^53 for f64).
std::int64_t exact_integers(DType dtype);
// The census counts steps modulo this for a bucket of `dtype`: 2^20, or less where the dtype
// cannot hold it.
std::int64_t census_step_modulus(DType dtype);

// A piece of a parameter inside one stripe of a bucket: elements [begin, end) of the
// parameter, at `at` in the stripe's gradient elements.
struct StripePiece {
  std::size_t param;  // index into the plan's parameter list
  std::int64_t begin, end, at;
};

class GradientPlan {
 public:
  // params in the order the buckets take them; ranks: the communicator's size. by_link: one
  // bucket per link (the parameters whose paths share everything up to the last '/') and dtype,
  // whatever its size (zero = 3 gathers and frees a link's parameters together).
  // wire: the dtype every floating bucket travels in (allreduce_grad_dtype); none: its own.
  GradientPlan(NamedParams params, double bucket_mb, bool sharded, int ranks, bool by_link = false,
               std::optional<DType> wire = std::nullopt);

  const NamedParams& params() const { return params_; }
  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // Which bucket a parameter is in.
  std::size_t bucket_of(std::size_t param) const { return bucket_of_[param]; }
  // Whether `now` (a link's namedparams()) has the same names, shapes and dtypes as this plan,
  // in any order.
  bool matches(const NamedParams& now) const;
  // The pieces of the bucket's parameters that fall in stripe s.
  std::vector<StripePiece> stripe_pieces(const GradientBucket& bucket, std::int64_t s) const;
  int ranks() const { return ranks_; }

 private:
  NamedParams params_;
  std::vector<GradientBucket> buckets_;
  std::vector<std::size_t> bucket_of_;
  std::unordered_map<std::string, std::size_t> index_of_;  // by name
  int ranks_;
};

}  // namespace tandem
