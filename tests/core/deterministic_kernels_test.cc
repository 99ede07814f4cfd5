// Deterministic mode's kernels (core/deterministic.h): the bits of every product and
// convolution gradient a model computes do not depend on the number of threads. Each case runs
// at 1, 2, 3 and 4 threads and must give the 1-thread bits.
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>

#include "core/deterministic.h"
#include "core/ops.h"
#include "core/random.h"
#include "core/threads.h"

using namespace tandem;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// Runs `op` at each thread count; every result must equal the first.
void check_threads(const std::string& what, const std::function<Tensor()>& op) {
  const int before = max_threads();
  set_max_threads(1);
  const Tensor one = op();
  for (int threads : {2, 3, 4}) {
    set_max_threads(threads);
    INFO(what << " at " << threads << " threads");
    CHECK(same_bits(op(), one));
  }
  set_max_threads(before);
}

}  // namespace

TEST_CASE("deterministic kernels: products at any thread count") {
  set_deterministic(true);
  Generator g(7);
  struct Case {
    std::int64_t m, n, k;
    bool ta, tb;
  };
  // Forward products, and the weight gradients' (long k = rows, small m x n) where a library may
  // split k over threads.
  for (const Case& c :
       {Case{6, 1000, 784, false, true}, Case{1000, 784, 6, true, false}, Case{64, 64, 8192, true, false},
        Case{16, 16, 65536, true, false}, Case{512, 512, 512, false, false}, Case{3, 5, 7, false, false},
        Case{256, 96, 4096, true, false}}) {
    const Tensor a = randn(c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, g);
    const Tensor b = randn(c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, g);
    check_threads("matmul " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k),
                  [&] { return matmul(a, b, c.ta, c.tb); });
  }
  set_deterministic(false);
}

TEST_CASE("deterministic kernels: convolution gradients at any thread count") {
  set_deterministic(true);
  Generator g(8);
  Conv2DParams p;
  p.pad_y = p.pad_x = 1;
  for (std::int64_t channels : {6, 16, 32}) {
    const Tensor x = randn({8, channels, 14, 14}, g);
    const Tensor w = randn({channels, channels, 3, 3}, g);
    const Tensor gy = randn({8, channels, 14, 14}, g);
    const std::string what = std::to_string(channels) + " channels";
    check_threads("conv2d " + what, [&] { return conv2d(x, w, Tensor(), p); });
    check_threads("conv2d_grad_input " + what, [&] { return conv2d_grad_input(gy, w, x.shape(), p); });
    check_threads("conv2d_grad_weight " + what, [&] { return conv2d_grad_weight(x, gy, w.shape(), p); });
  }
  set_deterministic(false);
}

TEST_CASE("deterministic kernels: layer normalization's parameter gradients at any thread count") {
  set_deterministic(true);
  Generator g(9);
  const Tensor x = randn({4096, 64}, g), gy = randn({4096, 64}, g);
  const Tensor gamma = randn({64}, g), beta = randn({64}, g);
  const LayerNormResult forward = layer_norm_forward(x, gamma, beta, 1e-5);
  check_threads("layer_norm_backward ggamma",
                [&] { return layer_norm_backward(gy, x, gamma, forward.mean, forward.rstd).ggamma; });
  check_threads("layer_norm_backward gbeta",
                [&] { return layer_norm_backward(gy, x, gamma, forward.mean, forward.rstd).gbeta; });
  set_deterministic(false);
}

TEST_CASE("deterministic kernels: the LSTM recurrence at any thread count") {
  set_deterministic(true);
  Generator g(10);
  const std::int64_t B = 32, H = 256, T = 5;
  const std::vector<std::int64_t> batch_sizes(T, B);
  const Tensor projection = randn({T * B, 4 * H}, g), wh = randn({4 * H, H}, g, 0, 0.05);
  const Tensor h0 = randn({B, H}, g), c0 = randn({B, H}, g), ghs = randn({T * B, H}, g);
  auto forward = [&](Tensor& gates, Tensor& hs, Tensor& cs) {
    gates = projection.clone();
    hs = zeros({T * B, H});
    cs = zeros({T * B, H});
    lstm_recurrence_forward_(batch_sizes, gates, wh, h0, c0, hs, cs);
  };
  check_threads("lstm_recurrence_forward_", [&] {
    Tensor gates, hs, cs;
    forward(gates, hs, cs);
    return hs;
  });
  check_threads("lstm_recurrence_backward_", [&] {
    Tensor gates, hs, cs;
    forward(gates, hs, cs);
    Tensor dh = zeros({B, H}), dc = zeros({B, H}), ggates = zeros({T * B, 4 * H});
    lstm_recurrence_backward_(batch_sizes, gates, cs, c0, wh, ghs, dh, dc, ggates);
    return ggates;
  });
  set_deterministic(false);
}
