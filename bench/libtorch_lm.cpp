// libtorch_lm.cpp - GPT-style character language model anchor (LibTorch, CPU), beside
// ../shared/bench/libtorch_{mlp,lstm}.cpp and in the same line format; built and run by
// bench/libtorch_lm.sh (scripts/bench.sh: BENCH_ONLY word `lm`).
//
// Model (pre-norm transformer, d=128, 4 heads of 32, 4 blocks, vocab 96, context 64):
//   x = tok_emb(ids) + pos_emb(0..T-1)            Embedding(96,128) + Embedding(64,128)
//   4 x { x = x + proj(attn(LN1(x)))               LayerNorm(128, eps 1e-5, affine)
//         x = x + fc2(gelu_tanh(fc1(LN2(x)))) }    fc1 128->512, fc2 512->128
//   logits = head(LN_f(x))                         Linear(128 -> 96)
//   loss = softmax cross-entropy, mean over all B*T tokens
// attn: qkv = Linear(128, 384) split into q, k, v [B, 4, T, 32];
//   softmax(q k^T / sqrt(32), causal mask: -inf above the diagonal) v, written as explicit
//   batched matmuls + masked_fill + softmax (no fused attention kernel), then proj Linear(128,128).
// Data: 20 random batches of B=32 rows of T+1=65 tokens uniform in [0, 96) (seed 0), cycled;
//   input = tokens[:, 0:64], target = tokens[:, 1:65] (next-token prediction).
// Measures per step (median of N): lm.train.adam = zero_grad + forward + loss + backward +
//   Adam(lr 1e-3) step; lm.infer = forward + loss under NoGradGuard. 1 and 2 threads (.t1/.t2).
// loss= is the last timed step's loss (ln(96) = 4.564 at start; random targets: falls a little).
// gflops counts matmul FLOPs only (linears, attention's two batched matmuls computed in full,
// head); train = 3x forward.
#include <cmath>
#include <limits>

#include "torch_common.hpp"

namespace F = torch::nn::functional;
constexpr int V = 96, C = 128, NH = 4, HD = C / NH, NL = 4, FF = 4 * C, B = 32, T = 64;

struct BlockImpl : torch::nn::Module {
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc1{nullptr}, fc2{nullptr};
  BlockImpl() {
    auto ln = torch::nn::LayerNormOptions({C}).eps(1e-5).elementwise_affine(true);
    ln1 = register_module("ln1", torch::nn::LayerNorm(ln));
    qkv = register_module("qkv", torch::nn::Linear(C, 3 * C));
    proj = register_module("proj", torch::nn::Linear(C, C));
    ln2 = register_module("ln2", torch::nn::LayerNorm(ln));
    fc1 = register_module("fc1", torch::nn::Linear(C, FF));
    fc2 = register_module("fc2", torch::nn::Linear(FF, C));
  }
  // x [B, T, C]; mask [T, T] bool, true above the diagonal.
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& mask) {
    const int64_t b = x.size(0), t = x.size(1);
    auto parts = qkv->forward(ln1->forward(x)).chunk(3, /*dim=*/-1);   // 3 x [B, T, C]
    auto heads = [&](const torch::Tensor& a) { return a.view({b, t, NH, HD}).transpose(1, 2); };
    auto q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);   // [B, NH, T, HD]
    auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(HD)));
    att = torch::softmax(att.masked_fill(mask, -std::numeric_limits<float>::infinity()), -1);
    auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({b, t, C});
    x = x + proj->forward(y);
    auto h = F::gelu(fc1->forward(ln2->forward(x)), F::GELUFuncOptions().approximate("tanh"));
    return x + fc2->forward(h);
  }
};
TORCH_MODULE(Block);

struct GPTImpl : torch::nn::Module {
  torch::nn::Embedding tok{nullptr}, pos{nullptr};
  std::vector<Block> blocks;
  torch::nn::LayerNorm lnf{nullptr};
  torch::nn::Linear head{nullptr};
  torch::Tensor positions, mask;
  GPTImpl() {
    tok = register_module("tok", torch::nn::Embedding(V, C));
    pos = register_module("pos", torch::nn::Embedding(T, C));
    for (int i = 0; i < NL; ++i) blocks.push_back(register_module("block" + std::to_string(i), Block()));
    lnf = register_module("lnf", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C}).eps(1e-5)));
    head = register_module("head", torch::nn::Linear(C, V));
    positions = register_buffer("positions", torch::arange(T, torch::kLong));
    mask = register_buffer("mask", torch::ones({T, T}, torch::kBool).triu(1));
  }
  // ids [B, T] -> logits [B*T, V]
  torch::Tensor forward(const torch::Tensor& ids) {
    auto x = tok->forward(ids) + pos->forward(positions);   // [B, T, C] + [T, C]
    for (auto& blk : blocks) x = blk->forward(x, mask);
    return head->forward(lnf->forward(x)).view({-1, V});
  }
};
TORCH_MODULE(GPT);

static void report(const std::string& name, const anchor::Stats& s, double flops, float loss,
                   float loss0) {
  std::string tag = anchor::torch_tag() + " " + anchor::threads_tag() +
                    " batch=32 seqlen=64 d=128 heads=4 layers=4 vocab=96";
  anchor::print_stats_prefix(name, tag, s);
  std::printf(" gflops=%.1f tokens=%d tokens_per_s=%.0f loss0=%.4f loss=%.4f\n",
              flops / (s.median_ms * 1e6), B * T, B * T / (s.median_ms * 1e-3), loss0, loss);
  std::fflush(stdout);
}

int main() {
  const double tokens = double(B) * T;
  const double fwd_flops = 2.0 * tokens * (double(NL) * (C * 3 * C + C * C + 2.0 * C * FF) + C * V) +
                           double(NL) * 2 * (2.0 * B * NH * T * T * HD);
  torch::manual_seed(0);
  const int NB = 20;
  std::vector<torch::Tensor> xs, ys;
  for (int i = 0; i < NB; ++i) {
    auto seq = torch::randint(0, V, {B, T + 1}, torch::kLong);
    xs.push_back(seq.slice(1, 0, T).contiguous());
    ys.push_back(seq.slice(1, 1, T + 1).reshape({-1}).contiguous());
  }

  anchor::mark_start();
  for (int threads : anchor::thread_list()) {
    anchor::torch_threads(threads);
    const std::string ts = ".t" + std::to_string(threads);
    {
      torch::manual_seed(0);
      GPT model;
      torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
      float last = 0, first = -1;
      int it = 0;
      auto s = anchor::bench(3, anchor::scaled(threads == 1 ? 20 : 30), [&] {
        opt.zero_grad();
        auto loss = F::cross_entropy(model->forward(xs[it % NB]), ys[it % NB]);
        ++it;
        loss.backward();
        opt.step();
        last = loss.item<float>();
        if (first < 0) first = last;
      });
      report("lm.train.adam" + ts, s, 3 * fwd_flops, last, first);
    }
    {
      torch::manual_seed(0);
      GPT model;
      torch::NoGradGuard ng;
      float last = 0, first = -1;
      int it = 0;
      auto s = anchor::bench(3, anchor::scaled(threads == 1 ? 40 : 60), [&] {
        auto loss = F::cross_entropy(model->forward(xs[it % NB]), ys[it % NB]);
        ++it;
        last = loss.item<float>();
        if (first < 0) first = last;
      });
      report("lm.infer" + ts, s, fwd_flops, last, first);
    }
  }
  return 0;
}
