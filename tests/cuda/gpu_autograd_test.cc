// The differentiable functions (autograd/functions/) on cuda:0 against the CPU: outputs and
// the gradients of every input, in f32 and f64, from the same inputs and the same random
// output weights; f64 numerical gradient checks run on the GPU for the small cases; and the
// engine's accumulation on the device. (n_step_lstm and batch normalisation have their own
// files: gpu_recurrent_test.cc and gpu_normalization_test.cc.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

#include "tests/cuda/gpu_test_util.h"

using namespace tandem;
using namespace gpu_test;
using Catch::Matchers::Contains;

namespace {

struct FunctionCase {
  std::string name;
  GradcheckFunction fn;
  std::vector<Tensor> inputs;  // f64 (floating ones are converted to each dtype tested)
  double f32_tol = 1e-5;       // values and gradients, relative and absolute
  double f64_tol = 1e-12;
  bool gradcheck = true;  // also f64 central differences on the GPU (small inputs only)
};

Tensor f64(const Shape& shape, std::uint64_t seed, double low = -1, double high = 1) {
  return uniform(shape, seed, low, high, DType::f64);
}
// Magnitudes in [0.5, 1.5): central differences of 1 / x stay accurate.
Tensor nonzero(const Shape& shape, std::uint64_t seed) { return away_from_zero(shape, seed, 0.5, 1.5, DType::f64); }
Tensor labels(const std::vector<std::int64_t>& values, const Shape& shape, DType dtype = DType::i32) {
  return from_vector<std::int64_t>(values, shape).to(dtype);
}

// Distinct values (a shuffled ramp): central differences never cross a tie in max pooling.
Tensor distinct(const Shape& shape, std::uint64_t seed) {
  const std::int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = -1 + 2.0 * static_cast<double>(i) / static_cast<double>(n);
  Generator g(seed);
  for (std::int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[g.next() % static_cast<std::uint64_t>(i + 1)]);
  return from_vector<double>(v, shape);
}

Index reversed() {
  Index r;
  r.step = -1;
  return r;
}

std::vector<FunctionCase> function_cases() {
  std::vector<FunctionCase> c;
  // ---- arithmetic, with broadcasting (gradients summed back to each input's shape) ----
  c.push_back({"add [2,3] + [3]", [](const Variables& v) -> Variables { return {v[0] + v[1]}; }, {f64({2, 3}, 1), f64({3}, 2)}});
  c.push_back({"sub [4,1,3] - [2,1]", [](const Variables& v) -> Variables { return {v[0] - v[1]}; },
               {f64({4, 1, 3}, 3), f64({2, 1}, 4)}});
  c.push_back({"mul [3,1] * [1,4]", [](const Variables& v) -> Variables { return {v[0] * v[1]}; },
               {f64({3, 1}, 5), f64({1, 4}, 6)}});
  c.push_back({"div [2,3] / [2,1]", [](const Variables& v) -> Variables { return {v[0] / v[1]}; },
               {f64({2, 3}, 7), nonzero({2, 1}, 8)}});
  c.push_back({"mul with itself", [](const Variables& v) -> Variables { return {v[0] * v[0] + v[0]}; }, {f64({5}, 9)}});
  c.push_back({"neg and scalars", [](const Variables& v) -> Variables {
                 return {-v[0], v[0] + 2.5, v[0] * -3.0, 1.5 - v[0], 2.0 / v[0], v[0] / 4.0};
               }, {nonzero({3, 2}, 10)}});
  c.push_back({"pow", [](const Variables& v) -> Variables { return {F::pow(v[0], 2.5), F::pow(v[0], 3.0), F::pow(v[0], -1.5)}; },
               {f64({4, 3}, 11, 0.5, 2)}});
  // ---- products ----
  c.push_back({"matmul, every transpose", [](const Variables& v) -> Variables {
                 return {F::matmul(v[0], v[1]), F::matmul(v[0], v[0], true, false), F::matmul(v[1], v[1], false, true),
                         F::matmul(v[1], v[0], true, true)};
               }, {f64({3, 4}, 12), f64({4, 3}, 13)}, 1e-5});
  c.push_back({"batched matmul with a broadcast batch", [](const Variables& v) -> Variables {
                 return {F::matmul(v[0], v[1]), F::matmul(v[0], v[2], false, true)};
               }, {f64({2, 1, 3, 4}, 14), f64({3, 4, 2}, 15), f64({5, 4}, 16)}, 1e-5});
  c.push_back({"matmul of vectors", [](const Variables& v) -> Variables { return {F::matmul(v[0], v[1]), F::matmul(v[1], v[2])}; },
               {f64({4}, 17), f64({4, 3}, 18), f64({3}, 19)}});
  c.push_back({"linear with bias", [](const Variables& v) -> Variables { return {F::linear(v[0], v[1], v[2])}; },
               {f64({5, 7}, 20), f64({3, 7}, 21), f64({3}, 22)}});
  c.push_back({"linear of [N, 2, 3] without bias", [](const Variables& v) -> Variables { return {F::linear(v[0], v[1])}; },
               {f64({4, 2, 3}, 23), f64({5, 6}, 24)}});
  c.push_back({"linear, large", [](const Variables& v) -> Variables { return {F::linear(v[0], v[1], v[2])}; },
               {f64({100, 784}, 25), f64({300, 784}, 26, -0.05, 0.05), f64({300}, 27)}, 1e-4, 1e-11, false});
  // ---- activations, exponentials ----
  c.push_back({"relu, leaky_relu", [](const Variables& v) -> Variables { return {F::relu(v[0]), F::leaky_relu(v[0], 0.1)}; },
               {nonzero({3, 5}, 30)}});
  c.push_back({"sigmoid, tanh", [](const Variables& v) -> Variables { return {F::sigmoid(v[0]), F::tanh(v[0])}; },
               {f64({3, 5}, 31, -4, 4)}});
  c.push_back({"exp, log, sqrt, square", [](const Variables& v) -> Variables {
                 return {F::exp(v[0]), F::log(v[1]), F::sqrt(v[1]), F::square(v[0])};
               }, {f64({2, 4}, 32, -2, 2), f64({2, 4}, 33, 0.5, 3)}});
  c.push_back({"activations, large", [](const Variables& v) -> Variables {
                 return {F::relu(v[0]), F::sigmoid(v[0]), F::tanh(v[0]), F::exp(v[0])};
               }, {nonzero({1000, 300}, 34)}, 1e-5, 1e-12, false});
  c.push_back({"gelu", [](const Variables& v) -> Variables { return {F::gelu(v[0])}; }, {f64({3, 5}, 35, -4, 4)}});
  c.push_back({"gelu, large", [](const Variables& v) -> Variables { return {F::gelu(v[0])}; },
               {f64({1000, 300}, 36, -6, 6)}, 1e-5, 1e-12, false});
  // ---- attention (the transformer's, composed of batched matmul, a -inf mask and softmax) ----
  c.push_back({"scaled_dot_product_attention, causal and not", [](const Variables& v) -> Variables {
                 return {F::scaled_dot_product_attention(v[0], v[1], v[2], true),
                         F::scaled_dot_product_attention(v[0], v[1], v[2], false)};
               }, {f64({2, 3, 4, 5}, 37), f64({2, 3, 4, 5}, 38), f64({2, 3, 4, 2}, 39)}});
  c.push_back({"scaled_softmax, causal and not; softmax over the last axis, large", [](const Variables& v) -> Variables {
                 return {F::scaled_softmax(v[0], 0.25, true), F::scaled_softmax(v[0], 2.0, false), F::softmax(v[1], -1)};
               }, {f64({3, 6, 9}, 45), f64({700, 130}, 46, -5, 5)}});
  c.push_back({"multi_head_self_attention (qkv packed per head), causal", [](const Variables& v) -> Variables {
                 return {F::multi_head_self_attention(v[0], 2, true)};
               }, {f64({2, 5, 2 * 3 * 4}, 47)}});
  // ---- rows by index (a mixture of experts' dispatch and combine) ----
  c.push_back({"select_rows and scatter_add_rows, repeated and missing ids", [](const Variables& v) -> Variables {
                 const Tensor ids = from_vector<std::int64_t>({3, 0, 3, 1, 3}).to(v[0].device());
                 return {F::select_rows(v[0], ids), F::scatter_add_rows(v[1], ids, 4)};
               }, {f64({4, 3}, 48), f64({5, 3}, 49)}});
  // ---- reductions ----
  c.push_back({"sum and mean over axes", [](const Variables& v) -> Variables {
                 return {F::sum(v[0]), F::sum(v[0], {1}), F::mean(v[0], {0, 2}, true), F::mean(v[0], {-1})};
               }, {f64({2, 3, 4}, 40)}});
  // ---- arrays ----
  c.push_back({"reshape, expand_dims, squeeze, transpose", [](const Variables& v) -> Variables {
                 return {F::reshape(v[0], {4, -1}), F::squeeze(F::expand_dims(v[0], 1), 1), F::transpose(v[0]),
                         F::transpose(v[0], {1, 2, 0})};
               }, {f64({2, 3, 4}, 41)}});
  c.push_back({"broadcast_to", [](const Variables& v) -> Variables { return {F::broadcast_to(v[0], {4, 3, 5})}; },
               {f64({3, 1}, 42)}});
  c.push_back({"concat, stack", [](const Variables& v) -> Variables {
                 return {F::concat({v[0], v[1], v[0]}, 1), F::stack({v[0], v[0]}, 2)};
               }, {f64({2, 3, 2}, 43), f64({2, 1, 2}, 44)}});
  c.push_back({"split_axis", [](const Variables& v) -> Variables {
                 Variables out = F::split_axis(v[0], 3, 1);
                 const Variables cut = F::split_axis(v[0], std::vector<std::int64_t>{1, 1, 4}, 2);
                 out.insert(out.end(), cut.begin(), cut.end());
                 return out;
               }, {f64({2, 6, 5}, 45)}});
  c.push_back({"get_item with slices, steps and integers", [](const Variables& v) -> Variables {
                 return {F::get_item(v[0], {Index::range(1, 3), reversed(), Index::at(2)}),
                         F::get_item(v[0], {Index::from(0, 2), Index::new_axis(), Index::until(3)}),
                         F::get_item(v[0], {Index::at(-1)})};
               }, {f64({4, 3, 5}, 46)}});
  // ---- softmax and losses ----
  c.push_back({"softmax, log_softmax over axes 1 and 2", [](const Variables& v) -> Variables {
                 return {F::softmax(v[0]), F::log_softmax(v[0]), F::softmax(v[0], 2), F::log_softmax(v[0], -1)};
               }, {f64({3, 4, 5}, 50, -3, 3)}});
  c.push_back({"softmax of large scores (computed stably)", [](const Variables& v) -> Variables {
                 return {F::softmax(v[0]), F::log_softmax(v[0])};
               }, {from_vector<double>({500, 502, 499, -300, -301, -299}, {2, 3})}});
  c.push_back({"softmax_cross_entropy, i32 labels", [](const Variables& v) -> Variables {
                 return {F::softmax_cross_entropy(v[0], v[1]), F::softmax_cross_entropy(v[0], v[1], -1, F::Reduce::none)};
               }, {f64({4, 5}, 51, -2, 2), labels({3, 0, 4, 1}, {4})}});
  c.push_back({"softmax_cross_entropy, i64 labels, some ignored", [](const Variables& v) -> Variables {
                 return {F::softmax_cross_entropy(v[0], v[1]), F::softmax_cross_entropy(v[0], v[1], -1, F::Reduce::none)};
               }, {f64({5, 3}, 52, -2, 2), labels({2, -1, 0, -1, 1}, {5}, DType::i64)}});
  c.push_back({"softmax_cross_entropy, a custom ignore_label inside [0, C)", [](const Variables& v) -> Variables {
                 return {F::softmax_cross_entropy(v[0], v[1], 1)};
               }, {f64({4, 3}, 53, -2, 2), labels({1, 2, 1, 0}, {4})}});
  c.push_back({"softmax_cross_entropy, all labels ignored", [](const Variables& v) -> Variables {
                 return {F::softmax_cross_entropy(v[0], v[1])};
               }, {f64({2, 3}, 54, -2, 2), labels({-1, -1}, {2})}});
  c.push_back({"softmax_cross_entropy over [N, C, d]", [](const Variables& v) -> Variables {
                 return {F::softmax_cross_entropy(v[0], v[1]), F::softmax_cross_entropy(v[0], v[1], -1, F::Reduce::none)};
               }, {f64({2, 4, 3}, 55, -2, 2), labels({0, 3, -1, 2, 2, 1}, {2, 3})}});
  c.push_back({"softmax_cross_entropy, large", [](const Variables& v) -> Variables {
                 return {F::softmax_cross_entropy(v[0], v[1])};
               }, {f64({1600, 1000}, 56, -3, 3), random_ints({1600}, 57, -1, 999, DType::i32)}, 1e-5, 1e-12, false});
  c.push_back({"mean_squared_error", [](const Variables& v) -> Variables { return {F::mean_squared_error(v[0], v[1])}; },
               {f64({3, 4}, 58), f64({3, 4}, 59)}});
  // ---- convolution and pooling ----
  c.push_back({"convolution_2d with bias, pad 1", [](const Variables& v) -> Variables {
                 return {F::convolution_2d(v[0], v[1], v[2], F::Conv2DOptions::make(1, 1))};
               }, {f64({2, 3, 5, 5}, 60), f64({4, 3, 3, 3}, 61), f64({4}, 62)}, 1e-4});
  c.push_back({"convolution_2d: groups 2, stride 2, dilation 2, no bias", [](const Variables& v) -> Variables {
                 return {F::convolution_2d(v[0], v[1], Variable(), F::Conv2DOptions::make(2, 1, 2, 2))};
               }, {f64({1, 4, 7, 6}, 63), f64({2, 2, 2, 3}, 64)}, 1e-4});
  c.push_back({"convolution_2d, large", [](const Variables& v) -> Variables {
                 return {F::convolution_2d(v[0], v[1], v[2], F::Conv2DOptions::make(1, 1))};
               }, {f64({32, 16, 16, 16}, 65), f64({32, 16, 3, 3}, 66, -0.2, 0.2), f64({32}, 67)}, 2e-4, 1e-11, false});
  c.push_back({"max_pooling_2d, overlapping windows, cover_all", [](const Variables& v) -> Variables {
                 return {F::max_pooling_2d(v[0], 3, 2, 1, true), F::max_pooling_2d(v[0], 2)};
               }, {distinct({2, 2, 5, 6}, 70)}});
  c.push_back({"average_pooling_2d with padding", [](const Variables& v) -> Variables {
                 return {F::average_pooling_2d(v[0], 3, 2, 1), F::average_pooling_2d(v[0], 2, 1, 0)};
               }, {f64({2, 2, 5, 6}, 71)}});
  // ---- embedding ----
  c.push_back({"embed_id with repeated ids", [](const Variables& v) -> Variables { return {F::embed_id(v[1], v[0])}; },
               {f64({5, 3}, 80), labels({4, 0, 2, 2, 1, 4, 4, 4}, {2, 4})}});
  c.push_back({"embed_id with an ignore_label", [](const Variables& v) -> Variables { return {F::embed_id(v[1], v[0], -1)}; },
               {f64({4, 3}, 81), labels({1, -1, 3, -1, 1}, {5}, DType::i64)}});
  c.push_back({"embed_id, large vocabulary and batch", [](const Variables& v) -> Variables {
                 return {F::embed_id(v[1], v[0], 0)};
               }, {f64({1000, 64}, 82), random_ints({64, 25}, 83, 0, 999, DType::i32)}, 1e-5, 1e-12, false});
  return c;
}

}  // namespace

TEST_CASE("every differentiable function: GPU values and gradients match the CPU", "[autograd]") {
  for (const FunctionCase& c : function_cases()) {
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO(c.name << " in " << dtype_name(dtype));
      std::vector<Tensor> inputs;
      for (const Tensor& t : c.inputs) inputs.push_back(is_floating(t.dtype()) ? t.to(dtype) : t);
      const Tolerance tol = for_dtype(dtype, c.f32_tol, c.f64_tol);
      check_function(c.fn, inputs, tol, tol);
    }
  }
}

TEST_CASE("numerical gradients of the functions computed on the GPU", "[autograd][gradcheck]") {
  for (const FunctionCase& c : function_cases()) {
    if (!c.gradcheck) continue;
    INFO(c.name);
    REQUIRE_GPU_GRADCHECK(c.fn, c.inputs);
  }
}

TEST_CASE("dropout draws the same masks on both devices and scales the kept elements", "[autograd][dropout]") {
  const GradcheckFunction fn = [](const Variables& v) -> Variables {
    Generator generator(11);
    return {F::dropout(v[0], 0.3, &generator)};
  };
  const Tensor x = f64({300, 200}, 90);
  {
    TrainModeGuard train(true);
    for (DType dtype : {DType::f64, DType::f32}) check_function(fn, {x.to(dtype)}, kExact, for_dtype(dtype, 1e-7, 1e-15));
    // With the global generator: seeded alike before each run.
    check_function([](const Variables& v) -> Variables {
      manual_seed(12);
      return {F::dropout(v[0], 0.5)};
    }, {x}, kExact, kExact);
  }
  {
    TrainModeGuard test(false);  // test mode: the identity
    check_function(fn, {x}, kExact, kExact);
  }
}

TEST_CASE("accuracy counts on the device like on the host", "[autograd][accuracy]") {
  const Tensor y = random_ints({500, 10}, 91, 0, 4, DType::f32);  // ties: argmax takes the first
  const Tensor t = random_ints({500}, 92, -1, 9, DType::i64);
  check_function([](const Variables& v) -> Variables {
    return {F::accuracy(v[0], v[1]), F::accuracy(v[0], v[1], -1)};
  }, {y, t}, kExact, kExact);
}

TEST_CASE("the engine accumulates on the device", "[autograd][engine]") {
  // x used by three branches, one of them twice; backward twice with retain_graph adds up.
  const GradcheckFunction fn = [](const Variables& v) -> Variables {
    const Variable h = F::tanh(v[0]);
    return {F::sum(h * v[0]) + F::sum(F::matmul(h, v[1])) + F::sum(F::exp(v[1]))};
  };
  for (Device device : {cpu(), gpu()}) {
    INFO(device.str());
    Variable x(f64({3, 4}, 93).to(device), true), w(f64({4, 2}, 94).to(device), true);
    const Variable loss = fn({x, w})[0];
    BackwardOptions retain;
    retain.retain_graph = true;
    loss.backward(retain);
    const Tensor once = x.grad().clone();
    loss.backward();
    REQUIRE(x.grad().device() == device);
    REQUIRE(w.grad().device() == device);
    const std::string twice = mismatch(to_cpu(x.grad()), mul(to_cpu(once), 2.0), near(1e-14), /*got_on_gpu=*/false);
    INFO(twice);
    REQUIRE(twice.empty());
  }
  check_function(fn, {f64({3, 4}, 93), f64({4, 2}, 94)}, near(1e-12), near(1e-12));
  // A seed that is not a scalar, given on the device.
  Variable x(f64({2, 3}, 95).to(gpu()), true);
  const Variable y = F::sigmoid(x);
  y.backward(ones({2, 3}, DType::f64, gpu()));
  REQUIRE(x.grad().device() == gpu());
  Variable xc(f64({2, 3}, 95), true);
  F::sigmoid(xc).backward(ones({2, 3}, DType::f64));
  REQUIRE_GPU_MATCHES(x.grad(), xc.grad(), near(1e-15));
}

TEST_CASE("function errors on the GPU are the CPU's", "[autograd][errors]") {
  const Variable x(f64({2, 3}, 96).to(gpu()));
  CHECK_THROWS_WITH(F::softmax_cross_entropy(x, Variable(labels({0, 3}, {2}).to(gpu()))),
                    Contains("softmax_cross_entropy") && Contains("3"));
  CHECK_THROWS_WITH(F::embed_id(Variable(labels({5}, {1}).to(gpu())), x), Contains("embed_id") && Contains("id 5"));
  CHECK_THROWS_WITH(F::linear(x, Variable(f64({4, 4}, 97).to(gpu()))), Contains("linear"));
}
