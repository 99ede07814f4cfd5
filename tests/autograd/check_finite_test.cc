// check_finite: NaN and Inf are reported where they first appear, in forward and in backward,
// naming the function; nothing is checked while it is off.
#include <catch2/catch.hpp>

#include <limits>

#include "autograd/check_finite.h"
#include "autograd/functions.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;

namespace {

// Switches the check on for one test and off again, whatever happens.
struct CheckFiniteOn {
  CheckFiniteOn() { set_check_finite(true); }
  ~CheckFiniteOn() { set_check_finite(false); }
};

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

TEST_CASE("first_nonfinite names the first NaN or Inf and where it is") {
  REQUIRE(first_nonfinite(from_vector<float>({1, 2, 3}, {3})).empty());
  REQUIRE(first_nonfinite(from_vector<std::int32_t>({1, 2}, {2})).empty());  // integers are always finite
  REQUIRE(first_nonfinite(zeros({0, 3})).empty());
  REQUIRE(first_nonfinite(from_vector<float>({1, 2, 3, 4, 5, -kInf}, {2, 3})) == "-Inf at [1, 2] of f32[2, 3]");
  REQUIRE(first_nonfinite(from_vector<double>({0, kNaN, kInf}, {3})) == "NaN at [1] of f64[3]");
  REQUIRE(first_nonfinite(from_vector<float>({3e38f, 3e38f}, {2})).empty());  // large but finite: no overflow
}

TEST_CASE("check_finite is off by default: NaN flows silently") {
  REQUIRE_FALSE(check_finite_enabled());
  const Variable y = F::log(Variable(from_vector<float>({1, -1}, {2})));
  REQUIRE(!first_nonfinite(y.data()).empty());
}

TEST_CASE("check_finite: the function that first makes a NaN in forward is named") {
  CheckFiniteOn on;
  Variable x(from_vector<float>({1, -1, 2}, {3}), true);
  const Variable h = F::mul(x, 2.0);  // finite: no error
  REQUIRE_THROWS_WITH(F::log(h), Contains("check_finite: log produced NaN at [1] of f32[3] in output 0 in forward") &&
                                      Contains("its inputs are finite"));
  // A NaN handed in from outside (data or a parameter) is reported as such by its first user.
  const Variable data(from_vector<float>({1, kNaN}, {2}));
  REQUIRE_THROWS_WITH(F::relu(data), Contains("check_finite: relu produced NaN at [1]") &&
                                         Contains("its input 0 already holds NaN at [1] of f32[2]"));
}

TEST_CASE("check_finite: a backward that makes an Inf is named") {
  Variable x(from_vector<float>({4, 0}, {2}), true);
  Variable y = F::sum(F::sqrt(x));  // sqrt(0) = 0 is fine; its derivative at 0 is +Inf
  {
    CheckFiniteOn on;
    REQUIRE_THROWS_WITH(y.backward(), Contains("check_finite: the backward of sqrt produced +Inf at [1] of f32[2] in "
                                               "the gradient of input 0") &&
                                          Contains("the gradients it received are finite"));
  }
  // Off, the same backward hands the Inf to x's gradient.
  Variable x2(from_vector<float>({4, 0}, {2}), true);
  F::sum(F::sqrt(x2)).backward();
  REQUIRE(first_nonfinite(x2.grad()) == "+Inf at [1] of f32[2]");
}
