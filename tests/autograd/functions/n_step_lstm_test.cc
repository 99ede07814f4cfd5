// Gradients and behaviour of autograd/functions/n_step_lstm.h, against a naive per-sequence,
// per-step reference written with plain tensor operations.
#include <catch2/catch.hpp>

#include <vector>

#include <omp.h>

#include "tests/autograd/functions/gradcheck_util.h"

using namespace tandem;
using Catch::Matchers::Contains;
using gc_util::uniform;

namespace {

struct Problem {
  std::int64_t layers, in_size, units;
  std::vector<std::int64_t> lengths;
  Tensor hx, cx;
  std::vector<std::vector<Tensor>> ws, bs;
  std::vector<Tensor> xs;

  // Flattened as the gradcheck inputs: [hx, cx, ws..., bs..., xs...].
  std::vector<Tensor> flat() const {
    std::vector<Tensor> all{hx, cx};
    for (const auto& layer : ws) all.insert(all.end(), layer.begin(), layer.end());
    for (const auto& layer : bs) all.insert(all.end(), layer.begin(), layer.end());
    all.insert(all.end(), xs.begin(), xs.end());
    return all;
  }
};

Problem make_problem(std::int64_t layers, std::int64_t in_size, std::int64_t units, std::vector<std::int64_t> lengths,
                     std::uint64_t seed, DType dtype = DType::f64) {
  Problem p{layers, in_size, units, lengths, {}, {}, {}, {}, {}};
  const std::int64_t B = static_cast<std::int64_t>(lengths.size());
  p.hx = uniform({layers, B, units}, seed++, -1, 1, dtype);
  p.cx = uniform({layers, B, units}, seed++, -1, 1, dtype);
  for (std::int64_t l = 0; l < layers; ++l) {
    p.ws.emplace_back();
    p.bs.emplace_back();
    for (int j = 0; j < 8; ++j) {
      p.ws[l].push_back(uniform({units, j < 4 && l == 0 ? in_size : units}, seed++, -0.7, 0.7, dtype));
      p.bs[l].push_back(uniform({units}, seed++, -0.5, 0.5, dtype));
    }
  }
  for (std::int64_t T : lengths) p.xs.push_back(uniform({T, in_size}, seed++, -1, 1, dtype));
  return p;
}

// The function under test on flattened inputs, returning [hy, cy, ys...]. Without states the
// first two inputs are ignored and hx/cx are passed undefined.
GradcheckFunction lstm_fn(std::int64_t layers, std::int64_t batch, double dropout = 0, bool with_states = true,
                          std::uint64_t dropout_seed = 0) {
  return [=](const Variables& v) -> Variables {
    if (dropout > 0) manual_seed(dropout_seed);  // the same masks on every call
    std::vector<Variables> ws(layers), bs(layers);
    for (std::int64_t l = 0; l < layers; ++l)
      for (int j = 0; j < 8; ++j) {
        ws[l].push_back(v[2 + 8 * l + j]);
        bs[l].push_back(v[2 + 8 * layers + 8 * l + j]);
      }
    const Variables xs(v.begin() + 2 + 16 * layers, v.begin() + 2 + 16 * layers + batch);
    const F::NStepLSTMResult r = F::n_step_lstm(layers, dropout, with_states ? v[0] : Variable(),
                                                with_states ? v[1] : Variable(), ws, bs, xs);
    Variables out{r.hy, r.cy};
    out.insert(out.end(), r.ys.begin(), r.ys.end());
    return out;
  };
}

struct Reference {
  std::vector<double> hy, cy;  // [layers, B, H]
  std::vector<Tensor> ys;
};

// Chainer's equations, one sequence and one step at a time, gates W0/W4 input, W1/W5 forget,
// W2/W6 cell input, W3/W7 output.
Reference naive_lstm(const Problem& p, bool with_states = true) {
  const std::int64_t B = static_cast<std::int64_t>(p.xs.size()), H = p.units;
  Reference r;
  r.hy.assign(p.layers * B * H, 0);
  r.cy.assign(p.layers * B * H, 0);
  std::vector<Tensor> inputs = p.xs;
  for (std::int64_t l = 0; l < p.layers; ++l) {
    const auto& W = p.ws[l];
    const auto& b = p.bs[l];
    for (std::int64_t s = 0; s < B; ++s) {
      Tensor h = with_states ? index(p.hx, {Index::at(l), Index::range(s, s + 1)}) : zeros({1, H}, p.hx.dtype());
      Tensor c = with_states ? index(p.cx, {Index::at(l), Index::range(s, s + 1)}) : zeros({1, H}, p.hx.dtype());
      std::vector<Tensor> outs;
      for (std::int64_t t = 0; t < inputs[s].size(0); ++t) {
        const Tensor x = inputs[s].slice_rows(t, t + 1);
        auto pre = [&](int j) {
          return matmul(x, W[j], false, true) + matmul(h, W[j + 4], false, true) + b[j] + b[j + 4];
        };
        const Tensor i = sigmoid(pre(0)), f = sigmoid(pre(1)), a = tanh(pre(2)), o = sigmoid(pre(3));
        c = f * c + i * a;
        h = o * tanh(c);
        outs.push_back(h);
      }
      const std::vector<double> hv = h.to_vector<double>(), cv = c.to_vector<double>();
      for (std::int64_t u = 0; u < H; ++u) {
        r.hy[(l * B + s) * H + u] = hv[u];
        r.cy[(l * B + s) * H + u] = cv[u];
      }
      inputs[s] = outs.empty() ? zeros({0, H}, p.hx.dtype()) : concat(outs, 0);
    }
  }
  r.ys = inputs;
  return r;
}

void require_matches_reference(const Problem& p, double tol, bool with_states = true) {
  const std::int64_t B = static_cast<std::int64_t>(p.xs.size());
  Variables v;
  for (const Tensor& t : p.flat()) v.emplace_back(t);
  const Variables out = lstm_fn(p.layers, B, 0, with_states)(v);
  const Reference want = naive_lstm(p, with_states);
  REQUIRE(out[0].shape() == Shape{p.layers, B, p.units});
  REQUIRE(out[1].shape() == Shape{p.layers, B, p.units});
  REQUIRE_NEAR_VALUES(out[0].data(), want.hy, tol);
  REQUIRE_NEAR_VALUES(out[1].data(), want.cy, tol);
  REQUIRE(out.size() == static_cast<std::size_t>(2 + B));
  for (std::int64_t s = 0; s < B; ++s) {
    INFO("ys[" << s << "]");
    REQUIRE(out[2 + s].shape() == Shape{p.lengths[s], p.units});
    REQUIRE_NEAR_VALUES(out[2 + s].data(), want.ys[s], tol);
  }
}

}  // namespace

TEST_CASE("n_step_lstm forward matches a naive per-step reference", "[n_step_lstm]") {
  SECTION("sorted lengths") { require_matches_reference(make_problem(2, 3, 4, {5, 3, 3, 1}, 1), 1e-12); }
  SECTION("unsorted lengths come back in the order of xs") {
    require_matches_reference(make_problem(2, 3, 4, {2, 5, 1, 3, 5}, 2), 1e-12);
  }
  SECTION("one layer, batch 1, and three layers") {
    require_matches_reference(make_problem(1, 2, 3, {4}, 3), 1e-12);
    require_matches_reference(make_problem(3, 4, 2, {3, 4}, 4), 1e-12);
  }
  SECTION("undefined hx and cx are zeros") {
    require_matches_reference(make_problem(2, 3, 4, {1, 3, 2}, 5), 1e-12, false);
  }
  SECTION("an empty sequence keeps its initial state") {
    require_matches_reference(make_problem(2, 3, 4, {3, 0, 2}, 6), 1e-12);
  }
  SECTION("f32, larger: every step on several threads") {
    require_matches_reference(make_problem(2, 24, 96, {7, 2, 9, 9, 4, 1, 6, 8}, 7, DType::f32), 2e-5);
  }
}

TEST_CASE("n_step_lstm gradients for hx, cx, every W and b and xs", "[n_step_lstm][gradcheck]") {
  SECTION("2 layers, unequal lengths including 1, unsorted") {
    const Problem p = make_problem(2, 2, 3, {3, 1, 2}, 10);
    REQUIRE_GRADCHECK(lstm_fn(2, 3), p.flat());
  }
  SECTION("batch 1") {
    const Problem p = make_problem(2, 3, 2, {3}, 11);
    REQUIRE_GRADCHECK(lstm_fn(2, 1), p.flat());
  }
  SECTION("hx and cx undefined") {
    const Problem p = make_problem(2, 2, 3, {2, 3, 1}, 12);
    // hx and cx are unused inputs here: they must get no gradient, which gradcheck checks.
    REQUIRE_GRADCHECK(lstm_fn(2, 3, 0, false), p.flat());
  }
  SECTION("an empty sequence and equal lengths") {
    const Problem p = make_problem(2, 2, 2, {2, 0, 2}, 13);
    REQUIRE_GRADCHECK(lstm_fn(2, 3), p.flat());
  }
  SECTION("with dropout in train mode (the masks reseeded per call)") {
    const Problem p = make_problem(2, 2, 3, {2, 3}, 14);
    REQUIRE_GRADCHECK(lstm_fn(2, 2, 0.4, true, 99), p.flat());
  }
  SECTION("only some outputs used") {
    const Problem p = make_problem(2, 2, 2, {1, 3}, 15);
    auto base = lstm_fn(2, 2);
    REQUIRE_GRADCHECK([base](const Variables& v) -> Variables { return {base(v)[3]}; }, p.flat());
    REQUIRE_GRADCHECK([base](const Variables& v) -> Variables { return {base(v)[1]}; }, p.flat());
  }
}

TEST_CASE("n_step_lstm dropout: deterministic without it, only above the first layer", "[n_step_lstm]") {
  const Problem p = make_problem(2, 3, 4, {4, 2}, 20);
  Variables v;
  for (const Tensor& t : p.flat()) v.emplace_back(t);
  const Reference want = naive_lstm(p);
  SECTION("ratio 0 in train mode, or any ratio outside training: the reference values") {
    const TrainModeGuard train(true);
    REQUIRE_NEAR_VALUES(lstm_fn(2, 2, 0.0)(v)[0].data(), want.hy, 1e-12);
    const TrainModeGuard test(false);
    REQUIRE_NEAR_VALUES(lstm_fn(2, 2, 0.5, true, 1)(v)[0].data(), want.hy, 1e-12);
  }
  SECTION("in train mode the second layer sees dropped inputs, the first does not") {
    const TrainModeGuard train(true);
    const Tensor hy = lstm_fn(2, 2, 0.5, true, 3)(v)[0].data();
    const std::vector<double> got = hy.to_vector<double>();
    // Layer 0's final states ([0, :, :]) are untouched by dropout; layer 1's differ.
    const std::size_t layer = 2 * 4;
    REQUIRE(gc_util::mismatch(hy.slice_rows(0, 1), std::vector<double>(want.hy.begin(), want.hy.begin() + layer)).empty());
    REQUIRE_FALSE(gc_util::mismatch(hy.slice_rows(1, 2), std::vector<double>(want.hy.begin() + layer, want.hy.end())).empty());
    // The same seed, the same masks.
    REQUIRE_NEAR_VALUES(lstm_fn(2, 2, 0.5, true, 3)(v)[0].data(), got);
  }
}

TEST_CASE("n_step_lstm rejects inconsistent arguments", "[n_step_lstm][errors]") {
  const Problem p = make_problem(2, 3, 4, {3, 2}, 30);
  auto vars = [](const std::vector<std::vector<Tensor>>& ts) {
    std::vector<Variables> out;
    for (const auto& layer : ts) {
      out.emplace_back();
      for (const Tensor& t : layer) out.back().emplace_back(t);
    }
    return out;
  };
  const std::vector<Variables> ws = vars(p.ws), bs = vars(p.bs);
  const Variables xs{Variable(p.xs[0]), Variable(p.xs[1])};
  const Variable hx(p.hx), cx(p.cx);
  REQUIRE_NOTHROW(F::n_step_lstm(2, 0, hx, cx, ws, bs, xs));
  SECTION("xs with the wrong feature size") {
    const Variables bad{Variable(p.xs[0]), Variable(uniform({2, 5}, 31))};
    REQUIRE_THROWS_AS(F::n_step_lstm(2, 0, hx, cx, ws, bs, bad), Error);
    REQUIRE_THROWS_WITH(F::n_step_lstm(2, 0, hx, cx, ws, bs, bad),
                        Contains("n_step_lstm") && Contains("xs[1]") && Contains("5 features") && Contains("in_size = 3"));
    REQUIRE_THROWS_WITH(F::n_step_lstm(2, 0, hx, cx, ws, bs, {Variable(uniform({3}, 32))}), Contains("xs[0]"));
  }
  SECTION("hx or cx of the wrong shape") {
    REQUIRE_THROWS_WITH(F::n_step_lstm(2, 0, Variable(uniform({2, 3, 4}, 33)), cx, ws, bs, xs),
                        Contains("hx f64[2, 3, 4]") && Contains("[n_layers, B, H] = [2, 2, 4]"));
    REQUIRE_THROWS_WITH(F::n_step_lstm(2, 0, hx, Variable(uniform({1, 2, 4}, 34)), ws, bs, xs), Contains("cx"));
  }
  SECTION("wrong dtypes") {
    const Variables xs32{Variable(p.xs[0].to(DType::f32)), Variable(p.xs[1])};
    REQUIRE_THROWS_WITH(F::n_step_lstm(2, 0, hx, cx, ws, bs, xs32), Contains("xs[0]") && Contains("f32"));
    REQUIRE_THROWS_WITH(F::n_step_lstm(2, 0, Variable(p.hx.to(DType::f32)), cx, ws, bs, xs), Contains("hx"));
    std::vector<Variables> ws_int = ws;
    for (auto& layer : ws_int)
      for (auto& w : layer) w = Variable(w.data().to(DType::i32));
    REQUIRE_THROWS_WITH(F::n_step_lstm(2, 0, Variable(), Variable(), ws_int, bs, xs), Contains("floating"));
    std::vector<Variables> bs_mixed = bs;
    bs_mixed[1][5] = Variable(p.bs[1][5].to(DType::f32));
    REQUIRE_THROWS_WITH(F::n_step_lstm(2, 0, hx, cx, ws, bs_mixed, xs), Contains("bs[1][5]"));
  }
  SECTION("weights of the wrong shape or count") {
    std::vector<Variables> ws_bad = ws;
    ws_bad[1][2] = Variable(uniform({4, 3}, 35));
    REQUIRE_THROWS_WITH(F::n_step_lstm(2, 0, hx, cx, ws_bad, bs, xs), Contains("ws[1][2]") && Contains("[4, 4]"));
    ws_bad = ws;
    ws_bad[0].pop_back();
    REQUIRE_THROWS_WITH(F::n_step_lstm(2, 0, hx, cx, ws_bad, bs, xs), Contains("ws[0] holds 7"));
    REQUIRE_THROWS_WITH(F::n_step_lstm(3, 0, hx, cx, ws, bs, xs), Contains("n_layers is 3"));
    REQUIRE_THROWS_WITH(F::n_step_lstm(2, 1.0, hx, cx, ws, bs, xs), Contains("dropout_ratio"));
    REQUIRE_THROWS_WITH(F::n_step_lstm(2, 0, hx, cx, ws, bs, {}), Contains("xs is empty"));
  }
}

TEST_CASE("n_step_lstm in f32 agrees with f64", "[n_step_lstm][f32]") {
  const Problem p = make_problem(2, 3, 4, {3, 1, 4}, 40);
  gc_util::check_f32_against_f64(lstm_fn(2, 3), p.flat());
}

// With two threads the CPU runs each layer's recurrence as one parallel region, each thread its
// share of the hidden units (core/cpu/lstm_recurrence.cc); 34 sequences of 64 units are past the
// size where it starts. Outputs against the per-step reference, and every gradient against the
// same model on one thread, which runs cell by cell.
TEST_CASE("n_step_lstm split over two threads matches the reference and one thread's gradients",
          "[n_step_lstm]") {
  std::vector<std::int64_t> lengths;
  for (int s = 0; s < 34; ++s) lengths.push_back(1 + (s * 7) % 5);  // 1 to 5 steps, unsorted
  const Problem p = make_problem(2, 5, 64, lengths, 70);
  const std::int64_t B = static_cast<std::int64_t>(lengths.size());
  const int saved_threads = omp_get_max_threads();
  std::vector<std::vector<Tensor>> grads(2);
  for (int threads : {2, 1}) {
    INFO(threads << " threads");
    omp_set_num_threads(threads);
    if (threads == 2) require_matches_reference(p, 1e-10);
    Variables v;
    for (const Tensor& t : p.flat()) v.emplace_back(t, true);
    const Variables out = lstm_fn(2, B)(v);
    Variable loss;
    for (std::size_t k = 0; k < out.size(); ++k) {
      const Variable term = F::sum(out[k] * Variable(uniform(out[k].shape(), 100 + k)));
      loss = k == 0 ? term : loss + term;
    }
    loss.backward();
    for (const Variable& x : v) grads[threads - 1].push_back(x.grad());
  }
  omp_set_num_threads(saved_threads);
  for (std::size_t k = 0; k < grads[0].size(); ++k) {
    INFO("gradient of input " << k);
    REQUIRE_NEAR_VALUES(grads[1][k], grads[0][k].to_vector<double>(), 1e-10);
  }
}
