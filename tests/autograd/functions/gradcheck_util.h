// Helpers shared by the function tests: seeded f64 inputs, a gradcheck assertion that prints
// the checker's report on failure, and element-wise comparisons of tensors.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "core/ops.h"

// Runs tandem::gradcheck(fn, inputs[, options]) and fails the test with the checker's report.
// Variadic so that braces with commas ({a, b}) pass through the preprocessor.
#define REQUIRE_GRADCHECK(...)                                       \
  do {                                                               \
    const ::tandem::GradcheckResult gc_result_ = ::tandem::gradcheck(__VA_ARGS__); \
    INFO("gradcheck report:\n" << gc_result_.report);                \
    REQUIRE(gc_result_.ok);                                          \
  } while (0)

// REQUIRE_NEAR_VALUES(tensor, {expected...}, tol): every element within tol (absolute) plus
// tol relative.
#define REQUIRE_NEAR_VALUES(tensor, ...)                                                    \
  do {                                                                                      \
    const std::string gc_mismatch_ = ::gc_util::mismatch((tensor), __VA_ARGS__);            \
    INFO(gc_mismatch_);                                                                     \
    REQUIRE(gc_mismatch_.empty());                                                          \
  } while (0)

namespace gc_util {

using tandem::DType;
using tandem::Shape;
using tandem::Tensor;
using tandem::Variable;
using tandem::Variables;

// Uniform in [low, high), from its own seeded generator.
inline Tensor uniform(const Shape& shape, std::uint64_t seed, double low = -1, double high = 1,
                      DType dtype = DType::f64) {
  tandem::Generator generator(seed);
  return tandem::rand_uniform(shape, generator, low, high, dtype);
}

// Magnitudes in [low, high) with random signs: keeps inputs away from kinks and poles at 0
// (relu, leaky_relu, division, reciprocal) so central differences never straddle them.
inline Tensor away_from_zero(const Shape& shape, std::uint64_t seed, double low = 0.2, double high = 1.5,
                             DType dtype = DType::f64) {
  tandem::Generator generator(seed);
  const std::int64_t n = tandem::shape_numel(shape);
  std::vector<double> values(static_cast<std::size_t>(n));
  for (double& v : values) {
    const double magnitude = generator.uniform(low, high);
    v = generator.uniform(0, 1) < 0.5 ? -magnitude : magnitude;
  }
  return tandem::from_vector<double>(values, shape).to(dtype);
}

inline Tensor f64(const std::vector<double>& values, const Shape& shape) {
  return tandem::from_vector<double>(values, shape);
}

inline Tensor i32(const std::vector<std::int32_t>& values, const Shape& shape) {
  return tandem::from_vector<std::int32_t>(values, shape);
}

inline Tensor i64(const std::vector<std::int64_t>& values, const Shape& shape) {
  return tandem::from_vector<std::int64_t>(values, shape);
}

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Empty when every element of `got` is within tol * (1 + |want|) of `want`; otherwise a
// description of the first mismatch.
inline std::string mismatch(const Tensor& got, const std::vector<double>& want, double tol = 1e-12) {
  std::ostringstream out;
  if (!got.defined()) return "tensor is undefined";
  const std::vector<double> g = got.to_vector<double>();
  if (g.size() != want.size()) {
    out << "got " << g.size() << " elements (" << got.description() << "), want " << want.size();
    return out.str();
  }
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!(std::abs(g[i] - want[i]) <= tol * (1 + std::abs(want[i])))) {
      out << "element " << i << ": got " << g[i] << ", want " << want[i] << " (" << got.description() << ")";
      return out.str();
    }
  }
  return "";
}

inline std::string mismatch(const Tensor& got, const Tensor& want, double tol = 1e-12) {
  if (got.defined() && want.defined() && got.shape() != want.shape())
    return "shape " + tandem::shape_str(got.shape()) + " vs " + tandem::shape_str(want.shape());
  return mismatch(got, want.to_vector<double>(), tol);
}

// Relative agreement of an f32 result with the f64 one: |a - b| <= rtol * max(|b|, floor).
// The floor keeps elements that are (near) zero in f64 from demanding impossible precision.
inline std::string relative_mismatch(const Tensor& f32_result, const Tensor& f64_result, double rtol = 1e-5,
                                     double floor = 1.0) {
  if (f32_result.shape() != f64_result.shape())
    return "shape " + tandem::shape_str(f32_result.shape()) + " vs " + tandem::shape_str(f64_result.shape());
  const std::vector<double> a = f32_result.to_vector<double>();
  const std::vector<double> b = f64_result.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!(std::abs(a[i] - b[i]) <= rtol * std::max(std::abs(b[i]), floor))) {
      std::ostringstream out;
      out << "element " << i << ": f32 " << a[i] << " vs f64 " << b[i];
      return out.str();
    }
  }
  return "";
}

// f32 sanity check: runs fn on the inputs in f32 and in f64 (integer inputs as they are), seeds
// every floating output with the same fixed random weights, backpropagates, and requires the
// f32 outputs and input gradients to agree with the f64 ones within 1e-5 relative.
inline void check_f32_against_f64(const tandem::GradcheckFunction& fn, const std::vector<Tensor>& inputs,
                                  std::uint64_t seed = 7);

}  // namespace gc_util

#define REQUIRE_F32_MATCHES_F64(f32_tensor, f64_tensor)                                         \
  do {                                                                                          \
    const std::string gc_rel_ = ::gc_util::relative_mismatch((f32_tensor), (f64_tensor));       \
    INFO(gc_rel_);                                                                              \
    REQUIRE(gc_rel_.empty());                                                                   \
  } while (0)

inline void gc_util::check_f32_against_f64(const tandem::GradcheckFunction& fn, const std::vector<Tensor>& inputs,
                                           std::uint64_t seed) {
  std::vector<Variables> leaves(2), outputs(2);
  const DType dtypes[2] = {DType::f32, DType::f64};
  for (int p = 0; p < 2; ++p) {
    for (const Tensor& input : inputs) {
      const bool floating = tandem::is_floating(input.dtype());
      leaves[p].emplace_back(floating ? input.to(dtypes[p]).clone() : input, floating);
    }
    outputs[p] = fn(leaves[p]);
    tandem::Generator generator(seed);
    Variables roots;
    std::vector<Tensor> seeds;
    for (const Variable& y : outputs[p]) {
      REQUIRE(y.dtype() == dtypes[p]);
      const Tensor w = tandem::rand_uniform(y.shape(), generator, -1, 1, DType::f64);
      if (!y.requires_grad()) continue;
      roots.push_back(y);
      seeds.push_back(w.to(dtypes[p]));
    }
    if (!roots.empty()) tandem::backward(roots, seeds);
  }
  REQUIRE(outputs[0].size() == outputs[1].size());
  for (std::size_t k = 0; k < outputs[0].size(); ++k) {
    INFO("output " << k);
    REQUIRE_F32_MATCHES_F64(outputs[0][k].data(), outputs[1][k].data());
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!tandem::is_floating(inputs[i].dtype())) continue;
    INFO("gradient of input " << i);
    REQUIRE(leaves[0][i].grad().defined() == leaves[1][i].grad().defined());
    if (!leaves[1][i].grad().defined()) continue;
    REQUIRE(leaves[0][i].grad().dtype() == DType::f32);
    REQUIRE_F32_MATCHES_F64(leaves[0][i].grad(), leaves[1][i].grad());
  }
}
