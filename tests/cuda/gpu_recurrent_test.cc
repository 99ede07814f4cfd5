// The LSTM on cuda:0 against the CPU: the fused cell forward and backward (in place, into row
// views, gc_prev aliasing gc), and n_step_lstm over stacked layers and sequences of different
// lengths, values and gradients, with and without initial states and dropout.
#include <catch2/catch.hpp>

#include "core/ops/recurrent.h"
#include "tests/cuda/gpu_test_util.h"

using namespace tandem;
using namespace gpu_test;

namespace {

// sigmoid / tanh differ by a few ulp between libdevice and the CPU's math.
Tolerance cell_tolerance(DType dtype) { return for_dtype(dtype, 2e-6, 1e-14); }

}  // namespace

TEST_CASE("lstm cell forward and backward", "[recurrent][cell]") {
  struct Case {
    std::int64_t B, H;
  };
  for (const Case& s : {Case{1, 1}, Case{3, 5}, Case{2, 17}, Case{200, 64}, Case{1000, 256}, Case{7, 1000}}) {
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO("B " << s.B << " H " << s.H << " " << dtype_name(dtype));
      const Tolerance tol = cell_tolerance(dtype);
      const Tensor gates = uniform({s.B, 4 * s.H}, 1, -3, 3, dtype);
      const Tensor c_prev = uniform({s.B, s.H}, 2, -2, 2, dtype);
      const Tensor gh = uniform({s.B, s.H}, 3, -1, 1, dtype), gc = uniform({s.B, s.H}, 4, -1, 1, dtype);
      // Functional form.
      check_binary([](const Tensor& g, const Tensor& c) {
        const LstmCellResult r = lstm_cell(g, c);
        return std::vector<Tensor>{r.c, r.h, r.activations};
      }, gates, c_prev, tol);
      // In place: gates become the activations, c and h are written.
      check_op([](std::vector<Tensor>& v) {
        lstm_cell_forward_(v[0], v[1], v[2], v[3]);
        return std::vector<Tensor>{};
      }, {gates, c_prev, zeros({s.B, s.H}, dtype), zeros({s.B, s.H}, dtype)}, tol);
      // Backward, from the CPU's forward results (the same inputs on both devices).
      const LstmCellResult r = lstm_cell(gates, c_prev);
      check_op([](std::vector<Tensor>& v) {
        lstm_cell_backward_(v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
        return std::vector<Tensor>{};
      }, {r.activations, c_prev, r.c, gh, gc, zeros({s.B, 4 * s.H}, dtype), zeros({s.B, s.H}, dtype)}, tol);
      // gc_prev may be gc itself.
      check_op([](std::vector<Tensor>& v) {
        lstm_cell_backward_(v[0], v[1], v[2], v[3], v[4], v[5], v[4]);
        return std::vector<Tensor>{};
      }, {r.activations, c_prev, r.c, gh, gc, zeros({s.B, 4 * s.H}, dtype)}, tol);
    }
  }
}

TEST_CASE("lstm cell into row views of preallocated buffers", "[recurrent][cell][view]") {
  // What n_step_lstm does: step t reads and writes rows [t*B, (t+1)*B) of [T*B, ...] buffers.
  const std::int64_t T = 4, B = 3, H = 6;
  const Tensor gates = uniform({T * B, 4 * H}, 10, -3, 3, DType::f64);
  const Tensor c0 = uniform({B, H}, 11, -1, 1, DType::f64);
  check_op([=](std::vector<Tensor>& v) {
    Tensor& all_gates = v[0];
    Tensor& cs = v[2];
    Tensor& hs = v[3];
    for (std::int64_t t = 0; t < T; ++t) {
      Tensor g = all_gates.slice_rows(t * B, (t + 1) * B);
      const Tensor c_prev = t == 0 ? v[1] : cs.slice_rows((t - 1) * B, t * B);
      Tensor c = cs.slice_rows(t * B, (t + 1) * B), h = hs.slice_rows(t * B, (t + 1) * B);
      lstm_cell_forward_(g, c_prev, c, h);
    }
    return std::vector<Tensor>{};
  }, {gates, c0, zeros({T * B, H}, DType::f64), zeros({T * B, H}, DType::f64)}, cell_tolerance(DType::f64));
}

namespace {

struct Problem {
  std::int64_t layers, in_size, units;
  std::vector<std::int64_t> lengths;
  std::vector<Tensor> inputs;  // [hx, cx, ws (8 per layer)..., bs (8 per layer)..., xs...]
};

Problem make_problem(std::int64_t layers, std::int64_t in_size, std::int64_t units, std::vector<std::int64_t> lengths,
                     std::uint64_t seed, DType dtype) {
  Problem p{layers, in_size, units, lengths, {}};
  const std::int64_t B = static_cast<std::int64_t>(lengths.size());
  p.inputs.push_back(uniform({layers, B, units}, seed++, -1, 1, dtype));
  p.inputs.push_back(uniform({layers, B, units}, seed++, -1, 1, dtype));
  for (std::int64_t l = 0; l < layers; ++l)
    for (int j = 0; j < 8; ++j)
      p.inputs.push_back(uniform({units, j < 4 && l == 0 ? in_size : units}, seed++, -0.7, 0.7, dtype));
  for (std::int64_t l = 0; l < layers; ++l)
    for (int j = 0; j < 8; ++j) p.inputs.push_back(uniform({units}, seed++, -0.5, 0.5, dtype));
  for (std::int64_t T : lengths) p.inputs.push_back(uniform({T, in_size}, seed++, -1, 1, dtype));
  return p;
}

// n_step_lstm on the flattened inputs, returning [hy, cy, ys...].
GradcheckFunction lstm_fn(std::int64_t layers, std::int64_t batch, double dropout, bool with_states,
                          std::uint64_t dropout_seed = 0) {
  return [=](const Variables& v) -> Variables {
    if (dropout > 0) manual_seed(dropout_seed);  // the same masks (drawn on the host) on both devices
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

}  // namespace

TEST_CASE("n_step_lstm values and gradients match the CPU", "[recurrent][n_step_lstm]") {
  struct Case {
    std::int64_t layers, in_size, units;
    std::vector<std::int64_t> lengths;
    bool with_states;
    double dropout;
  };
  const std::vector<Case> cases = {
      {1, 3, 4, {5}, true, 0},
      {1, 3, 4, {2, 5, 0, 3}, true, 0},  // unsorted lengths and an empty sequence
      {2, 5, 6, {4, 4, 1}, false, 0},    // zero initial states
      {3, 4, 5, {1, 6, 3, 6, 2}, true, 0},
      {2, 8, 16, {7, 3, 5}, true, 0.3},  // dropout between layers: same seed, same masks
      {2, 64, 128, {25, 20, 17, 25, 9, 1, 12, 25}, true, 0},
  };
  std::uint64_t seed = 100;
  for (const Case& c : cases) {
    INFO(c.layers << " layers, in " << c.in_size << ", units " << c.units << ", lengths " << shape_str(c.lengths)
                  << (c.with_states ? "" : ", no states") << ", dropout " << c.dropout);
    const std::int64_t batch = static_cast<std::int64_t>(c.lengths.size());
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO(dtype_name(dtype));
      const Problem p = make_problem(c.layers, c.in_size, c.units, c.lengths, seed += 100, dtype);
      TrainModeGuard train(true);
      // A sequence of T steps compounds the cell's rounding differences T times over. f64 at 1e-11
      // shows that the GPU computes the same function; in f32 the gradients of the initial states
      // through 25 steps of 2 layers of 128 units differed by up to 4.6e-4 (at a value of 1.44) on
      // an H100, the order of f32's rounding over 25 steps of 128-term sums, hence 1e-3.
      check_function(lstm_fn(c.layers, batch, c.dropout, c.with_states), p.inputs, for_dtype(dtype, 2e-5, 1e-12),
                     for_dtype(dtype, Tolerance{1e-3, 1e-3}, near(1e-11)));
    }
  }
}

TEST_CASE("n_step_lstm numerical gradients on the GPU", "[recurrent][n_step_lstm][gradcheck]") {
  const Problem p = make_problem(2, 3, 2, {3, 1, 2}, 7, DType::f64);
  REQUIRE_GPU_GRADCHECK(lstm_fn(2, 3, 0, true), p.inputs);
  REQUIRE_GPU_GRADCHECK(lstm_fn(2, 3, 0, false), p.inputs);
  const Problem q = make_problem(2, 3, 2, {2, 3}, 8, DType::f64);
  REQUIRE_GPU_GRADCHECK(lstm_fn(2, 2, 0.4, true, 99), q.inputs);
}

// n_step_lstm without dropout runs on cuDNN's RNN (cuda/rnn.cu); cuda::set_cudnn_rnn(false) runs
// it cell by cell as on the CPU. Both paths on the GPU must agree (cuda::cudnn_rnn_forwards()
// shows which one ran).
TEST_CASE("n_step_lstm on cuDNN's RNN matches the cell-by-cell GPU path", "[recurrent][n_step_lstm][cudnn]") {
  struct Case {
    std::int64_t layers, in_size, units;
    std::vector<std::int64_t> lengths;
    bool with_states;
  };
  const std::vector<Case> cases = {
      {1, 3, 4, {5}, true},
      {2, 5, 6, {4, 4, 1}, false},
      {3, 4, 5, {1, 6, 3, 6, 2}, true},  // unsorted lengths: the states go through the sort
      {2, 256, 256, std::vector<std::int64_t>(64, 25), true},  // the benchmark's shape
  };
  REQUIRE(cuda::cudnn_rnn());  // on by default (off in a build without CUDA)
  std::uint64_t seed = 500;
  for (const Case& c : cases) {
    INFO(c.layers << " layers, in " << c.in_size << ", units " << c.units << ", " << c.lengths.size()
                  << " sequences");
    const std::int64_t batch = static_cast<std::int64_t>(c.lengths.size());
    for (DType dtype : {DType::f64, DType::f32}) {
      // At the benchmark's size, with these weights (uniform in +-0.7 over 256 inputs: saturated
      // gates), f32 rounding differences grow chaotically over 25 steps (up to 7e-4 at a value of
      // 0.008 in hy on an H100) while f64 agrees to 1e-12: f64 shows the paths compute the same
      // function there; f32 through cuDNN is checked against the CPU at 128 units above.
      if (dtype == DType::f32 && c.units >= 256) continue;
      INFO(dtype_name(dtype));
      const Problem p = make_problem(c.layers, c.in_size, c.units, c.lengths, seed += 100, dtype);
      TrainModeGuard train(true);
      const GradcheckFunction fn = lstm_fn(c.layers, batch, 0, c.with_states);
      const std::int64_t before = cuda::cudnn_rnn_forwards();
      cuda::set_cudnn_rnn(false);
      const GraphResult cells = run_graph(fn, p.inputs, gpu(), 3);
      REQUIRE(cuda::cudnn_rnn_forwards() == before);
      cuda::set_cudnn_rnn(true);
      const GraphResult fused = run_graph(fn, p.inputs, gpu(), 3);
      REQUIRE(cuda::cudnn_rnn_forwards() == before + 1);
      // The two paths sum in different orders; on an H100 the f64 gradients of the initial states
      // through 25 steps of 2 layers of 256 units differed by up to 2e-10 relative (values: under
      // 1e-12), the rounding of 256-term sums compounded over 50 cell steps.
      const Tolerance value_tol = for_dtype(dtype, 2e-5, 1e-12),
                      grad_tol = for_dtype(dtype, 1e-3, c.units >= 256 ? 1e-9 : 1e-11);
      for (std::size_t k = 0; k < cells.outputs.size(); ++k) {
        INFO("output " << k);
        REQUIRE_GPU_MATCHES(fused.outputs[k], to_cpu(cells.outputs[k]), value_tol);
      }
      for (std::size_t i = 0; i < cells.grads.size(); ++i) {
        INFO("gradient of input " << i);
        if (i < 2 && !c.with_states) continue;
        REQUIRE_GPU_MATCHES(fused.grads[i], to_cpu(cells.grads[i]), grad_tol);
      }
      // Every weight's gradient in memory of its own (none shared: no copy by the engine).
      REQUIRE_FALSE(fused.grads[2].shares_storage_with(fused.grads[2 + 16 * c.layers - 1]));
    }
  }
}

TEST_CASE("n_step_lstm on cuDNN: a second backward through a kept graph gives the same gradients",
          "[recurrent][n_step_lstm][cudnn]") {
  // cuDNN's backward writes into the forward's reserve space; tandem runs it on a copy.
  const Problem p = make_problem(2, 3, 4, {4, 2, 3}, 900, DType::f64);
  Variables leaves;
  for (const Tensor& t : p.inputs) leaves.emplace_back(t.to(gpu()).clone(), true);
  TrainModeGuard train(true);
  const Variables out = lstm_fn(2, 3, 0, true)(leaves);
  const Variable loss = F::sum(F::mul(out[2], out[2]));
  BackwardOptions keep;
  keep.retain_graph = true;
  loss.backward(keep);
  const std::vector<Tensor> first = {leaves[0].grad().clone(), leaves[2].grad().clone(), leaves.back().grad().clone()};
  for (Variable& v : leaves) v.cleargrad();
  loss.backward();
  REQUIRE_GPU_MATCHES(leaves[0].grad(), to_cpu(first[0]), near(1e-14));
  REQUIRE_GPU_MATCHES(leaves[2].grad(), to_cpu(first[1]), near(1e-14));
  REQUIRE_GPU_MATCHES(leaves.back().grad(), to_cpu(first[2]), near(1e-14));
}

TEST_CASE("n_step_lstm keeps dropout and empty sequences on the cell-by-cell path", "[recurrent][n_step_lstm][cudnn]") {
  // cuDNN's dropout would draw other masks than tandem's generator (and the CPU), and its packed
  // layout has no empty sequences.
  struct Case {
    std::vector<std::int64_t> lengths;
    double dropout;
  };
  for (const Case& c : {Case{{3, 0, 2}, 0}, Case{{3, 1, 2}, 0.25}}) {
    const std::int64_t batch = static_cast<std::int64_t>(c.lengths.size());
    const Problem p = make_problem(2, 3, 4, c.lengths, 1200, DType::f64);
    TrainModeGuard train(true);
    const std::int64_t before = cuda::cudnn_rnn_forwards();
    check_function(lstm_fn(2, batch, c.dropout, true, 5), p.inputs, near(1e-12), near(1e-11));
    REQUIRE(cuda::cudnn_rnn_forwards() == before);
  }
}
