// Helpers shared by the GPU tests (tests/cuda/gpu_*_test.cc). The CPU backend is the semantic
// reference: every check makes its inputs on the CPU, runs the operation there and, on copies
// moved with .to(Device::cuda(0)), on the GPU, and compares the two results element by element
// with a tolerance chosen per operation (exact for integers, booleans, copies and selections).
//
//   check_binary([](const Tensor& a, const Tensor& b) { return add(a, b); }, a, b, tol);
//   check_op(op, {a, b, c}, tol);                     // any tensors in and out, in place too
//   check_function(fn, inputs, value_tol, grad_tol);  // values and gradients of a graph
//   REQUIRE_GPU_GRADCHECK(fn, inputs);                // f64 numerical gradients on the GPU
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "core/ops.h"
#include "cuda/cuda.h"

namespace gpu_test {

using tandem::Device;
using tandem::DType;
using tandem::Shape;
using tandem::Tensor;
using tandem::Variable;
using tandem::Variables;

// Compiled with -DTANDEM_GPU_TEST_DRY_RUN (outside Bazel), "the GPU" is the CPU: the tests then
// check their own logic (shapes, API use, tolerances of the reference) on a machine without a
// GPU; only the checks of device placement and of the CUDA runtime fail there.
#ifdef TANDEM_GPU_TEST_DRY_RUN
inline Device gpu() { return Device::cpu(); }
#else
inline Device gpu() { return Device::cuda(0); }
#endif
inline Device cpu() { return Device::cpu(); }

// ---- tolerances ----

// An element passes when |gpu - cpu| <= atol + rtol * |cpu|. NaN matches only NaN, an infinity
// only the same infinity. Integer and boolean results are always compared exactly.
struct Tolerance {
  double rtol = 0, atol = 0;
};
constexpr Tolerance kExact{0, 0};

// rtol = atol = tol: for values of magnitude around 1.
inline Tolerance near(double tol) { return Tolerance{tol, tol}; }

// The tolerance for an op's result in `dtype`: f32 and f64 given separately, exact otherwise.
inline Tolerance for_dtype(DType dtype, Tolerance f32, Tolerance f64) {
  switch (dtype) {
    case DType::f32: return f32;
    case DType::f64: return f64;
    default: return kExact;
  }
}
inline Tolerance for_dtype(DType dtype, double f32_tol, double f64_tol) {
  return for_dtype(dtype, near(f32_tol), near(f64_tol));
}

// ---- inputs (always made on the CPU, from their own seeded generator) ----

// Uniform in [low, high).
inline Tensor uniform(const Shape& shape, std::uint64_t seed, double low = -1, double high = 1,
                      DType dtype = DType::f32) {
  tandem::Generator generator(seed);
  return tandem::rand_uniform(shape, generator, low, high, dtype);
}

// Magnitudes in [low, high) with random signs: away from the kinks and poles at 0.
inline Tensor away_from_zero(const Shape& shape, std::uint64_t seed, double low = 0.2, double high = 1.5,
                             DType dtype = DType::f32) {
  tandem::Generator generator(seed);
  std::vector<double> values(static_cast<std::size_t>(tandem::shape_numel(shape)));
  for (double& v : values) {
    const double magnitude = generator.uniform(low, high);
    v = generator.uniform(0, 1) < 0.5 ? -magnitude : magnitude;
  }
  return tandem::from_vector<double>(values, shape).to(dtype);
}

// Integers drawn uniformly from [low, high] (inclusive), stored as `dtype` (floating dtypes
// hold them exactly; boolean takes low = 0, high = 1). Small ranges make many ties.
inline Tensor random_ints(const Shape& shape, std::uint64_t seed, std::int64_t low, std::int64_t high,
                          DType dtype = DType::i64) {
  tandem::Generator generator(seed);
  const std::uint64_t span = static_cast<std::uint64_t>(high - low + 1);
  std::vector<std::int64_t> values(static_cast<std::size_t>(tandem::shape_numel(shape)));
  for (std::int64_t& v : values) v = low + static_cast<std::int64_t>(generator.next() % span);
  return tandem::from_vector<std::int64_t>(values, shape).to(dtype);
}

// Multiples of 1/4 in [-1, 1]. Every partial sum of up to 2^22 of them is exactly
// representable in f32, so sums, means and dot products of such data are exact in any order
// of accumulation: GPU and CPU must then agree bit for bit, and a lost or doubled element
// shows up at once.
inline Tensor quarters(const Shape& shape, std::uint64_t seed, DType dtype = DType::f32) {
  return tandem::mul(random_ints(shape, seed, -4, 4, DType::f64), 0.25).to(dtype);
}

// 0, 1, 2, ... in the given shape and dtype.
inline Tensor iota(const Shape& shape, DType dtype = DType::f32) {
  return tandem::arange(0, static_cast<double>(tandem::shape_numel(shape)), 1, dtype).reshape(shape);
}

// ---- moving ----

// A copy on cuda:0 (never the caller's storage, also in a dry run).
inline Tensor to_gpu(const Tensor& t) {
  if (!t.defined()) return t;
  const Tensor moved = t.to(gpu());
  return moved.shares_storage_with(t) ? t.clone() : moved;
}
inline Tensor to_cpu(const Tensor& t) { return t.defined() ? t.to(cpu()) : t; }
inline std::vector<Tensor> to_gpu(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(to_gpu(t));
  return out;
}

// ---- comparison ----

inline std::string index_str(std::int64_t flat, const Shape& shape) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 0) continue;
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return tandem::shape_str(index);
}

// Empty when `got` (a GPU result; on cuda:0 unless got_on_gpu is false) matches the CPU result
// `want` in definedness, shape, dtype and values within tol; otherwise what differs, with the
// first bad element and the worst one.
inline std::string mismatch(const Tensor& got, const Tensor& want, Tolerance tol, bool got_on_gpu = true) {
  std::ostringstream out;
  out.precision(17);
  if (got.defined() != want.defined()) {
    out << "the GPU result is " << (got.defined() ? "defined" : "undefined") << " but the CPU result is "
        << (want.defined() ? "defined" : "undefined");
    return out.str();
  }
  if (!got.defined()) return "";
  if (got_on_gpu && got.device() != gpu()) return "the GPU result " + got.description() + " is not on cuda:0";
  if (!want.device().is_cpu()) return "the CPU result " + want.description() + " is not on the CPU";
  if (got.shape() != want.shape() || got.dtype() != want.dtype())
    return "GPU result " + got.description() + " vs CPU result " + want.description();
  const std::int64_t n = want.numel();
  if (want.dtype() == DType::i64 || want.dtype() == DType::i32 || want.dtype() == DType::boolean) {
    // Exactly, and without a detour through double (i64 beyond 2^53).
    const std::vector<std::int64_t> g = got.to_vector<std::int64_t>(), w = want.to_vector<std::int64_t>();
    std::int64_t bad = 0, first = -1;
    for (std::int64_t i = 0; i < n; ++i)
      if (g[i] != w[i] && bad++ == 0) first = i;
    if (bad == 0) return "";
    out << bad << " of " << n << " elements of " << want.description() << " differ; first at "
        << index_str(first, want.shape()) << ": GPU " << g[first] << ", CPU " << w[first];
    return out.str();
  }
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  std::int64_t bad = 0, first = -1, worst = -1;
  double worst_excess = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    bool ok;
    double excess = 0;
    if (std::isnan(g[i]) || std::isnan(w[i])) {
      ok = std::isnan(g[i]) && std::isnan(w[i]);
    } else if (std::isinf(g[i]) || std::isinf(w[i])) {
      ok = g[i] == w[i];
    } else {
      const double error = std::abs(g[i] - w[i]), allowed = tol.atol + tol.rtol * std::abs(w[i]);
      ok = error <= allowed;
      excess = error - allowed;
    }
    if (ok) continue;
    if (bad++ == 0) first = i;
    if (worst < 0 || excess > worst_excess) worst = i, worst_excess = excess;
  }
  if (bad == 0) return "";
  out << bad << " of " << n << " elements of " << want.description() << " differ beyond rtol " << tol.rtol
      << ", atol " << tol.atol << "; first at " << index_str(first, want.shape()) << ": GPU " << g[first]
      << ", CPU " << w[first] << "; worst at " << index_str(worst, want.shape()) << ": GPU " << g[worst] << ", CPU "
      << w[worst];
  return out.str();
}

// Bitwise equality of two tensors' bytes (wherever they live): reproducibility checks.
inline bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ha = to_cpu(a), hb = to_cpu(b);
  return a.nbytes() == 0 || std::memcmp(ha.raw_data(), hb.raw_data(), a.nbytes()) == 0;
}

}  // namespace gpu_test

// REQUIRE_GPU_MATCHES(gpu_result, cpu_result, tolerance): see gpu_test::mismatch.
#define REQUIRE_GPU_MATCHES(gpu_tensor, cpu_tensor, ...) /* tolerance: may contain commas */    \
  do {                                                                                        \
    const std::string gpu_mismatch_ = ::gpu_test::mismatch((gpu_tensor), (cpu_tensor), (__VA_ARGS__)); \
    INFO(gpu_mismatch_);                                                                      \
    REQUIRE(gpu_mismatch_.empty());                                                           \
  } while (0)

#define CHECK_GPU_MATCHES(gpu_tensor, cpu_tensor, ...) /* tolerance: may contain commas */    \
  do {                                                                                        \
    const std::string gpu_mismatch_ = ::gpu_test::mismatch((gpu_tensor), (cpu_tensor), (__VA_ARGS__)); \
    INFO(gpu_mismatch_);                                                                      \
    CHECK(gpu_mismatch_.empty());                                                             \
  } while (0)

namespace gpu_test {

// ---- operations on both devices ----

// Tensors in, tensors out. The inputs are passed by reference so that in-place operations
// (add_, index_put_, optimizer updates) can write into them.
using TensorOp = std::function<std::vector<Tensor>(std::vector<Tensor>&)>;

// Runs op on (clones of) the CPU inputs and on copies of them on cuda:0; requires every output,
// and every input afterwards (what in-place operations wrote), to match within tol.
inline void check_op(const TensorOp& op, const std::vector<Tensor>& inputs, Tolerance tol) {
  std::vector<Tensor> on_gpu = to_gpu(inputs), on_cpu;
  for (const Tensor& t : inputs) on_cpu.push_back(t.defined() ? t.clone() : t);
  const std::vector<Tensor> want = op(on_cpu);
  const std::vector<Tensor> got = op(on_gpu);
  REQUIRE(got.size() == want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    INFO("output " << k);
    REQUIRE_GPU_MATCHES(got[k], want[k], tol);
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    INFO("input " << i << " after the operation");
    REQUIRE_GPU_MATCHES(on_gpu[i], on_cpu[i], tol);
  }
}

// One output or several.
inline std::vector<Tensor> as_outputs(const Tensor& t) { return {t}; }
inline std::vector<Tensor> as_outputs(std::vector<Tensor> ts) { return ts; }

// check_op for a function of one or two tensors returning a tensor or a vector of them.
template <typename Fn>
void check_unary(Fn fn, const Tensor& x, Tolerance tol) {
  check_op([&](std::vector<Tensor>& v) { return as_outputs(fn(v[0])); }, {x}, tol);
}

template <typename Fn>
void check_binary(Fn fn, const Tensor& a, const Tensor& b, Tolerance tol) {
  check_op([&](std::vector<Tensor>& v) { return as_outputs(fn(v[0], v[1])); }, {a, b}, tol);
}

// The message of the tandem::Error that fn throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const tandem::Error& e) {
    return e.what();
  }
  return "";
}

// Requires that op throws tandem::Error on the CPU inputs and on their GPU copies alike (the
// rules are the reference's, whichever side checks them); returns the GPU message.
inline std::string require_same_error(const TensorOp& op, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> on_gpu = to_gpu(inputs), on_cpu;
  for (const Tensor& t : inputs) on_cpu.push_back(t.defined() ? t.clone() : t);
  const std::string cpu_message = error_of([&] { op(on_cpu); });
  INFO("CPU error: " << cpu_message);
  REQUIRE_FALSE(cpu_message.empty());
  const std::string gpu_message = error_of([&] {
    op(on_gpu);
    if (gpu().is_cuda()) tandem::cuda::synchronize(0);  // an asynchronous failure must surface here
  });
  INFO("GPU error: " << gpu_message);
  REQUIRE_FALSE(gpu_message.empty());
  return gpu_message;
}

// ---- differentiable functions on both devices ----

struct GraphResult {
  std::vector<Tensor> outputs;  // the data of every output
  std::vector<Tensor> grads;    // the gradient of every input (undefined where none)
};

// Runs fn on leaves made from the inputs on `device` (floating inputs require a gradient unless
// `constant` says otherwise), seeds every output that requires a gradient with fixed random
// weights (drawn on the host from `seed`: the same on every device), and backpropagates.
inline GraphResult run_graph(const tandem::GradcheckFunction& fn, const std::vector<Tensor>& inputs, Device device,
                             std::uint64_t seed, const std::vector<bool>& constant = {}) {
  Variables leaves;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    const bool differentiable =
        t.defined() && tandem::is_floating(t.dtype()) && !(i < constant.size() && constant[i]);
    leaves.emplace_back(t.defined() ? t.to(device).clone() : t, differentiable);
  }
  const Variables outputs = fn(leaves);
  tandem::Generator generator(seed);
  Variables roots;
  std::vector<Tensor> seeds;
  GraphResult result;
  for (const Variable& y : outputs) {
    result.outputs.push_back(y.defined() ? y.data() : Tensor());
    if (!y.defined() || !tandem::is_floating(y.dtype())) continue;
    const Tensor w = tandem::rand_uniform(y.shape(), generator, -1, 1, y.dtype());
    if (!y.requires_grad()) continue;
    roots.push_back(y);
    seeds.push_back(w.to(device));
  }
  if (!roots.empty()) tandem::backward(roots, seeds);
  for (const Variable& leaf : leaves) result.grads.push_back(leaf.defined() ? leaf.grad() : Tensor());
  return result;
}

// Values and gradients of fn on cuda:0 against the CPU: outputs within value_tol, input
// gradients within grad_tol (and defined exactly where the CPU's are, on the GPU).
inline void check_function(const tandem::GradcheckFunction& fn, const std::vector<Tensor>& inputs,
                           Tolerance value_tol, Tolerance grad_tol, std::uint64_t seed = 7,
                           const std::vector<bool>& constant = {}) {
  const GraphResult want = run_graph(fn, inputs, cpu(), seed, constant);
  const GraphResult got = run_graph(fn, inputs, gpu(), seed, constant);
  REQUIRE(got.outputs.size() == want.outputs.size());
  for (std::size_t k = 0; k < want.outputs.size(); ++k) {
    INFO("output " << k);
    REQUIRE_GPU_MATCHES(got.outputs[k], want.outputs[k], value_tol);
  }
  for (std::size_t i = 0; i < want.grads.size(); ++i) {
    INFO("gradient of input " << i);
    REQUIRE_GPU_MATCHES(got.grads[i], want.grads[i], grad_tol);
  }
}

// ---- numerical gradients of functions that run on the GPU ----

// A differentiable copy to another device: forward moves the data, backward moves the
// gradient back. gradcheck perturbs its inputs in host memory, so the GPU version below keeps
// the inputs on the CPU and puts this copy in front of the function.
class ToDevice : public tandem::FunctionNode {
 public:
  explicit ToDevice(Device device) : device_(device) {}
  std::string name() const override { return "to_device"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    source_ = in[0].device();
    return {in[0].to(device_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    return {gy[0].defined() ? gy[0].to(source_) : Tensor()};
  }

 private:
  Device device_, source_;
};

inline Variable to_device(const Variable& x, Device device) {
  if (!x.defined()) return x;
  return tandem::call<ToDevice>({x}, device)[0];
}

// gradcheck (autograd/gradcheck.h: f64 central differences against backward) of fn running on
// cuda:0. `inputs` are CPU tensors; every evaluation copies them to the GPU through ToDevice
// and the outputs back, so forward and backward of fn itself run on the GPU.
inline tandem::GradcheckResult gradcheck_on_gpu(const tandem::GradcheckFunction& fn, const std::vector<Tensor>& inputs,
                                                const tandem::GradcheckOptions& options = {}) {
  const tandem::GradcheckFunction on_gpu = [&fn](const Variables& xs) {
    Variables moved;
    for (const Variable& x : xs) moved.push_back(to_device(x, gpu()));
    const Variables ys = fn(moved);
    Variables back;
    for (const Variable& y : ys) {
      REQUIRE((!y.defined() || y.device() == gpu()));
      back.push_back(to_device(y, cpu()));
    }
    return back;
  };
  return tandem::gradcheck(on_gpu, inputs, options);
}

}  // namespace gpu_test

// REQUIRE_GPU_GRADCHECK(fn, inputs[, options]): gradcheck of fn on cuda:0, printing the report.
#define REQUIRE_GPU_GRADCHECK(...)                                                         \
  do {                                                                                     \
    const ::tandem::GradcheckResult gpu_gc_ = ::gpu_test::gradcheck_on_gpu(__VA_ARGS__);   \
    INFO("gradcheck on cuda:0:\n" << gpu_gc_.report);                                      \
    REQUIRE(gpu_gc_.ok);                                                                   \
  } while (0)
