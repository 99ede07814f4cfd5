// Training-step and inference benchmarks for the workloads of ../shared/bench/README.md:
//   mlp.train.{sgd,adam}.t{1,2}, mlp.infer.t{1,2}: 784-1000-1000-10 ReLU MLP, batch 100,
//   softmax cross-entropy, SGD lr 0.01 / Adam lr 1e-3, 20 random batches cycled.
//   conv.train.sgd.t{1,2}, conv.infer.t{1,2}: 64x1x28x28 through conv3x3(64)-relu-conv3x3(64)-relu-
//   maxpool2-conv3x3(128)-relu-conv3x3(128)-relu-maxpool2-linear(6272->10) (all convs pad 1),
//   softmax cross-entropy, MomentumSGD(0.01, 0.9).
//   lstm.fixed.train.adam.t{1,2}: embedding 1000->256, 2-layer LSTM(256), linear 256->1000 and
//   cross-entropy over all tokens, batch 64 of length 25, Adam 1e-3; lstm.packed: lengths
//   uniform in [5, 25]; seq2seq.train.adam: an encoder LSTM whose final (h, c) start a decoder
//   LSTM over 25 target tokens (teacher forcing).
// A training step is clear grads + forward + loss + backward + update, as in the anchors. The
// models apply F::relu to their layers' outputs as the anchors do (tandem takes each ReLU into the
// layer before it, in place: autograd/functions/fused_activation.h); BENCH_FUSED=1 builds them
// with the layers' activation option instead (a post-op inside oneDNN's convolutions), ids
// mlp.*.fused.t<n> and conv.*.fused.t<n>. BENCH_DTYPE=mixed_bf16 runs them under autocast
// (ids + .mixed_bf16).
//
//   OMP_WAIT_POLICY=PASSIVE bazel run //bench:train_step_bench
//   BENCH_ONLY=mlp BENCH_THREADS=1 bazel run //bench:train_step_bench
//
// On a GPU (BENCH_DEVICE=cuda:0, in a --config=cuda build; scripts/bench_gpu.sh runs it beside raw
// cuBLAS/cuDNN and PyTorch) the same workloads run there: the model is moved with Link::to, the
// batches are copied to the device once before timing, and every timed call ends with the device
// idle (a training step reads its loss back with item(), which waits; inference synchronizes).
// The ids end in .gpu instead of .t<threads> (mlp.train.sgd.gpu, ...), more iterations are
// timed, exact FP32; BENCH_TF32=1 adds the same with TF32 allowed (ids .gpu.tf32). The CNN runs
// twice there: in tandem's default choice of cuDNN algorithms (deterministic, direct algorithms
// only, cuDNN's heuristics: conv.train.sgd.gpu, conv.infer.gpu) and in PyTorch's default one
// (cuda::set_cudnn_benchmark, atomics allowed, FFT/Winograd admitted, products still exact FP32:
// the same ids + .torchmode). bench/torch_gpu_bench.py prints PyTorch under both ids.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "autograd/autocast.h"
#include "autograd/functions.h"
#include "bench/bench_util.h"
#include "core/ops.h"
#include "layers/links/convolution_2d.h"
#include "layers/links/embed_id.h"
#include "layers/links/linear.h"
#include "layers/links/n_step_lstm.h"
#include "layers/optimizers/adam.h"
#include "layers/optimizers/sgd.h"

using namespace tandem;

namespace {

bool selected(const char* family) {
  const char* only = std::getenv("BENCH_ONLY");
  return only == nullptr || std::strstr(only, family) != nullptr;
}

// BENCH_FUSED=1: the layers apply their ReLU themselves (LinearOptions / Convolution2DOptions).
bool fused_layers() {
  const char* fused = std::getenv("BENCH_FUSED");
  return fused != nullptr && std::strcmp(fused, "1") == 0;
}
// BENCH_DTYPE=mixed_bf16: every step under AutocastScope(bf16) (f32 parameters, products in bf16:
// docs/mixed-precision.md); the ids gain .mixed_bf16 after the layer suffix.
bool mixed_bf16() {
  const char* dtype = std::getenv("BENCH_DTYPE");
  if (dtype == nullptr || *dtype == 0 || std::strcmp(dtype, "f32") == 0) return false;
  TANDEM_CHECK(std::strcmp(dtype, "mixed_bf16") == 0, "BENCH_DTYPE: f32 or mixed_bf16, got '", dtype, "'");
  return true;
}
const char* fused_suffix() {
  static const std::string suffix = std::string(fused_layers() ? ".fused" : "") + (mixed_bf16() ? ".mixed_bf16" : "");
  return suffix.c_str();
}

class MLP : public Chain {
 public:
  MLP(std::int64_t in, std::int64_t units, std::int64_t out) {
    LinearOptions hidden;
    if (fused_layers()) hidden.activation = F::Activation::relu;
    l1_ = add_link("l1", std::make_shared<Linear>(in, units, hidden));
    l2_ = add_link("l2", std::make_shared<Linear>(units, units, hidden));
    l3_ = add_link("l3", std::make_shared<Linear>(units, out));
  }
  Variable forward(const Variable& x) override {
    if (fused_layers()) return (*l3_)((*l2_)((*l1_)(x)));
    return (*l3_)(F::relu((*l2_)(F::relu((*l1_)(x)))));
  }

 private:
  std::shared_ptr<Linear> l1_, l2_, l3_;
};

void mlp_benchmarks(const bench::Target& t) {
  const int B = 100, IN = 784, U = 1000, OUT = 10, NB = 20;
  const double forward_flops = 2.0 * B * (double(IN) * U + double(U) * U + double(U) * OUT);
  // gflops= counts a training step as 3 forwards (the anchors' convention); its products are
  // fewer: no gradient for the input batch, so no [B, U] x [U, IN] product (in LibTorch neither).
  // product_share= is the step's products over that count, for reading gflops= against what a
  // core can retire (scripts/bench.sh's targets table).
  const double step_product_flops = 3 * forward_flops - 2.0 * B * IN * U;
  Generator gen(0);
  std::vector<Variable> xs, ts;
  for (int i = 0; i < NB; ++i) {
    xs.emplace_back(rand_uniform({B, IN}, gen).to(t.device));
    std::vector<std::int64_t> labels(B);
    for (auto& l : labels) l = static_cast<std::int64_t>(gen.next() % OUT);
    ts.emplace_back(from_vector(labels, {B}).to(t.device));
  }
  for (const char* name : {"sgd", "adam"}) {
    manual_seed(0);
    auto model = std::make_shared<MLP>(IN, U, OUT);
    model->to(t.device);
    std::shared_ptr<Optimizer> optimizer;
    if (std::strcmp(name, "sgd") == 0) optimizer = std::make_shared<SGD>(0.01);
    else optimizer = std::make_shared<Adam>(1e-3);
    optimizer->setup(model);
    int it = 0;
    double loss = 0;
    const bench::Stats s = bench::measure(t.gpu() ? 20 : 10, t.iters(60, 200), [&] {
      const int i = it++ % NB;
      Variable step_loss;
      optimizer->update([&] { return step_loss = F::softmax_cross_entropy((*model)(xs[i]), ts[i]); });
      loss = step_loss.data().item();  // the anchors read the loss back every step too
    });
    bench::print_stats(t.id(std::string("mlp.train.") + name + fused_suffix()), t.tags() + " batch=100", s);
    std::printf(" gflops=%.1f product_share=%.3f samples_per_s=%.0f loss=%.3f\n", 3 * forward_flops / (s.median_ms * 1e6),
                step_product_flops / (3 * forward_flops), B / (s.median_ms * 1e-3), loss);
    std::fflush(stdout);
  }
  manual_seed(0);
  MLP model(IN, U, OUT);
  model.to(t.device);
  NoGradGuard no_grad;
  int it = 0;
  const bench::Stats s = bench::measure(t.gpu() ? 20 : 10, t.iters(100, 300), [&] {
    model(xs[it++ % NB]);
    t.wait();
  });
  bench::print_stats(t.id(std::string("mlp.infer") + fused_suffix()), t.tags() + " batch=100", s);
  std::printf(" gflops=%.1f samples_per_s=%.0f\n", forward_flops / (s.median_ms * 1e6), B / (s.median_ms * 1e-3));
  std::fflush(stdout);
}

class SmallVGG : public Chain {
 public:
  SmallVGG() {
    auto three = Convolution2DOptions::make(3, 1, 1);
    if (fused_layers()) three.activation = F::Activation::relu;
    c1_ = add_link("c1", std::make_shared<Convolution2D>(1, 64, three));
    c2_ = add_link("c2", std::make_shared<Convolution2D>(64, 64, three));
    c3_ = add_link("c3", std::make_shared<Convolution2D>(64, 128, three));
    c4_ = add_link("c4", std::make_shared<Convolution2D>(128, 128, three));
    fc_ = add_link("fc", std::make_shared<Linear>(128 * 7 * 7, 10));
  }
  Variable forward(const Variable& x) override {
    if (fused_layers()) {
      const Variable h = F::max_pooling_2d((*c2_)((*c1_)(x)), 2);
      return (*fc_)(F::max_pooling_2d((*c4_)((*c3_)(h)), 2));
    }
    Variable h = F::max_pooling_2d(F::relu((*c2_)(F::relu((*c1_)(x)))), 2);
    h = F::max_pooling_2d(F::relu((*c4_)(F::relu((*c3_)(h)))), 2);
    return (*fc_)(h);
  }

 private:
  std::shared_ptr<Convolution2D> c1_, c2_, c3_, c4_;
  std::shared_ptr<Linear> fc_;
};

// How cuDNN's algorithms are chosen for the CNN on a GPU (the switches of cuda/cuda.h).
struct ConvMode {
  const char* suffix;  // of the ids
  bool deterministic, benchmark, direct_only;
  std::string tags() const {
    return std::string(" deterministic=") + (deterministic ? "1" : "0") +
           " cudnn_benchmark=" + (benchmark ? "1" : "0") + " conv_direct_only=" + (direct_only ? "1" : "0");
  }
};
constexpr ConvMode kTandemMode{"", true, false, true};           // tandem's default: reproducible bits
constexpr ConvMode kTorchMode{".torchmode", false, true, false};  // PyTorch's default (cudnn.benchmark)

// Sets a mode for as long as it lives, then restores the switches as they were.
class ConvModeScope {
 public:
  explicit ConvModeScope(const ConvMode& mode)
      : deterministic_(cuda::deterministic()), benchmark_(cuda::cudnn_benchmark()),
        direct_only_(cuda::conv_direct_only()) {
    cuda::set_deterministic(mode.deterministic);
    cuda::set_cudnn_benchmark(mode.benchmark);
    cuda::set_conv_direct_only(mode.direct_only);
  }
  ~ConvModeScope() {
    cuda::set_deterministic(deterministic_);
    cuda::set_cudnn_benchmark(benchmark_);
    cuda::set_conv_direct_only(direct_only_);
  }
  ConvModeScope(const ConvModeScope&) = delete;
  ConvModeScope& operator=(const ConvModeScope&) = delete;

 private:
  bool deterministic_, benchmark_, direct_only_;
};

void conv_benchmarks(const bench::Target& t, const ConvMode& mode) {
  std::optional<ConvModeScope> scope;  // the switches matter on a GPU only
  if (t.gpu()) scope.emplace(mode);
  const int B = 64, NB = 4;
  auto conv_flops = [](double cin, double cout, double hw) { return 2.0 * B * cin * cout * 9 * hw * hw; };
  const double forward_flops = conv_flops(1, 64, 28) + conv_flops(64, 64, 28) + conv_flops(64, 128, 14) +
                               conv_flops(128, 128, 14) + 2.0 * B * 6272 * 10;
  Generator gen(0);
  std::vector<Variable> xs, ts;
  for (int i = 0; i < NB; ++i) {
    xs.emplace_back(rand_uniform({B, 1, 28, 28}, gen).to(t.device));
    std::vector<std::int64_t> labels(B);
    for (auto& l : labels) l = static_cast<std::int64_t>(gen.next() % 10);
    ts.emplace_back(from_vector(labels, {B}).to(t.device));
  }
  const std::string tags = t.tags() + " batch=64" + (t.gpu() ? mode.tags() : "");
  manual_seed(0);
  auto model = std::make_shared<SmallVGG>();
  model->to(t.device);
  MomentumSGD sgd(0.01, 0.9);
  sgd.setup(model);
  int it = 0;
  double loss = 0;
  const bench::Stats s = bench::measure(t.gpu() ? 5 : 2, t.iters(t.threads == 1 ? 4 : 6, 50), [&] {
    const int i = it++ % NB;
    Variable l;
    sgd.update([&] { return l = F::softmax_cross_entropy((*model)(xs[i]), ts[i]); });
    loss = l.data().item();
  });
  bench::print_stats(t.id(std::string("conv.train.sgd") + fused_suffix()) + mode.suffix, tags, s);
  std::printf(" gflops=%.1f samples_per_s=%.0f loss=%.3f\n", 3 * forward_flops / (s.median_ms * 1e6),
              B / (s.median_ms * 1e-3), loss);
  NoGradGuard no_grad;
  TrainModeGuard test_mode(false);
  const bench::Stats si = bench::measure(t.gpu() ? 5 : 2, t.iters(t.threads == 1 ? 5 : 8, 100), [&] {
    (*model)(xs[it++ % NB]);
    t.wait();
  });
  bench::print_stats(t.id(std::string("conv.infer") + fused_suffix()) + mode.suffix, tags, si);
  std::printf(" gflops=%.1f samples_per_s=%.0f\n", forward_flops / (si.median_ms * 1e6), B / (si.median_ms * 1e-3));
  std::fflush(stdout);
}

constexpr std::int64_t kVocab = 1000, kUnits = 256, kBatch = 64, kLength = 25;

// Embeds a batch of token sequences with one lookup, then splits it back into sequences.
Variables embed_sequences(EmbedID& embed, const std::vector<Tensor>& sequences) {
  std::vector<std::int64_t> cuts;
  std::int64_t total = 0;
  for (std::size_t i = 0; i + 1 < sequences.size(); ++i) cuts.push_back(total += sequences[i].numel());
  const Variable all = embed(Variable(concat(sequences, 0)));
  return F::split_axis(all, cuts, 0);
}

class LanguageModel : public Chain {
 public:
  LanguageModel() {
    embed_ = add_link("embed", std::make_shared<EmbedID>(kVocab, kUnits));
    lstm_ = add_link("lstm", std::make_shared<NStepLSTM>(2, kUnits, kUnits));
    out_ = add_link("out", std::make_shared<Linear>(kUnits, kVocab));
  }
  Variable loss(const std::vector<Tensor>& inputs, const Tensor& targets) {
    const auto result = lstm_->forward(Variable(), Variable(), embed_sequences(*embed_, inputs));
    return F::softmax_cross_entropy((*out_)(F::concat(result.ys, 0)), Variable(targets));
  }

 private:
  std::shared_ptr<EmbedID> embed_;
  std::shared_ptr<NStepLSTM> lstm_;
  std::shared_ptr<Linear> out_;
};

class Seq2Seq : public Chain {
 public:
  Seq2Seq() {
    embed_x_ = add_link("embed_x", std::make_shared<EmbedID>(kVocab, kUnits));
    embed_y_ = add_link("embed_y", std::make_shared<EmbedID>(kVocab, kUnits));
    encoder_ = add_link("encoder", std::make_shared<NStepLSTM>(2, kUnits, kUnits));
    decoder_ = add_link("decoder", std::make_shared<NStepLSTM>(2, kUnits, kUnits));
    out_ = add_link("out", std::make_shared<Linear>(kUnits, kVocab));
  }
  Variable loss(const std::vector<Tensor>& sources, const std::vector<Tensor>& inputs, const Tensor& targets) {
    const auto encoded = encoder_->forward(Variable(), Variable(), embed_sequences(*embed_x_, sources));
    const auto decoded = decoder_->forward(encoded.hy, encoded.cy, embed_sequences(*embed_y_, inputs));
    return F::softmax_cross_entropy((*out_)(F::concat(decoded.ys, 0)), Variable(targets));
  }

 private:
  std::shared_ptr<EmbedID> embed_x_, embed_y_;
  std::shared_ptr<NStepLSTM> encoder_, decoder_;
  std::shared_ptr<Linear> out_;
};

void report_tokens(const std::string& id, const bench::Target& t, const bench::Stats& s, double tokens, double loss) {
  bench::print_stats(t.id(id + (mixed_bf16() ? ".mixed_bf16" : "")),
                     t.tags() + " batch=64 seqlen=25 hidden=256 layers=2 vocab=1000", s);
  std::printf(" tokens=%.0f tokens_per_s=%.0f loss=%.3f\n", tokens, tokens / (s.median_ms * 1e-3), loss);
  std::fflush(stdout);
}

void lstm_benchmarks(const bench::Target& t) {
  Generator gen(0);
  auto tokens = [&](std::int64_t n) {
    std::vector<std::int64_t> ids(n);
    for (auto& id : ids) id = static_cast<std::int64_t>(gen.next() % kVocab);
    return from_vector(ids, {n});
  };
  constexpr int kBatches = 4;
  // Per batch: inputs, sources, and the targets of every token in order, for fixed and packed lengths.
  std::vector<std::vector<Tensor>> inputs(kBatches), sources(kBatches), packed(kBatches);
  std::vector<Tensor> targets, packed_targets;
  std::vector<std::int64_t> lengths(kBatch);
  for (auto& length : lengths) length = 5 + static_cast<std::int64_t>(gen.next() % (kLength - 4));
  std::sort(lengths.rbegin(), lengths.rend());
  double packed_tokens = 0;
  for (auto length : lengths) packed_tokens += static_cast<double>(length);
  for (int b = 0; b < kBatches; ++b) {
    std::vector<Tensor> ys, packed_ys;
    for (std::int64_t i = 0; i < kBatch; ++i) {
      inputs[b].push_back(tokens(kLength));
      sources[b].push_back(tokens(kLength));
      ys.push_back(tokens(kLength));
      packed[b].push_back(inputs[b].back().slice_rows(0, lengths[i]));
      packed_ys.push_back(ys.back().slice_rows(0, lengths[i]));
    }
    targets.push_back(concat(ys, 0));
    packed_targets.push_back(concat(packed_ys, 0));
  }
  // On a GPU every batch lives there before timing (the packed sequences become copies of their own).
  for (auto* batches : {&inputs, &sources, &packed})
    for (auto& batch : *batches)
      for (auto& sequence : batch) sequence = sequence.to(t.device);
  for (auto* all : {&targets, &packed_targets})
    for (auto& target : *all) target = target.to(t.device);
  {
    manual_seed(0);
    auto model = std::make_shared<LanguageModel>();
    model->to(t.device);
    Adam adam(1e-3);
    adam.setup(model);
    int it = 0;
    double loss = 0;
    bench::Stats s = bench::measure(t.gpu() ? 5 : 2, t.iters(t.threads == 1 ? 6 : 10, 30), [&] {
      const int b = it++ % kBatches;
      Variable l;
      adam.update([&] { return l = model->loss(inputs[b], targets[b]); });
      loss = l.data().item();
    });
    report_tokens("lstm.fixed.train.adam", t, s, kLength * kBatch, loss);
    it = 0;
    s = bench::measure(t.gpu() ? 5 : 2, t.iters(t.threads == 1 ? 6 : 10, 30), [&] {
      const int b = it++ % kBatches;
      Variable l;
      adam.update([&] { return l = model->loss(packed[b], packed_targets[b]); });
      loss = l.data().item();
    });
    report_tokens("lstm.packed.train.adam", t, s, packed_tokens, loss);
  }
  {
    manual_seed(0);
    auto model = std::make_shared<Seq2Seq>();
    model->to(t.device);
    Adam adam(1e-3);
    adam.setup(model);
    int it = 0;
    double loss = 0;
    const bench::Stats s = bench::measure(t.gpu() ? 5 : 2, t.iters(t.threads == 1 ? 4 : 6, 20), [&] {
      const int b = it++ % kBatches;
      Variable l;
      adam.update([&] { return l = model->loss(sources[b], inputs[b], targets[b]); });
      loss = l.data().item();
    });
    report_tokens("seq2seq.train.adam", t, s, kLength * kBatch, loss);
  }
}

// BENCH_ONLY=baseline: one tiny step of each kind the benchmarks run (a linear layer, a
// convolution, an LSTM, backward, an Adam step), nothing timed: what the process holds with its
// libraries loaded and their kernels made, which bench/peak_memory.sh subtracts from the peaks
// (as from LibTorch's, with bench/libtorch_baseline.cpp).
void baseline_step() {
  auto chain = std::make_shared<Chain>();
  auto linear = chain->add_link("linear", std::make_shared<Linear>(4, 4));
  auto conv = chain->add_link("conv", std::make_shared<Convolution2D>(1, 2, Convolution2DOptions::make(3, 1, 1)));
  auto lstm = chain->add_link("lstm", std::make_shared<NStepLSTM>(1, 4, 4));
  Adam adam;
  adam.setup(chain);
  Generator gen(0);
  const Variable x(rand_uniform({2, 4}, gen)), image(rand_uniform({1, 1, 4, 4}, gen));
  const Variables sequences = {Variable(rand_uniform({3, 4}, gen)), Variable(rand_uniform({2, 4}, gen))};
  adam.update([&] {
    const F::NStepLSTMResult out = lstm->forward(Variable(), Variable(), sequences);
    return F::sum(F::relu((*linear)(x))) + F::sum((*conv)(image)) + F::sum(out.ys[0]);
  });
}

}  // namespace

int main() {
  try {
    const char* only = std::getenv("BENCH_ONLY");
    const bool baseline = only != nullptr && std::strcmp(only, "baseline") == 0;
    for (const bench::Target& t : bench::targets_from_env()) {
      t.apply();
      if (baseline) {
        baseline_step();
        break;
      }
      const AutocastScope autocast(mixed_bf16() ? std::optional<DType>(DType::bf16) : std::nullopt);
      if (selected("mlp")) mlp_benchmarks(t);
      if (selected("conv")) {
        conv_benchmarks(t, kTandemMode);
        if (t.gpu()) conv_benchmarks(t, kTorchMode);
      }
      if (selected("lstm")) lstm_benchmarks(t);
    }
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "train_step_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
