// The precision report: every function's output and gradient compared between an f32 run and an
// autocast run of the same step, and the first one beyond the tolerance named.
#include <catch2/catch.hpp>

#include "autograd/functions.h"
#include "core/ops.h"
#include "layers/links/linear.h"
#include "training/precision_report.h"

using namespace tandem;

namespace {

class Mlp : public Chain {
 public:
  Mlp() {
    add_link("l1", std::make_shared<Linear>(6, 8));
    add_link("l2", std::make_shared<Linear>(8, 3));
  }
  Variable operator()(const Variable& x) {
    auto& l1 = static_cast<Linear&>(*child("l1"));
    auto& l2 = static_cast<Linear&>(*child("l2"));
    return l2(F::relu(l1(x)));
  }
};

}  // namespace

TEST_CASE("precision report: rows for every output and gradient, the first beyond the tolerance named",
          "[precision_report]") {
  manual_seed(3);
  Mlp model;
  // Inputs whose first-layer outputs all lie well away from 0 (at least 0.05), so no ReLU mask
  // differs between the runs: a mask that flips makes that unit's gradients part entirely (the
  // report then names linear+relu's gradients).
  Generator g(19);
  const Tensor x = rand_uniform({4, 6}, g, -1, 1);
  const Variable t(from_vector<std::int32_t>({0, 2, 1, 2}));
  const auto step = [&] { F::softmax_cross_entropy(model(Variable(x)), t).backward(); };
  const PrecisionReport report = precision_report(model, step, DType::bf16);
  // linear, relu, linear, softmax_cross_entropy forward; their backwards; 4 parameter gradients.
  REQUIRE(report.rows.front().phase == "forward");
  REQUIRE(report.rows.front().what == "linear output 0 (l1/W, l1/b)");
  REQUIRE(report.rows.front().dtype == DType::bf16);
  INFO(report.text(40));
  int grads = 0;
  for (const PrecisionDifference& row : report.rows) {
    grads += row.phase == "grad";
    REQUIRE(row.relative_error > 0);     // bf16 rounds
    REQUIRE(row.relative_error < 0.05);  // and stays close
  }
  REQUIRE(grads == 4);
  REQUIRE(report.first_beyond() == nullptr);
  REQUIRE(model.namedparams()[0].second.grad().dtype() == DType::f32);
  // A tolerance below bf16's rounding: the first linear's output is the first beyond it.
  const PrecisionReport strict = precision_report(model, step, DType::bf16, 1e-6);
  REQUIRE(strict.first_beyond() != nullptr);
  REQUIRE(strict.first_beyond()->what == "linear output 0 (l1/W, l1/b)");
  REQUIRE_THAT(strict.text(5), Catch::Contains("first beyond it: forward #0 linear output 0"));
}

TEST_CASE("precision report: an f16 overflow is named where it happens", "[precision_report]") {
  manual_seed(4);
  Mlp model;
  // Inputs of 6e4 (f16 holds them) and weights of 0.5: l1's sums, 1.8e5, pass f16's 65504 and
  // become Inf. The report names l1's output, not the loss that became NaN after it.
  const Tensor x = full({2, 6}, 6e4);
  for (auto& [name, param] : model.namedparams())
    if (name == "l1/W") param.set_data(full(param.shape(), 0.5));
  const Variable t(from_vector<std::int32_t>({0, 1}));
  const PrecisionReport report = precision_report(
      model, [&] { F::softmax_cross_entropy(model(Variable(x)), t).backward(); }, DType::f16);
  REQUIRE(report.first_beyond() != nullptr);
  REQUIRE(report.first_beyond()->what == "linear output 0 (l1/W, l1/b)");
  REQUIRE(std::isinf(report.first_beyond()->relative_error));
  REQUIRE_THROWS_WITH(precision_report(
                          model, [] {}, DType::f32),
                      Catch::Contains("bf16 or f16"));
}
