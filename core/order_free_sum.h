// A sum of arrays whose result does not depend on the order of its terms, nor on how they were
// grouped (partial sums on several threads or ranks, combined in any order): deterministic
// mode's gradient sum (core/deterministic.h).
//
// How: every term is cut into slices along a fixed grid of binary exponents (level L holds the
// bits worth 2^(L*W) to 2^((L+1)*W), W = kLevelBits), and each element keeps the exact integer
// sums of the slices at the kLevels highest levels any of its terms reached. Integer sums are
// exact in any order; the highest level is a maximum, also order-free; bits below the lowest
// kept level are dropped from every term alike. So the state after any set of terms is one
// function of that set. Merging two sums (or ranks' sums: max of levels, then a plain sum of the
// aligned slices, exact as well) is the same as adding all their terms to one.
//
// Accuracy: every term is kept to at least (kLevels - 1) * W bits below the largest term of its
// element (40 bits: finer than a float's 24); exact while an element has fewer than 2^33 terms.
// NaN and infinities: an element that received one is their IEEE sum (NaN, or an infinity).
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {

class OrderFreeSum {
 public:
  static constexpr int kLevels = 3;
  static constexpr int kLevelBits = 20;
  // The level of an element that has no nonzero term yet; of one that received a NaN or infinity.
  static constexpr std::int16_t kEmpty = INT16_MIN;
  static constexpr std::int16_t kNonFinite = INT16_MAX;

  OrderFreeSum() = default;
  explicit OrderFreeSum(std::int64_t size);

  std::int64_t size() const { return static_cast<std::int64_t>(top_.size()); }
  // Back to no terms.
  void clear();

  // Adds one term: size() values.
  void add(const float* values);
  void add(const double* values);
  // Starts again from one term (clear() and add() in one pass).
  void assign(const float* values);
  void assign(const double* values);
  // Adds all of `other`'s terms (the same size).
  void merge(const OrderFreeSum& other);

  // The sum times `scale`, rounded to the output's type (deterministically: the same state and
  // scale give the same bits).
  void round_to(float* out, double scale = 1.0) const;
  void round_to(double* out, double scale = 1.0) const;

  // For combining sums over processes (comm/data_parallel/order_free_allreduce.h): each
  // element's top level; align_to(levels), levels[i] >= top()[i] (their maximum over the ranks),
  // puts every rank's slices at the same levels, and then the ranks' slices() add exactly,
  // element by element, in any order (an allreduce), into the sum of all their terms.
  const std::vector<std::int16_t>& top() const { return top_; }
  void align_to(const std::vector<std::int16_t>& levels);
  std::vector<double>& slices() { return slices_; }
  const std::vector<double>& slices() const { return slices_; }

 private:
  double* element(std::int64_t i) { return &slices_[static_cast<std::size_t>(i) * kLevels]; }
  const double* element(std::int64_t i) const { return &slices_[static_cast<std::size_t>(i) * kLevels]; }
  void add_one(std::int64_t i, double x);
  void raise_to(std::int64_t i, std::int16_t level);

  std::vector<std::int16_t> top_;
  // Element-major: element i's level top_[i] - k sum at slices_[i * kLevels + k].
  std::vector<double> slices_;
};

}  // namespace tandem
