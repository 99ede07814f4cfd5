// Activation checkpointing (autograd/checkpoint.h): every gradient of a checkpointed region, its
// inputs' and the parameters' read inside it, is bit for bit the one the same computation gives
// without checkpoint (f64, and f32 where the kernels differ), with dropout drawing from the global
// generator and from a generator of its own (the streams after forward and backward are where the
// uncheckpointed run left them), attention's dropout, several inputs and outputs (an integer one,
// one without gradient, one unused), nested checkpoints, a graph run backward twice
// (retain_graph), a forward in eval mode whose backward runs in train mode, one under autocast
// whose backward runs outside it, the regions that run plainly (no recording, no input needing a
// gradient), and the memory a chain of layers saves.
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/checkpoint.h"
#include "autograd/functions.h"
#include "core/storage.h"
#include "tests/core/test_util.h"

using namespace tandem;
using test_util::uniform;

namespace {

// A leaf requiring its gradient, seeded uniform in [-0.5, 0.5).
Variable param(const Shape& shape, std::uint64_t seed, DType dtype) {
  return Variable(uniform(shape, seed, -0.5, 0.5, dtype), true);
}

// Copies of the variables' gradients (undefined where they have none).
std::vector<Tensor> grads_of(const Variables& vs) {
  std::vector<Tensor> out;
  for (const Variable& v : vs) out.push_back(v.grad().defined() ? v.grad().clone() : Tensor());
  return out;
}

void clear(const Variables& vs) {
  for (Variable v : vs) v.cleargrad();
}

// Bit for bit: the same definedness, dtype, shape and values (== on every element).
void require_identical(const Tensor& got, const Tensor& want) {
  REQUIRE(got.defined() == want.defined());
  if (!got.defined()) return;
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  const std::int64_t bad = test_util::first_mismatch(g, w, 0, 0);
  INFO(test_util::mismatch_message(g, w, bad));
  REQUIRE(bad == -1);
}

void require_identical(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("tensor " << i);
    require_identical(got[i], want[i]);
  }
}

bool identical(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].defined() != b[i].defined()) return false;
    if (a[i].defined() && a[i].to_vector<double>() != b[i].to_vector<double>()) return false;
  }
  return true;
}

// A weighted sum, so that every element of y gets a different gradient.
Variable weighted_sum(const Variable& y, std::uint64_t seed) {
  return F::add(F::sum(F::mul(y, Variable(uniform(y.shape(), seed, -1, 1, y.dtype())))), F::sum(F::square(y)));
}

// The parameters of a region of linear, gelu and layer normalisation layers.
struct Mlp {
  Variable W1, b1, gamma, beta, W2, b2;
  Mlp(std::int64_t in, std::int64_t hidden, std::int64_t out, DType dtype)
      : W1(param({hidden, in}, 1, dtype)),
        b1(param({hidden}, 2, dtype)),
        gamma(param({hidden}, 3, dtype)),
        beta(param({hidden}, 4, dtype)),
        W2(param({out, hidden}, 5, dtype)),
        b2(param({out}, 6, dtype)) {}
  Variables params() const { return {W1, b1, gamma, beta, W2, b2}; }
  // linear, gelu, layer norm, linear, tanh, with a residual that reads x a second time when the
  // sizes allow.
  Variable operator()(const Variable& x) const {
    Variable h = F::gelu(F::linear(x, W1, b1));
    h = F::layer_normalization(h, gamma, beta, 1e-5);
    Variable y = F::tanh(F::linear(h, W2, b2));
    if (x.shape() == y.shape()) y = F::add(y, x);
    return y;
  }
};

struct Outcome {
  Tensor y;                          // the region's output
  std::vector<Tensor> grads;         // the input leaf's and the parameters'
  std::vector<std::uint64_t> draws;  // numbers drawn from the streams afterwards
};

void require_same(const Outcome& got, const Outcome& want) {
  {
    INFO("the region's output");
    require_identical(got.y, want.y);
  }
  {
    INFO("the gradients");
    require_identical(got.grads, want.grads);
  }
  REQUIRE(got.draws == want.draws);
}

}  // namespace

TEST_CASE("checkpoint: a region of linear, gelu and layer norm gives bit-identical input and parameter gradients",
          "[checkpoint]") {
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(dtype_name(dtype));
    for (const std::int64_t out : {8, 5}) {  // 8: with the residual (x read twice inside)
      INFO("output size " << out);
      const Mlp mlp(8, 16, out, dtype);
      const Variable x0 = param({6, 8}, 10, dtype);
      const auto run = [&](bool checkpointed) {
        clear(mlp.params());
        clear({x0});
        const Variable x = F::mul(x0, 1.5);  // not a leaf: its gradient flows on to x0
        const Variable y = checkpointed ? checkpoint(mlp, x) : mlp(x);
        if (checkpointed) {
          REQUIRE(y.creator() != nullptr);
          REQUIRE(y.creator()->name() == "checkpoint");
        }
        weighted_sum(y, 20).backward();
        Variables all = mlp.params();
        all.insert(all.begin(), x0);
        return Outcome{y.data().clone(), grads_of(all), {}};
      };
      const Outcome want = run(false);
      for (const Tensor& g : want.grads) REQUIRE(g.defined());
      require_same(run(true), want);
    }
  }
}

TEST_CASE(
    "checkpoint: dropout from the global generator and from a generator of its own: the same masks, and the "
    "streams go on as without checkpoint",
    "[checkpoint]") {
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(dtype_name(dtype));
    const Mlp mlp(8, 16, 8, dtype);
    const Variable x0 = param({6, 8}, 10, dtype);
    Generator own;
    // The generators: listed (as the region draws from `own`), or not (the negative control).
    const auto run = [&](bool checkpointed, bool list_own) {
      TrainModeGuard train(true);
      manual_seed(11);
      own.seed(22);
      clear(mlp.params());
      clear({x0});
      const auto region = [&](const Variable& x) {
        Variable h = F::dropout(F::gelu(F::linear(x, mlp.W1, mlp.b1)), 0.3);  // the global generator
        h = F::layer_normalization(h, mlp.gamma, mlp.beta, 1e-5);
        return F::dropout(F::linear(h, mlp.W2, mlp.b2), 0.5, &own);
      };
      const Variable x = F::mul(x0, 1.5);
      const Variable y =
          checkpointed ? checkpoint(region, x, list_own ? std::vector<Generator*>{&own} : std::vector<Generator*>{})
                       : region(x);
      // Between forward and backward the streams are drawn from again (other layers' dropout).
      std::vector<std::uint64_t> draws{global_generator().next(), own.next()};
      const Variable z = F::dropout(y, 0.2);  // after the region, from the global generator
      weighted_sum(z, 20).backward();
      draws.push_back(global_generator().next());
      draws.push_back(own.next());
      Variables all = mlp.params();
      all.insert(all.begin(), x0);
      return Outcome{y.data().clone(), grads_of(all), draws};
    };
    const Outcome want = run(false, true);
    require_same(run(true, true), want);
    SECTION("a generator the region draws from but not listed is not rewound (the test can tell)") {
      const Outcome unlisted = run(true, false);
      require_identical(unlisted.y, want.y);  // the forward is the same
      REQUIRE_FALSE(identical(unlisted.grads, want.grads));
      REQUIRE(unlisted.draws[3] != want.draws[3]);  // the recompute drew from `own` again
    }
  }
}

TEST_CASE("checkpoint: attention with dropout drawing its seed from its generator", "[checkpoint]") {
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(dtype_name(dtype));
    const std::int64_t B = 2, T = 8, H = 2, d = 4, D = H * d;
    const Variable Wq = param({D, D}, 31, dtype), Wk = param({D, D}, 32, dtype), Wv = param({D, D}, 33, dtype),
                   Wo = param({D, D}, 34, dtype);
    const Variable x0 = param({B, T, D}, 35, dtype);
    Generator own;
    const auto run = [&](bool checkpointed) {
      TrainModeGuard train(true);
      manual_seed(41);
      own.seed(42);
      clear({Wq, Wk, Wv, Wo, x0});
      const auto region = [&](const Variable& x) {
        const Variable rows = F::reshape(x, {B * T, D});
        const auto heads = [&](const Variable& W) {
          return F::transpose(F::reshape(F::linear(rows, W), {B, T, H, d}), {0, 2, 1, 3});
        };
        F::AttentionOptions options;
        options.mask.causal = true;
        options.dropout = 0.25;
        options.generator = &own;
        const Variable a = F::attention(heads(Wq), heads(Wk), heads(Wv), options);  // [B, H, T, d]
        return F::linear(F::reshape(F::transpose(a, {0, 2, 1, 3}), {B * T, D}), Wo);
      };
      const Variable x = F::mul(x0, 2.0);
      const Variable y = checkpointed ? checkpoint(region, x, {&own}) : region(x);
      std::vector<std::uint64_t> draws{own.next()};
      weighted_sum(y, 50).backward();
      draws.push_back(own.next());
      draws.push_back(global_generator().next());
      return Outcome{y.data().clone(), grads_of({x0, Wq, Wk, Wv, Wo}), draws};
    };
    const Outcome want = run(false);
    require_same(run(true), want);
  }
}

TEST_CASE(
    "checkpoint: several inputs and outputs: an integer input, one without gradient beside ones with, an "
    "output the loss does not use",
    "[checkpoint]") {
  const DType dtype = DType::f64;
  const Variable E = param({5, 6}, 61, dtype), W = param({6, 6}, 62, dtype), V = param({6, 6}, 63, dtype);
  const Variable a0 = param({4, 6}, 64, dtype), d = param({4, 6}, 65, dtype);
  const Variable c(uniform({4, 6}, 66, -1, 1, dtype));  // needs no gradient
  const Variable ids(from_vector<std::int64_t>({3, 0, 4, 3}, {4}));
  const auto region = [&](const Variables& xs) {
    const Variable& a = xs[0];
    const Variable& id = xs[1];
    const Variable& cc = xs[2];
    const Variable& dd = xs[3];
    REQUIRE(id.dtype() == DType::i64);
    const Variable o1 = F::gelu(F::linear(F::add(a, F::embed_id(id, E)), W));
    const Variable o2 = F::add(F::mul(F::tanh(cc), dd), F::linear(dd, V));
    const Variable o3 = F::exp(a);        // unused by the loss
    const Variable o4 = F::mul(cc, 3.0);  // from the input without gradient only
    return Variables{o1, o2, o3, o4};
  };
  const auto run = [&](bool checkpointed) {
    clear({E, W, V, a0, d});
    const Variable a = F::mul(a0, 0.5);
    const Variables inputs{a, ids, c, d};
    const Variables outs = checkpointed ? checkpoint(region, inputs) : region(inputs);
    REQUIRE(outs.size() == 4);
    F::add(F::add(weighted_sum(outs[0], 70), weighted_sum(outs[1], 71)), F::sum(outs[3])).backward();
    Outcome o{outs[0].data().clone(), grads_of({a0, d, E, W, V, c, ids}), {}};
    o.grads.push_back(outs[1].data().clone());
    o.grads.push_back(outs[2].data().clone());
    o.grads.push_back(outs[3].data().clone());
    return o;
  };
  const Outcome want = run(false);
  const Outcome got = run(true);
  require_same(got, want);
  REQUIRE_FALSE(got.grads[5].defined());  // c
  REQUIRE_FALSE(got.grads[6].defined());  // ids
  for (int i = 0; i < 5; ++i) REQUIRE(got.grads[i].defined());
}

TEST_CASE("checkpoint: an output that is one of the inputs", "[checkpoint]") {
  const DType dtype = DType::f64;
  const Variable W = param({6, 6}, 81, dtype), x0 = param({3, 6}, 82, dtype);
  const auto region = [&](const Variables& xs) { return Variables{F::tanh(F::linear(xs[0], W)), xs[0]}; };
  const auto run = [&](bool checkpointed) {
    clear({W, x0});
    const Variable x = F::mul(x0, 1.25);
    const Variables outs = checkpointed ? checkpoint(region, {x}) : region({x});
    F::add(weighted_sum(outs[0], 83), weighted_sum(outs[1], 84)).backward();
    return Outcome{outs[0].data().clone(), grads_of({x0, W}), {}};
  };
  require_same(run(true), run(false));
}

TEST_CASE("checkpoint: nested checkpoints, with dropout at both levels", "[checkpoint]") {
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(dtype_name(dtype));
    const Mlp outer(8, 16, 8, dtype);
    const Mlp inner(8, 12, 8, dtype);
    const Variable x0 = param({5, 8}, 90, dtype);
    Generator own;
    // inner_ckpt / outer_ckpt: which of the two levels is checkpointed.
    const auto run = [&](bool outer_ckpt, bool inner_ckpt) {
      TrainModeGuard train(true);
      manual_seed(91);
      own.seed(92);
      clear(outer.params());
      clear(inner.params());
      clear({x0});
      const auto inner_region = [&](const Variable& h) { return F::dropout(inner(h), 0.4, &own); };
      const auto outer_region = [&](const Variable& x) {
        Variable h = F::dropout(F::gelu(F::linear(x, outer.W1, outer.b1)), 0.3);  // 16 wide
        h = F::layer_normalization(h, outer.gamma, outer.beta, 1e-5);
        h = F::linear(h, outer.W2, outer.b2);  // 8 wide
        h = inner_ckpt ? checkpoint(inner_region, h, {&own}) : inner_region(h);
        return F::dropout(F::tanh(h), 0.2);
      };
      const Variable x = F::mul(x0, 1.5);
      const Variable y = outer_ckpt ? checkpoint(outer_region, x, {&own}) : outer_region(x);
      std::vector<std::uint64_t> draws{global_generator().next(), own.next()};
      weighted_sum(y, 93).backward();
      draws.push_back(global_generator().next());
      draws.push_back(own.next());
      Variables all = outer.params();
      for (const Variable& p : inner.params()) all.push_back(p);
      all.insert(all.begin(), x0);
      return Outcome{y.data().clone(), grads_of(all), draws};
    };
    const Outcome want = run(false, false);
    {
      INFO("inner only");
      require_same(run(false, true), want);
    }
    {
      INFO("outer only");
      require_same(run(true, false), want);
    }
    {
      INFO("both");
      require_same(run(true, true), want);
    }
  }
}

TEST_CASE("checkpoint: backward twice through a retained graph accumulates as without checkpoint", "[checkpoint]") {
  const DType dtype = DType::f64;
  const Mlp mlp(8, 16, 8, dtype);
  const Variable x0 = param({6, 8}, 100, dtype);
  Generator own;
  const auto run = [&](bool checkpointed) {
    TrainModeGuard train(true);
    manual_seed(101);
    own.seed(102);
    clear(mlp.params());
    clear({x0});
    const auto region = [&](const Variable& x) { return F::dropout(mlp(F::dropout(x, 0.25)), 0.5, &own); };
    const Variable x = F::mul(x0, 1.5);
    const Variable y = checkpointed ? checkpoint(region, x, {&own}) : region(x);
    const Variable loss = weighted_sum(y, 103);
    BackwardOptions retain;
    retain.retain_graph = true;
    loss.backward(retain);
    std::vector<std::uint64_t> draws{global_generator().next(), own.next()};
    Variables all = mlp.params();
    all.insert(all.begin(), x0);
    std::vector<Tensor> once = grads_of(all);
    loss.backward(retain);
    draws.push_back(global_generator().next());
    draws.push_back(own.next());
    std::vector<Tensor> twice = grads_of(all);
    // Twice the once (exactly: g + g).
    for (std::size_t i = 0; i < once.size(); ++i) require_identical(twice[i], add(once[i], once[i]));
    once.insert(once.end(), twice.begin(), twice.end());
    return Outcome{y.data().clone(), once, draws};
  };
  require_same(run(true), run(false));
}

TEST_CASE("checkpoint: a forward in eval mode recomputes in eval mode, though backward runs in train mode",
          "[checkpoint]") {
  const DType dtype = DType::f64;
  const Mlp mlp(8, 16, 8, dtype);
  const Variable x0 = param({6, 8}, 110, dtype);
  Generator own;
  const auto region = [&](const Variable& x) { return F::dropout(mlp(F::dropout(x, 0.5)), 0.5, &own); };
  const auto run = [&](bool checkpointed) {
    manual_seed(111);
    own.seed(112);
    clear(mlp.params());
    clear({x0});
    const Variable x = F::mul(x0, 1.5);
    Variable y;
    {
      TrainModeGuard eval(false);
      y = checkpointed ? checkpoint(region, x, {&own}) : region(x);
    }
    REQUIRE(train_mode());
    weighted_sum(y, 113).backward();
    Variables all = mlp.params();
    all.insert(all.begin(), x0);
    return Outcome{y.data().clone(), grads_of(all), {global_generator().next(), own.next()}};
  };
  const Outcome want = run(false);
  // Dropout was the identity: the same as the region without it.
  {
    manual_seed(111);
    own.seed(112);
    REQUIRE(want.draws == std::vector<std::uint64_t>{global_generator().next(), own.next()});
  }
  require_same(run(true), want);
}

TEST_CASE("checkpoint: a forward under autocast recomputes under it, though backward runs outside it", "[checkpoint]") {
  const Mlp mlp(8, 16, 8, DType::f32);
  const Variable x0 = param({6, 8}, 130, DType::f32);
  const auto run = [&](bool checkpointed, std::optional<DType> autocast) {
    clear(mlp.params());
    clear({x0});
    const Variable x = F::mul(x0, 1.5);
    Variable y;
    {
      AutocastScope scope(autocast);
      y = checkpointed ? checkpoint(mlp, x) : mlp(x);
    }
    REQUIRE_FALSE(autocast_dtype().has_value());
    weighted_sum(F::cast(y, DType::f32), 131).backward();
    Variables all = mlp.params();
    all.insert(all.begin(), x0);
    return Outcome{y.data().clone(), grads_of(all), {}};
  };
  const Outcome want = run(false, DType::bf16);
  for (const Tensor& g : want.grads) REQUIRE(g.dtype() == DType::f32);
  // The linear layers ran in bf16: not the f32 result.
  REQUIRE_FALSE(identical({want.y}, {run(false, std::nullopt).y}));
  require_same(run(true, DType::bf16), want);
}

TEST_CASE("checkpoint: with recording off, or no input needing a gradient, the region runs plainly", "[checkpoint]") {
  const DType dtype = DType::f64;
  const Mlp mlp(8, 16, 8, dtype);
  SECTION("recording off") {
    const Variable x = param({6, 8}, 120, dtype);
    Variable y, want;
    {
      NoGradGuard no_grad;
      y = checkpoint(mlp, x);
      want = mlp(x);
    }
    REQUIRE_FALSE(y.requires_grad());
    REQUIRE(y.creator() == nullptr);
    require_identical(y.data(), want.data());
  }
  SECTION("an input that needs no gradient: the parameters inside still get theirs") {
    const Variable x(uniform({6, 8}, 121, -1, 1, dtype));
    const auto run = [&](bool checkpointed) {
      clear(mlp.params());
      const Variable y = checkpointed ? checkpoint(mlp, x) : mlp(x);
      REQUIRE(y.requires_grad());
      REQUIRE(y.creator() != nullptr);
      REQUIRE(y.creator()->name() != "checkpoint");
      weighted_sum(y, 122).backward();
      return Outcome{y.data().clone(), grads_of(mlp.params()), {}};
    };
    const Outcome want = run(false);
    for (const Tensor& g : want.grads) REQUIRE(g.defined());
    require_same(run(true), want);
  }
  SECTION("an integer input only (token ids into an embedding)") {
    const Variable E = param({5, 8}, 123, dtype);
    const Variable ids(from_vector<std::int64_t>({1, 4, 4, 0}, {4}));
    const auto region = [&](const Variable& t) { return mlp(F::embed_id(t, E)); };
    const auto run = [&](bool checkpointed) {
      clear(mlp.params());
      clear({E});
      const Variable y = checkpointed ? checkpoint(region, ids) : region(ids);
      REQUIRE(y.creator()->name() != "checkpoint");
      weighted_sum(y, 124).backward();
      Variables all = mlp.params();
      all.push_back(E);
      return Outcome{y.data().clone(), grads_of(all), {}};
    };
    require_same(run(true), run(false));
  }
}

TEST_CASE("checkpoint: a chain of 8 linear + gelu layers (width 256) keeps half the activations and peaks lower",
          "[checkpoint]") {
  const DType dtype = DType::f32;
  const std::int64_t width = 256, layers = 8;
  Variables Ws, bs;
  for (std::int64_t i = 0; i < layers; ++i) {
    Ws.push_back(Variable(uniform({width, width}, 200 + i, -0.06, 0.06, dtype), true));
    bs.push_back(Variable(uniform({width}, 300 + i, -0.1, 0.1, dtype), true));
  }
  const Device cpu = Device::cpu();
  struct Peaks {
    std::int64_t after_forward = 0;  // live bytes above those before, at the end of the forward
    std::int64_t peak = 0;           // the peak of forward and backward above those before
    std::vector<Tensor> grads;
  };
  // One forward and backward at `batch` rows; every layer its own region when checkpointed.
  // grads_live: the gradients are there before (backward accumulates into them in place), so that
  // the peak is the activations' and the transients'; otherwise they are made during backward.
  const auto measure = [&](std::int64_t batch, bool checkpointed, bool grads_live) {
    const Variable x0 = param({batch, width}, 400, dtype);
    Variables all = Ws;
    all.insert(all.end(), bs.begin(), bs.end());
    all.push_back(x0);
    clear(all);
    if (grads_live)
      for (Variable v : all) v.set_grad(zeros(v.shape(), dtype));
    Peaks out;
    const std::int64_t before = live_storage_bytes(cpu);
    reset_peak_live_storage_bytes(cpu);
    {
      Variable h = x0;
      for (std::int64_t i = 0; i < layers; ++i) {
        const auto layer = [&, i](const Variable& in) { return F::gelu(F::linear(in, Ws[i], bs[i])); };
        h = checkpointed ? checkpoint(layer, h) : layer(h);
      }
      const Variable loss = F::sum(F::square(h));
      h = Variable();
      out.after_forward = live_storage_bytes(cpu) - before;
      loss.backward();
    }
    out.peak = peak_live_storage_bytes(cpu) - before;
    out.grads = grads_of(all);
    return out;
  };
  // Batch 64: the weights' gradients (8 x [256, 256], 2 MiB) outweigh the activations (1 MiB),
  // and the peak of a step whose gradients are made in its backward is at its end, when they all
  // exist and the activations are gone: there checkpointing cannot lower it (its recompute adds
  // a layer's output for a moment). With the gradients live before, and at batch 512 (8 MiB of
  // activations), the peak falls.
  const double activation64 = 64 * width * 4.0;
  const Peaks plain = measure(64, false, false), checkpointed = measure(64, true, false);
  const Peaks plain_live = measure(64, false, true), checkpointed_live = measure(64, true, true);
  const Peaks plain_512 = measure(512, false, false), checkpointed_512 = measure(512, true, false);
  const auto line = [&](const char* what, const Peaks& p, const Peaks& c) {
    std::ostringstream out;
    out << what << ": after forward " << p.after_forward << " B without checkpoint, " << c.after_forward
        << " B with; peak " << p.peak << " B (" << p.peak / activation64 << " [64, 256] activations) without, "
        << c.peak << " B (" << c.peak / activation64 << ") with";
    return out.str();
  };
  const std::string report = line("batch 64, gradients made in backward", plain, checkpointed) + "\n" +
                             line("batch 64, gradients live before", plain_live, checkpointed_live) + "\n" +
                             line("batch 512, gradients made in backward", plain_512, checkpointed_512);
  INFO(report);
  require_identical(checkpointed.grads, plain.grads);
  require_identical(checkpointed_512.grads, plain_512.grads);
  // linear + gelu keeps its input and the pre-activation: checkpointed, the input only.
  CHECK(checkpointed.after_forward * 2 <= plain.after_forward + 1024);
  CHECK(checkpointed_live.peak < plain_live.peak);
  CHECK(checkpointed_512.peak < plain_512.peak);
  WARN(report);
}
