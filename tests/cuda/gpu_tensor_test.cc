// Tensors on cuda:0: moving to and from the device, copies, read-out, conversions, creation,
// empty tensors, device errors, and the caching allocator behind them (cuda/cuda.h).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "tests/cuda/gpu_test_util.h"

using namespace tandem;
using namespace gpu_test;
using Catch::Matchers::Contains;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Values of every dtype that a copy must carry unchanged, edge cases included.
std::vector<Tensor> edge_tensors() {
  const std::int64_t big = (std::int64_t{1} << 53) + 1;  // not representable in double
  return {
      from_vector<float>({0.f, -0.f, 1.5f, -3.25f, 1e-40f /* subnormal */, 3.4e38f, float(kInf), float(-kInf),
                          float(kNaN)},
                         {9}),
      from_vector<double>({0, -0.0, 0.1, -1e300, 4.9e-324, kInf, -kInf, kNaN}, {2, 4}),
      from_vector<std::int32_t>({0, -1, 7, std::numeric_limits<std::int32_t>::min(),
                                 std::numeric_limits<std::int32_t>::max()},
                                {5}),
      from_vector<std::int64_t>({big, -big, std::numeric_limits<std::int64_t>::min(),
                                 std::numeric_limits<std::int64_t>::max(), 0, 42},
                                {3, 2}),
      from_vector<bool>({true, false, false, true, true}, {5, 1}),
      scalar_tensor(2.5, DType::f64),
  };
}

}  // namespace

TEST_CASE("tensors move to cuda:0 and back bit for bit, every dtype", "[tensor][device]") {
  for (const Tensor& host : edge_tensors()) {
    INFO(host.description());
    const Tensor dev = host.to(gpu());
    REQUIRE(dev.device() == gpu());
    REQUIRE(dev.shape() == host.shape());
    REQUIRE(dev.dtype() == host.dtype());
    REQUIRE_THAT(dev.description(), Contains("on cuda:0"));
    REQUIRE_FALSE(dev.shares_storage_with(host));
    REQUIRE(dev.to(gpu()).shares_storage_with(dev));  // already there: the same tensor
    const Tensor back = dev.to(cpu());
    REQUIRE(back.device().is_cpu());
    REQUIRE(same_bytes(back, host));
  }
}

TEST_CASE("creation directly on cuda:0 equals creation on the CPU", "[tensor][device]") {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64, DType::boolean}) {
    INFO(dtype_name(dtype));
    REQUIRE_GPU_MATCHES(zeros({3, 4}, dtype, gpu()), zeros({3, 4}, dtype), kExact);
    REQUIRE_GPU_MATCHES(ones({5}, dtype, gpu()), ones({5}, dtype), kExact);
    // fill converts its value as the CPU does (truncation for integers, non-zero is true).
    for (double value : {3.75, -2.5, 0.0, 1e6}) {
      INFO("full " << value);
      REQUIRE_GPU_MATCHES(full({2, 3}, value, dtype, gpu()), full({2, 3}, value, dtype), kExact);
    }
    REQUIRE_GPU_MATCHES(scalar_tensor(1, dtype, gpu()), scalar_tensor(1, dtype), kExact);
  }
  // Large fills cover many blocks of the fill kernel.
  REQUIRE_GPU_MATCHES(full({3000, 1001}, -0.5, DType::f32, gpu()), full({3000, 1001}, -0.5), kExact);
  REQUIRE_GPU_MATCHES(full({1 << 20}, 7, DType::i64, gpu()), full({1 << 20}, 7, DType::i64), kExact);
  const Tensor like = ones({2, 2}, DType::f64, gpu());
  REQUIRE(zeros_like(like).device() == gpu());
  REQUIRE(full_like(like, 3).device() == gpu());
  REQUIRE_GPU_MATCHES(full_like(like, 3), full({2, 2}, 3, DType::f64), kExact);
  REQUIRE_GPU_MATCHES(arange(-3, 5, 0.5, DType::f32, gpu()), arange(-3, 5, 0.5, DType::f32), kExact);
  REQUIRE_GPU_MATCHES(from_vector<std::int32_t>({1, 2, 3}, {3}, gpu()), from_vector<std::int32_t>({1, 2, 3}, {3}),
                      kExact);
  REQUIRE_GPU_MATCHES(from_vector<bool>({true, false}, {2}, gpu()), from_vector<bool>({true, false}, {2}), kExact);
  // Random tensors are drawn on the host: the same seed gives the same numbers on any device.
  for (DType dtype : {DType::f32, DType::f64}) {
    Generator g1(5), g2(5);
    REQUIRE_GPU_MATCHES(randn({100, 7}, g1, 1, 2, dtype, gpu()), randn({100, 7}, g2, 1, 2, dtype), kExact);
    REQUIRE_GPU_MATCHES(rand_uniform({33}, g1, -3, 3, dtype, gpu()), rand_uniform({33}, g2, -3, 3, dtype), kExact);
  }
}

TEST_CASE("views of GPU tensors: reshape shares storage, slice_rows starts at its offset", "[tensor][view]") {
  const Tensor host = iota({6, 4}, DType::i64);
  const Tensor dev = host.to(gpu());
  const Tensor flat = dev.reshape({24});
  REQUIRE(flat.shares_storage_with(dev));
  REQUIRE(flat.device() == gpu());
  const Tensor rows = dev.slice_rows(2, 5);
  REQUIRE(rows.shares_storage_with(dev));
  REQUIRE(rows.storage_offset() == 8);
  REQUIRE_GPU_MATCHES(rows, host.slice_rows(2, 5).clone(), kExact);
  // A view with an offset moves from its offset (host to device and back).
  const Tensor host_rows = host.slice_rows(3, 6).reshape({3, 2, 2});
  REQUIRE_GPU_MATCHES(host_rows.to(gpu()), host_rows.clone(), kExact);
  // Operations read views from their offset.
  REQUIRE_GPU_MATCHES(add(rows, rows), add(host.slice_rows(2, 5), host.slice_rows(2, 5)), kExact);
  REQUIRE(sum(rows).item() == sum(host.slice_rows(2, 5)).item());
}

TEST_CASE("copy_ between devices and on the device", "[tensor][copy]") {
  const Tensor src = uniform({5, 3}, 1, -1, 1, DType::f64);
  SECTION("host to device into an existing tensor, and back") {
    Tensor dev = zeros({5, 3}, DType::f64, gpu());
    dev.copy_(src);
    REQUIRE(same_bytes(dev, src));
    Tensor host = zeros({5, 3}, DType::f64);
    host.copy_(dev);
    REQUIRE(same_bytes(host, src));
  }
  SECTION("device to device on one device") {
    const Tensor a = src.to(gpu());
    Tensor b = empty({5, 3}, DType::f64, gpu());
    b.copy_(a);
    REQUIRE_FALSE(b.shares_storage_with(a));
    REQUIRE(same_bytes(b, src));
  }
  SECTION("into a row view: only those rows change") {
    Tensor dev = full({6, 3}, -1, DType::f64, gpu());
    Tensor middle = dev.slice_rows(2, 4);
    middle.copy_(src.slice_rows(0, 2));
    Tensor want = full({6, 3}, -1, DType::f64);
    Tensor want_middle = want.slice_rows(2, 4);
    want_middle.copy_(src.slice_rows(0, 2));
    REQUIRE_GPU_MATCHES(dev, want, kExact);
    // and from a device view with an offset into the host
    Tensor host = zeros({2, 3}, DType::f64);
    host.copy_(dev.slice_rows(2, 4));
    REQUIRE(same_bytes(host, src.slice_rows(0, 2).clone()));
  }
  SECTION("clone on the device is an independent copy") {
    Tensor a = to_gpu(src);
    const Tensor c = a.clone();
    REQUIRE(c.device() == gpu());
    REQUIRE_FALSE(c.shares_storage_with(a));
    a.copy_(zeros({5, 3}, DType::f64));
    REQUIRE(same_bytes(c, src));
  }
  SECTION("shape and dtype must match, whatever the devices") {
    Tensor dev = zeros({5, 3}, DType::f32, gpu());
    REQUIRE_THROWS_WITH(dev.copy_(src), Contains("copy_") && Contains("f64[5, 3]") && Contains("f32[5, 3] on cuda:0"));
    Tensor wrong_shape = zeros({3, 5}, DType::f64, gpu());
    REQUIRE_THROWS_AS(wrong_shape.copy_(src), Error);
  }
}

TEST_CASE("item and to_vector read values back from the device", "[tensor][readout]") {
  const Tensor f = from_vector<float>({1.5f, -2.25f, 3.f}, {3}, gpu());
  REQUIRE(f.to_vector<float>() == std::vector<float>{1.5f, -2.25f, 3.f});
  REQUIRE(f.to_vector<double>() == std::vector<double>{1.5, -2.25, 3});
  REQUIRE(f.to_vector<std::int32_t>() == std::vector<std::int32_t>{1, -2, 3});  // converted as on the CPU
  REQUIRE(f.to_vector<bool>() == std::vector<bool>{true, true, true});
  REQUIRE(f.device() == gpu());  // read-out leaves the tensor where it is
  REQUIRE(scalar_tensor(-7, DType::i64, gpu()).item() == -7);
  REQUIRE(ones({1, 1}, DType::boolean, gpu()).item() == 1);
  REQUIRE(sum(f).item() == Approx(2.25));
  REQUIRE_THROWS_WITH(f.item(), Contains("item") && Contains("f32[3] on cuda:0"));
  REQUIRE(zeros({0}, DType::f32, gpu()).to_vector<float>().empty());
}

TEST_CASE("to(dtype) on the GPU converts like the CPU, for every pair of dtypes", "[tensor][dtype]") {
  // In range for every integer type; truncation toward zero, NaN and non-zero values to true.
  const Tensor floats = from_vector<double>({-2.75, -1, -0.5, -0.0, 0, 0.5, 1, 2.999, 127.5, -1e6}, {10});
  const Tensor with_nan = from_vector<double>({kNaN, kInf, -kInf, 0}, {4});
  const Tensor ints = from_vector<std::int64_t>({-100000, -1, 0, 1, 2, 1 << 30}, {2, 3});
  const Tensor bools = from_vector<bool>({true, false, true}, {3});
  const std::vector<DType> all = {DType::f32, DType::f64, DType::i32, DType::i64, DType::boolean};
  for (DType from : all) {
    for (DType to : all) {
      INFO(dtype_name(from) << " -> " << dtype_name(to));
      const Tensor source = from == DType::boolean ? bools : is_floating(from) ? floats.to(from) : ints.to(from);
      check_unary([to](const Tensor& x) { return x.to(to); }, source, kExact);
      if (is_floating(from) && (is_floating(to) || to == DType::boolean))
        check_unary([to](const Tensor& x) { return x.to(to); }, with_nan.to(from), kExact);
    }
  }
  // Large, with an offset.
  const Tensor big = uniform({1001, 999}, 2, -1000, 1000, DType::f64);
  check_unary([](const Tensor& x) { return x.slice_rows(1, 1001).to(DType::i32); }, big, kExact);
  check_unary([](const Tensor& x) { return x.to(DType::f32); }, big, kExact);
}

TEST_CASE("zero-sized tensors on the GPU pass through operations", "[tensor][empty]") {
  const Tensor z = zeros({0, 3}, DType::f32, gpu());
  REQUIRE(z.numel() == 0);
  REQUIRE(z.device() == gpu());
  REQUIRE(z.to(cpu()).shape() == Shape{0, 3});
  REQUIRE(z.clone().shape() == Shape{0, 3});
  REQUIRE(z.to(DType::i64).device() == gpu());
  REQUIRE((z + ones({3}, DType::f32, gpu())).shape() == Shape{0, 3});
  REQUIRE(exp(z).shape() == Shape{0, 3});
  REQUIRE(less(z, 1.0).dtype() == DType::boolean);
  REQUIRE(sum(z).item() == 0);
  REQUIRE_GPU_MATCHES(sum(z, {0}), zeros({3}), kExact);
  REQUIRE(max(z, {1}).shape() == Shape{0});
  REQUIRE_GPU_MATCHES(matmul(z, ones({3, 2}, DType::f32, gpu())), zeros({0, 2}), kExact);
  REQUIRE_GPU_MATCHES(matmul(zeros({2, 0}, DType::f32, gpu()), zeros({0, 3}, DType::f32, gpu())), zeros({2, 3}),
                      kExact);
  REQUIRE(transpose(z).shape() == Shape{3, 0});
  REQUIRE(broadcast_to(z, {4, 0, 3}).shape() == Shape{4, 0, 3});
  REQUIRE_GPU_MATCHES(concat({z, ones({2, 3}, DType::f32, gpu())}), ones({2, 3}), kExact);
  REQUIRE(index(z, {Index::all(), Index::at(1)}).shape() == Shape{0});
  REQUIRE(where(less(z, 0.0), z, z).shape() == Shape{0, 3});
  Tensor target = zeros({0, 3}, DType::f32, gpu());
  target.copy_(zeros({0, 3}));
  add_(target, ones({3}, DType::f32, gpu()));
  REQUIRE(target.numel() == 0);
}

TEST_CASE("operands on different devices are an error naming both", "[tensor][errors]") {
  const Tensor host = ones({2, 3});
  const Tensor dev = ones({2, 3}, DType::f32, gpu());
  // Named matchers, combined inside each assertion: Catch2's `a && b` keeps pointers to a and b,
  // so a combination stored in a variable outlives its temporaries (this segfaulted on the GPU).
  const auto on_cpu = Contains("cpu");
  const auto on_gpu = Contains("cuda:0");
  REQUIRE_THROWS_WITH(add(host, dev), Contains("add") && Contains("different devices") && on_cpu && on_gpu);
  REQUIRE_THROWS_WITH(dev * host, Contains("mul") && on_cpu && on_gpu);
  REQUIRE_THROWS_WITH(matmul(dev, host, false, true), Contains("matmul") && on_cpu && on_gpu);
  REQUIRE_THROWS_WITH(where(less(host, 0.0), dev, dev), Contains("where") && on_cpu && on_gpu);
  REQUIRE_THROWS_WITH(concat({host, dev}), Contains("concat") && on_cpu && on_gpu);
  Tensor target = zeros({2, 3}, DType::f32, gpu());
  REQUIRE_THROWS_WITH(add_(target, host), Contains("add_") && on_cpu && on_gpu);
  const Tensor ids = from_vector<std::int64_t>({0, 1}, {2});
  REQUIRE_THROWS_WITH(take_rows(dev, ids), on_cpu && on_gpu);
  // Differentiable functions check too, naming what is where.
  REQUIRE_THROWS_WITH(F::linear(Variable(host), Variable(dev)), on_cpu && on_gpu);
  REQUIRE_THROWS_WITH(F::embed_id(Variable(ids), Variable(dev)),
                      Contains("embed_id") && Contains("ids on cpu") && Contains("cuda:0"));
  REQUIRE_THROWS_WITH(F::softmax_cross_entropy(Variable(dev), Variable(ids)),
                      Contains("softmax_cross_entropy") && on_cpu && on_gpu);
  // Copies across devices are explicit and allowed.
  Tensor host_copy = zeros({2, 3});
  REQUIRE_NOTHROW(host_copy.copy_(dev));
}

TEST_CASE("a device that does not exist is an error naming it", "[tensor][errors]") {
  const int missing = cuda::device_count();
  const std::string name = "cuda:" + std::to_string(missing);
  REQUIRE_THROWS_WITH(zeros({2}, DType::f32, Device::cuda(missing)), Contains(name));
  REQUIRE_THROWS_WITH(ones({2}).to(Device::cuda(missing)), Contains(name));
  REQUIRE_THROWS_WITH(cuda::memory_stats(missing), Contains(name));
  REQUIRE_THROWS_WITH(cuda::synchronize(missing), Contains(name));
  REQUIRE_THROWS_WITH(cuda::require_device(missing, "my_op"), Contains("my_op") && Contains(name));
  REQUIRE_NOTHROW(cuda::require_device(0, "my_op"));
  REQUIRE(cuda::built_with_cuda());
  REQUIRE(cuda::unavailable_reason().empty());
}

TEST_CASE("GPU memory comes from the caching allocator and is reused", "[tensor][memory]") {
  cuda::synchronize(0);
  cuda::empty_cache(0);
  const cuda::MemoryStats before = cuda::memory_stats(0);
  REQUIRE(before.cached_bytes == 0);
  constexpr std::size_t kBytes = std::size_t(4) << 20;  // a multiple of the 128 KiB granule
  const void* first = nullptr;
  {
    const Tensor t({static_cast<std::int64_t>(kBytes / 4)}, DType::f32, gpu());
    first = t.raw_data();
    const cuda::MemoryStats during = cuda::memory_stats(0);
    REQUIRE(during.in_use_bytes == before.in_use_bytes + kBytes);
    REQUIRE(during.raw_allocations == before.raw_allocations + 1);
    REQUIRE(during.peak_in_use_bytes >= during.in_use_bytes);
  }
  const cuda::MemoryStats after = cuda::memory_stats(0);
  REQUIRE(after.in_use_bytes == before.in_use_bytes);
  REQUIRE(after.cached_bytes == kBytes);
  {
    // The same size again: the cached block, no new cudaMalloc.
    const Tensor u({static_cast<std::int64_t>(kBytes / 8)}, DType::f64, gpu());
    REQUIRE(u.raw_data() == first);
    REQUIRE(cuda::memory_stats(0).raw_allocations == before.raw_allocations + 1);
    REQUIRE(cuda::memory_stats(0).cached_bytes == 0);
  }
  cuda::empty_cache(0);
  REQUIRE(cuda::memory_stats(0).cached_bytes == 0);
  REQUIRE(cuda::memory_stats(0).in_use_bytes == before.in_use_bytes);
  // Work after empty_cache still runs (new blocks come from the driver again).
  REQUIRE_GPU_MATCHES(full({1000}, 2, DType::f32, gpu()) * 3.0, full({1000}, 6), kExact);
  // Many short-lived temporaries of one size stay within a couple of blocks.
  const cuda::MemoryStats start = cuda::memory_stats(0);
  Tensor acc = zeros({1 << 18}, DType::f32, gpu());
  for (int i = 0; i < 50; ++i) acc = acc + 1.0;
  REQUIRE(cuda::memory_stats(0).raw_allocations <= start.raw_allocations + 2);
  REQUIRE(acc.to_vector<float>()[12345] == 50.f);
}

TEST_CASE("synchronize and the TF32 switch", "[tensor][runtime]") {
  REQUIRE_NOTHROW(cuda::synchronize(0));
  REQUIRE_FALSE(cuda::allow_tf32());  // exact FP32 products unless asked
  cuda::set_allow_tf32(true);
  REQUIRE(cuda::allow_tf32());
  cuda::set_allow_tf32(false);
  REQUIRE_FALSE(cuda::allow_tf32());
}

TEST_CASE("pin_memory gives page-locked host tensors that move to and from the GPU", "[tensor][pinned]") {
  Generator gen(5);
  const Tensor x = randn({257, 33}, gen);
  const Tensor pinned = x.pin_memory();
  REQUIRE(pinned.is_pinned());  // a GPU is present, so the CUDA backend's pinned allocator serves it
  REQUIRE(pinned.device() == Device::cpu());
  REQUIRE(pinned.to_vector<float>() == x.to_vector<float>());
  const Tensor on_gpu = pinned.to(gpu());
  Tensor back = empty_pinned(x.shape());
  back.copy_(on_gpu);
  REQUIRE(back.is_pinned());
  REQUIRE(back.to_vector<float>() == x.to_vector<float>());
  REQUIRE(on_gpu.pin_memory().to_vector<float>() == x.to_vector<float>());
}

namespace {

// Bit for bit, except that a NaN matches any NaN (the NaN a conversion makes need not carry the
// same payload on both backends).
void require_same_values(const Tensor& got, const Tensor& want) {
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.numel() == want.numel());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      REQUIRE(std::isnan(g[i]));
    } else {
      INFO("element " << i << ": " << g[i] << " against " << w[i]);
      REQUIRE(std::signbit(g[i]) == std::signbit(w[i]));
      REQUIRE(g[i] == w[i]);
    }
  }
}

std::vector<std::uint16_t> every_16_bit_pattern() {
  std::vector<std::uint16_t> all(1 << 16);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  return all;
}

}  // namespace

TEST_CASE("bf16 and f16 on cuda:0: conversions give the CPU's values, fills and copies its bits",
          "[tensor][device][half]") {
  const std::vector<std::uint16_t> all = every_16_bit_pattern();
  // A spread of f32 patterns (an odd stride meets every exponent and low-bit residue), and
  // f64 values beside the 16-bit midpoints, where rounding twice would go wrong.
  std::vector<std::uint32_t> f32_bits;
  for (std::uint64_t b = 0; b < (std::uint64_t(1) << 32); b += 65537 * 3) f32_bits.push_back(static_cast<std::uint32_t>(b));
  const Tensor f32s = from_buffer(f32_bits.data(), {static_cast<std::int64_t>(f32_bits.size())}, DType::f32);
  std::vector<double> f64s;
  for (int e = -30; e <= 16; ++e)
    for (int s = 0; s < 128; s += 7) {
      const double mid = std::ldexp(1024 + 2 * s + 1, e - 11);  // an f16 midpoint (and bf16's nearby)
      f64s.insert(f64s.end(), {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300), -mid, mid * (1 + 1e-9)});
    }
  const Tensor doubles = from_vector<double>(f64s);
  const Tensor ints = from_vector<std::int64_t>({0, 7, -65520, 65519, (std::int64_t(1) << 60) + (std::int64_t(1) << 52) + 1,
                                                 std::numeric_limits<std::int64_t>::min()});
  for (DType half : {DType::bf16, DType::f16}) {
    INFO(dtype_name(half));
    const Tensor patterns = from_buffer(all.data(), {static_cast<std::int64_t>(all.size())}, half);
    for (DType to : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::boolean}) {
      INFO("to " << dtype_name(to));
      require_same_values(patterns.to(gpu()).to(to), patterns.to(to));
    }
    for (const Tensor& from : {f32s, doubles, ints}) {
      INFO("from " << from.description());
      require_same_values(from.to(gpu()).to(half), from.to(half));
    }
    for (double value : {0.1, -65519.0, 65520.0, 1e-7, -0.0}) {
      INFO("full " << value);
      REQUIRE(same_bytes(full({5}, value, half, gpu()).to(cpu()), full({5}, value, half)));
    }
    const Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).to(half);
    REQUIRE(same_bytes(x.to(gpu()).to(cpu()), x));
    REQUIRE(same_bytes(transpose(x.to(gpu())).to(cpu()), transpose(x)));
    REQUIRE(same_bytes(concat({x.to(gpu()), x.to(gpu())}, 1).to(cpu()), concat({x, x}, 1)));
    const Tensor cond = from_vector<bool>({true, false, true});
    REQUIRE(same_bytes(where(cond.to(gpu()), x.to(gpu()), zeros_like(x).to(gpu())).to(cpu()),
                       where(cond, x, zeros_like(x))));
  }
}

TEST_CASE("bf16 and f16 operations on cuda:0 compute in f32 as the CPU's do", "[tensor][device][half]") {
  for (DType half : {DType::bf16, DType::f16}) {
    INFO(dtype_name(half));
    // The f32 kernels of the two backends may differ in their last f32 bits (exp, the order of a
    // sum); rounded to 16 bits that is at most one unit in the last place.
    const double ulp = std::ldexp(1.0, half == DType::bf16 ? -7 : -10);
    auto require_close = [&](const Tensor& on_gpu, const Tensor& on_cpu) {
      REQUIRE(on_gpu.device() == gpu());
      REQUIRE(on_gpu.dtype() == on_cpu.dtype());
      const std::vector<double> g = on_gpu.to_vector<double>(), c = on_cpu.to_vector<double>();
      REQUIRE(g.size() == c.size());
      for (std::size_t i = 0; i < g.size(); ++i) {
        INFO("element " << i << ": " << g[i] << " on the GPU, " << c[i] << " on the CPU");
        REQUIRE(std::fabs(g[i] - c[i]) <= ulp * std::fabs(c[i]) + 1e-30);
      }
    };
    const Tensor a = uniform({8, 33}, 71, -2, 2).to(half), b = uniform({33, 5}, 72, -2, 2).to(half);
    const Tensor ga = a.to(gpu()), gb = b.to(gpu());
    require_close(add(ga, ga), add(a, a));
    require_close(exp(ga), exp(a));
    require_close(mul(ga, 0.1), mul(a, 0.1));
    require_close(matmul(ga, gb), matmul(a, b));
    require_close(sum(ga, {1}), sum(a, {1}));
    require_close(softmax_last_axis(ga, 1.0, false), softmax_last_axis(a, 1.0, false));
    REQUIRE(less(ga, 0.5).to(cpu()).to_vector<bool>() == less(a, 0.5).to_vector<bool>());
  }
}
