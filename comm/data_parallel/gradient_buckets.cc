#include "comm/data_parallel/gradient_buckets.h"

#include <algorithm>

#include "core/error.h"
#include "core/hash.h"

namespace tandem {

namespace {
std::string owner(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}
}  // namespace

std::int64_t exact_integers(DType dtype) {
  if (dtype == DType::bf16) return std::int64_t(1) << 8;
  if (dtype == DType::f16) return std::int64_t(1) << 11;
  if (dtype == DType::f32) return std::int64_t(1) << 24;
  return std::int64_t(1) << 53;
}

std::int64_t census_step_modulus(DType dtype) {
  return std::min<std::int64_t>(std::int64_t(1) << 20, exact_integers(dtype) - 1);
}

GradientPlan::GradientPlan(NamedParams params, double bucket_mb, bool sharded, int ranks, bool by_link,
                           std::optional<DType> wire)
    : params_(std::move(params)), bucket_of_(params_.size()), ranks_(ranks) {
  // The dtype a parameter's gradient travels in.
  const auto wire_of = [&](DType dtype) { return wire && is_floating(dtype) ? *wire : dtype; };
  const double limit = bucket_mb > 0 ? bucket_mb * 1024 * 1024 : 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    index_of_[params_[i].first] = i;
    const Variable& p = params_[i].second;
    // A census index (1 + a parameter's place) stays exact in the bucket's dtype.
    const DType travels = wire_of(p.dtype());
    bool fits = !buckets_.empty() && buckets_.back().dtype == p.dtype() &&
                static_cast<std::int64_t>(buckets_.back().params.size()) + 1 < exact_integers(travels);
    TANDEM_CHECK(!is_floating(travels) || ranks < exact_integers(travels),
                 "create_multi_node_optimizer: ", dtype_name(travels), " gradients ('", params_[i].first,
                 "') are averaged with a census that ", dtype_name(travels), " counts exactly up to ",
                 exact_integers(travels), " ranks; this run has ", ranks);
    if (fits && by_link) {
      fits = owner(params_[buckets_.back().params.back()].first) == owner(params_[i].first);
    } else if (fits) {
      fits = limit == 0 || double(buckets_.back().numel) * dtype_size(p.dtype()) < limit;
    }
    if (!fits) {
      buckets_.emplace_back();
      buckets_.back().dtype = p.dtype();
      buckets_.back().wire = travels;
    }
    GradientBucket& b = buckets_.back();
    b.params.push_back(i);
    b.offsets.push_back(b.numel);
    b.numel += p.numel();
    bucket_of_[i] = buckets_.size() - 1;
  }
  for (GradientBucket& b : buckets_) {
    b.stripes = sharded ? ranks : 1;
    b.stripe_data = (b.numel + b.stripes - 1) / b.stripes;
    b.tail = static_cast<std::int64_t>(b.params.size()) + 2 * ranks;
    Fnv1a64 h;
    for (std::size_t i : b.params) {
      h.bytes(params_[i].first);
      h.mix(static_cast<std::uint64_t>(params_[i].second.dtype()) + 256);
      for (std::int64_t extent : params_[i].second.shape()) h.mix(static_cast<std::uint64_t>(extent));
      h.mix(0xffff);
    }
    h.mix(static_cast<std::uint64_t>(b.stripes));
    h.mix(static_cast<std::uint64_t>(b.wire) + 512);
    b.digest = h.digest();
  }
}

bool GradientPlan::matches(const NamedParams& now) const {
  // The plan keeps its own order (reverse registration, or the order gradients became ready:
  // data_parallel_optimizer.cc); names are unique within a link's namedparams().
  if (now.size() != params_.size()) return false;
  for (const auto& [name, theirs] : now) {
    const auto it = index_of_.find(name);
    if (it == index_of_.end()) return false;
    const Variable& mine = params_[it->second].second;
    if (!mine.same_as(theirs) || mine.shape() != theirs.shape() || mine.dtype() != theirs.dtype()) return false;
  }
  return true;
}

std::vector<StripePiece> GradientPlan::stripe_pieces(const GradientBucket& bucket, std::int64_t s) const {
  std::vector<StripePiece> pieces;
  const std::int64_t lo = s * bucket.stripe_data, hi = std::min(bucket.numel, lo + bucket.stripe_data);
  for (std::size_t k = 0; k < bucket.params.size(); ++k) {
    const std::int64_t first = bucket.offsets[k];
    const std::int64_t last = first + params_[bucket.params[k]].second.numel();
    const std::int64_t a = std::max(first, lo), b = std::min(last, hi);
    if (a < b) pieces.push_back(StripePiece{bucket.params[k], a - first, b - first, a - lo});
  }
  return pieces;
}

}  // namespace tandem
