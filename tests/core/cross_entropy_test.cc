// The fused softmax cross-entropy (core/ops/cross_entropy.h; the CPU kernel in
// core/cpu/cross_entropy.cc) against a loop in double: losses, the row statistics and the
// gradient, i32 and i64 labels, ignored rows, one coefficient or one per row, long rows (Eigen's
// vector tails) and many rows (the parallel split, same bits at 1 and 2 threads), scores far
// apart (no overflow, IEEE's underflow), the composed default of Backend that a backend without
// the kernels uses, errors that name the label and its position.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/backend.h"
#include "core/ops.h"
#include "core/threads.h"
#include "tests/core/test_util.h"

using namespace tandem;
using test_util::uniform;

namespace {

struct Reference {
  std::vector<double> losses, gx;
};

// Losses and the gradient coef[r] * (softmax(x[r]) - onehot(t[r])) in double, 0 for ignored rows.
Reference reference(const std::vector<double>& x, const std::vector<std::int64_t>& t, std::int64_t n,
                    const std::vector<double>& coef, std::int64_t ignore) {
  Reference out{std::vector<double>(t.size(), 0.0), std::vector<double>(x.size(), 0.0)};
  for (std::size_t r = 0; r < t.size(); ++r) {
    if (t[r] == ignore) continue;
    double top = -INFINITY, total = 0;
    for (std::int64_t j = 0; j < n; ++j) top = std::max(top, x[r * n + j]);
    for (std::int64_t j = 0; j < n; ++j) total += std::exp(x[r * n + j] - top);
    const double lse = top + std::log(total), c = coef[coef.size() == 1 ? 0 : r];
    out.losses[r] = lse - x[r * n + t[r]];
    for (std::int64_t j = 0; j < n; ++j)
      out.gx[r * n + j] = c * (std::exp(x[r * n + j] - lse) - (j == t[r] ? 1.0 : 0.0));
  }
  return out;
}

void require_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(got[i] == Approx(want[i]).epsilon(tol).margin(tol));
  }
}

// Seeded labels in [0, n), every fifth one ignore_label.
std::vector<std::int64_t> labels(std::int64_t rows, std::int64_t n, std::int64_t ignore) {
  std::vector<std::int64_t> t(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) t[r] = r % 5 == 3 ? ignore : (r * 7919 + 13) % n;
  return t;
}

Tensor label_tensor(const std::vector<std::int64_t>& t, DType dtype) {
  return from_vector(t, {static_cast<std::int64_t>(t.size())}).to(dtype);
}

}  // namespace

TEST_CASE("softmax_cross_entropy_rows: losses and gradients against a loop in double", "[cross_entropy]") {
  std::uint64_t seed = 1;
  for (const Shape& shape : {Shape{1, 1}, Shape{3, 7}, Shape{9, 1000}, Shape{4097, 33}}) {
    const std::int64_t rows = shape[0], n = shape[1], ignore = -1;
    const std::vector<std::int64_t> t = labels(rows, n, ignore);
    for (DType dtype : {DType::f64, DType::f32}) {
      for (DType label_dtype : {DType::i32, DType::i64}) {
        for (bool per_row : {false, true}) {
          INFO("shape " << shape_str(shape) << " " << dtype_name(dtype) << " labels " << dtype_name(label_dtype)
                        << (per_row ? " one coefficient per row" : " one coefficient"));
          const Tensor x = uniform(shape, seed++, -6, 6, dtype);
          const Tensor coef = per_row ? uniform({rows}, seed++, 0.5, 2, dtype) : from_vector(std::vector<double>{0.37}, {}).to(dtype);
          const Tensor labels_t = label_tensor(t, label_dtype);
          const CrossEntropyRows got = softmax_cross_entropy_rows(x, labels_t, ignore);
          const Reference want = reference(x.to_vector<double>(), t, n, coef.to_vector<double>(), ignore);
          std::int64_t counted = 0;
          for (std::int64_t label : t) counted += label != ignore;
          CHECK(got.counted == counted);
          const double tol = dtype == DType::f64 ? 1e-13 : 2e-6;
          require_near(got.losses.to_vector<double>(), want.losses, tol);
          const std::vector<double> losses = got.losses.to_vector<double>();
          for (std::size_t r = 0; r < t.size(); ++r)
            if (t[r] == ignore) REQUIRE(losses[r] == 0.0);  // exactly
          require_near(softmax_cross_entropy_rows_backward(x, got.stats, labels_t, coef, ignore).to_vector<double>(),
                       want.gx, tol);
        }
      }
    }
  }
}

TEST_CASE("softmax_cross_entropy_rows: the same bits on 1 and 2 threads", "[cross_entropy]") {
  const Tensor x = uniform({3001, 257}, 7, -5, 5);
  const Tensor t = label_tensor(labels(3001, 257, -1), DType::i64);
  const Tensor coef = uniform({3001}, 8, 0.5, 2);
  const int before = max_threads();
  std::vector<std::vector<float>> losses, grads;
  for (int threads : {1, 2}) {
    set_max_threads(threads);
    const CrossEntropyRows got = softmax_cross_entropy_rows(x, t, -1);
    losses.push_back(got.losses.to_vector<float>());
    grads.push_back(softmax_cross_entropy_rows_backward(x, got.stats, t, coef, -1).to_vector<float>());
  }
  set_max_threads(before);
  CHECK(losses[0] == losses[1]);
  CHECK(grads[0] == grads[1]);
}

TEST_CASE("softmax_cross_entropy_rows: scores far apart neither overflow nor lose the small class", "[cross_entropy]") {
  // exp(1000) overflows and exp(-1000) underflows even in f64; the loss of the unlikely class
  // is still its distance from the top, and its probability IEEE's exact 0 in f32.
  const Tensor x = from_vector(std::vector<float>{1000, -1000, 0, 0, -200, 0}, {2, 3});
  const Tensor t = label_tensor({1, 1}, DType::i32);
  const CrossEntropyRows got = softmax_cross_entropy_rows(x, t, -1);
  const std::vector<double> losses = got.losses.to_vector<double>();
  CHECK(losses[0] == Approx(2000.0));
  CHECK(losses[1] == Approx(200.0 + std::log(2.0)));
  const std::vector<double> g =
      softmax_cross_entropy_rows_backward(x, got.stats, t, from_vector(std::vector<float>{1}, {}), -1)
          .to_vector<double>();
  CHECK(g[0] == Approx(1.0));
  CHECK(g[1] == -1.0);
  CHECK(g[2] == 0.0);
  CHECK(g[3] == Approx(0.5));
  CHECK(g[4] == -1.0);  // exp(-200 - log 2) is 0 in f32
  CHECK(g[5] == Approx(0.5));
}

TEST_CASE("softmax_cross_entropy_rows: the composed default of Backend gives the kernel's results", "[cross_entropy]") {
  Backend& cpu = backend_for(Device::cpu(), "test");
  const std::int64_t rows = 13, n = 11, ignore = 4;
  const Tensor x = uniform({rows, n}, 30, -3, 3, DType::f64);
  // ignore_label may also be a class id (4 of 11): rows labelled 4 are ignored all the same.
  std::vector<std::int64_t> t = labels(rows, n, ignore);
  t[2] = ignore;
  const Tensor labels_t = label_tensor(t, DType::i64);
  for (bool per_row : {false, true}) {
    INFO((per_row ? "one coefficient per row" : "one coefficient"));
    const Tensor coef = per_row ? uniform({rows}, 31, 0.5, 2, DType::f64) : from_vector(std::vector<double>{1.5}, {1});
    Tensor losses(Shape{rows}, DType::f64), stats(Shape{2, rows}, DType::f64);
    Tensor losses_c(Shape{rows}, DType::f64), stats_c(Shape{2, rows}, DType::f64);
    cpu.softmax_cross_entropy_forward(x, labels_t, rows, n, ignore, losses, stats);
    cpu.Backend::softmax_cross_entropy_forward(x, labels_t, rows, n, ignore, losses_c, stats_c);
    require_near(losses_c.to_vector<double>(), losses.to_vector<double>(), 1e-14);
    require_near(stats_c.to_vector<double>(), stats.to_vector<double>(), 1e-14);
    Tensor g(x.shape(), DType::f64), g_c(x.shape(), DType::f64);
    cpu.softmax_cross_entropy_backward(x, stats, labels_t, coef, rows, n, ignore, g);
    cpu.Backend::softmax_cross_entropy_backward(x, stats, labels_t, coef, rows, n, ignore, g_c);
    require_near(g_c.to_vector<double>(), g.to_vector<double>(), 1e-14);
    const std::vector<double> gs = g.to_vector<double>();
    for (std::int64_t j = 0; j < n; ++j) REQUIRE(gs[2 * n + j] == 0.0);
  }
}

TEST_CASE("softmax_cross_entropy_rows: errors name the operation, the label and its position", "[cross_entropy]") {
  using Catch::Contains;
  const Tensor x = uniform({3, 4}, 1);
  REQUIRE_THROWS_WITH(softmax_cross_entropy_rows(x, label_tensor({0, 4, 1}, DType::i64), -1),
                      Contains("softmax_cross_entropy") && Contains("label 4 at flat position 1") &&
                          Contains("[0, 4)"));
  REQUIRE_THROWS_WITH(softmax_cross_entropy_rows(x, label_tensor({0, 1, -3}, DType::i32), -1),
                      Contains("label -3 at flat position 2"));
  REQUIRE_THROWS_WITH(softmax_cross_entropy_rows(x, label_tensor({0, 1}, DType::i32), -1),
                      Contains("expected labels of shape [3]"));
  REQUIRE_THROWS_WITH(softmax_cross_entropy_rows(x, label_tensor({0, 1, 2}, DType::i32).to(DType::f32), -1),
                      Contains("i32 or i64"));
  REQUIRE_THROWS_WITH(softmax_cross_entropy_rows(uniform({3}, 2), label_tensor({0, 1, 2}, DType::i32), -1),
                      Contains("[rows, classes]"));
  const Tensor t = label_tensor({0, 1, 2}, DType::i32);
  const CrossEntropyRows got = softmax_cross_entropy_rows(x, t, -1);
  REQUIRE_THROWS_WITH(softmax_cross_entropy_rows_backward(x, got.stats, t, uniform({2}, 3), -1),
                      Contains("one value or one per row"));
  REQUIRE_THROWS_WITH(softmax_cross_entropy_rows_backward(x, got.losses, t, uniform({3}, 3), -1),
                      Contains("stats"));
  CHECK(softmax_cross_entropy_rows(uniform({0, 4}, 4), label_tensor({}, DType::i32), -1).losses.shape() == Shape{0});
}
