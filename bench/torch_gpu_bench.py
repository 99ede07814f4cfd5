#!/usr/bin/env python3
"""PyTorch on the GPU: the workloads of bench/train_step_bench.cc and bench/gemm_bench.cc.

The models, shapes and optimizers are those of ../shared/bench/libtorch_{mlp,conv,lstm}.cpp
(the CPU anchors that define these workloads), run on a CUDA device, so that scripts/bench_gpu.sh
can set tandem (BENCH_DEVICE=cuda:0) beside PyTorch on the same GPU. Lines are in
../shared/bench's format, `name=torch.<id> ... median_ms=`, with tandem's GPU ids:

  mlp.train.{sgd,adam}.gpu, mlp.infer.gpu   784-1000-1000-10 ReLU MLP, batch 100, softmax
                                            cross-entropy, SGD lr 0.01 / Adam lr 1e-3, 20 batches
  conv.train.sgd.gpu, conv.infer.gpu        64x1x28x28, conv3x3(64)-relu-conv3x3(64)-relu-pool2-
                                            conv3x3(128)-relu-conv3x3(128)-relu-pool2-linear(6272->10),
                                            SGD(0.01, momentum 0.9), 4 batches; PyTorch's deterministic
                                            mode (cudnn.deterministic = True, cudnn.benchmark = False)
  conv.train.sgd.gpu.torchmode, ...         the same in PyTorch's default mode (cudnn.deterministic =
  conv.infer.gpu.torchmode                  False, cudnn.benchmark = True)
  lstm.fixed.train.adam.gpu                 embedding 1000->256, 2-layer LSTM(256), linear 256->1000,
                                            cross-entropy over all tokens, batch 64 x 25, Adam 1e-3
  lstm.packed.train.adam.gpu                the same, lengths uniform in [5, 25] (pack_padded_sequence)
  seq2seq.train.adam.gpu                    encoder LSTM whose final (h, c) start a decoder LSTM
  gemm.n{1024,4096,8192}.gpu                torch.mm, fp32, square; tflops = 2 n^3 / median

A training step is zero_grad + forward + loss + backward + step, then loss.item() and
torch.cuda.synchronize(): each timed call ends with the device idle (inference and GEMM
synchronize too). The GEMM times `per_sample` back-to-back products per sample, as tandem's.

Precision: exact FP32 by default (TF32 off for cuBLAS matmuls, cuDNN convolutions and cuDNN
RNNs); the ids ending .gpu.tf32 allow TF32. GEMM always runs both; the training steps run the
TF32 variants too when BENCH_TF32=1. cudnn.benchmark is on (cuDNN's algorithm search, as
gpu_raw_bench's cudnnFind*) except in the CNN's deterministic rows; BENCH_TORCH_CUDNN_BENCHMARK=0
turns it off everywhere.

The CNN's two modes pair with tandem's (bench/train_step_bench.cc), which scripts/bench_gpu.sh
sets side by side: its default (.gpu: deterministic, direct algorithms only, cuDNN's heuristics)
against PyTorch's deterministic mode (deterministic algorithms, cuDNN's heuristics, which may still
pick FFT or Winograd), and its PyTorch mode (.gpu.torchmode: benchmark, atomics, FFT/Winograd)
against PyTorch's default. BENCH_TORCH_DETERMINISTIC_BENCHMARK=1 times the deterministic
algorithms in the deterministic rows too (cudnn.benchmark = True: the choice, and so the last bits,
may then differ between runs). Each line's tags say cudnn_benchmark= and cudnn_deterministic=.

Environment, as tandem's benchmarks: BENCH_DEVICE (default cuda:0), BENCH_ONLY (words: mlp conv
lstm gemm), BENCH_SCALE (fewer timed iterations, never below 3), BENCH_TF32.

  python3 bench/torch_gpu_bench.py
"""

import os
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as error:  # scripts/bench_gpu.sh checks first; a direct call says why
    print(f"# torch_gpu_bench: no PyTorch ({error}): nothing measured")
    sys.exit(0)


# ---- the environment, as bench/bench_util.h reads it ----------------------------------------------

def scaled(iters):
    try:
        factor = float(os.environ.get("BENCH_SCALE", "1"))
    except ValueError:
        factor = 1.0
    if factor <= 0:
        factor = 1.0
    return max(3, int(iters * factor + 0.5))


def selected(family):
    only = os.environ.get("BENCH_ONLY")
    return only is None or family in only


def kv(value):
    value = str(value).strip() or "none"
    for c in " ,=\t\n":
        value = value.replace(c, "_")
    return value


# ---- precision ----------------------------------------------------------------------------------

def set_tf32(allow):
    """TF32 on or off for cuBLAS matmuls, cuDNN convolutions and cuDNN RNNs.

    PyTorch >= 2.9 has per-backend fp32_precision settings and refuses a mix of those and the
    legacy allow_tf32 flags, so only one of the two APIs is used: the new one where it exists.
    """
    cudnn = torch.backends.cudnn
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision") and hasattr(cudnn, "conv") and hasattr(cudnn, "rnn"):
        mode = "tf32" if allow else "ieee"
        matmul.fp32_precision = mode
        cudnn.conv.fp32_precision = mode
        cudnn.rnn.fp32_precision = mode
    else:
        matmul.allow_tf32 = allow
        cudnn.allow_tf32 = allow


class Target:
    """The device and precision of a run, and the ids and tags that say so."""

    def __init__(self, device, tf32):
        self.device = device
        self.tf32 = tf32

    def id(self, base):
        return base + (".gpu.tf32" if self.tf32 else ".gpu")

    def wait(self):
        torch.cuda.synchronize(self.device)


TAGS = ""  # set in main(): library, device, GPU


def measure(warmup, iters, fn):
    """`warmup` untimed calls, then `iters` timed ones (ms); fn ends with the device idle."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def print_stats(name, target, tags, times, extra, per_sample=1, suffix=""):
    times = [t / per_sample for t in times]
    median = statistics.median(times)
    cudnn = torch.backends.cudnn
    print(f"name=torch.{target.id(name)}{suffix} {TAGS} tf32={int(target.tf32)} "
          f"cudnn_benchmark={int(cudnn.benchmark)} cudnn_deterministic={int(cudnn.deterministic)} {tags} "
          f"iters={len(times)} median_ms={median:.4f} min_ms={min(times):.4f} max_ms={max(times):.4f} "
          f"{extra(median, min(times))}", flush=True)


def train_step(model_loss, optimizer):
    """zero_grad + forward + loss + backward + step; returns the loss (item() waits)."""
    optimizer.zero_grad()
    loss = model_loss()
    loss.backward()
    optimizer.step()
    value = loss.item()
    torch.cuda.synchronize()
    return value


# ---- the MLP (libtorch_mlp.cpp) -----------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self, n_in, units, n_out):
        super().__init__()
        self.l1 = nn.Linear(n_in, units)
        self.l2 = nn.Linear(units, units)
        self.l3 = nn.Linear(units, n_out)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


def mlp_benchmarks(t):
    B, IN, U, OUT, NB = 100, 784, 1000, 10, 20
    forward_flops = 2.0 * B * (IN * U + U * U + U * OUT)
    gen = torch.Generator().manual_seed(0)
    xs = [torch.rand(B, IN, generator=gen).to(t.device) for _ in range(NB)]
    ts = [torch.randint(0, OUT, (B,), generator=gen).to(t.device) for _ in range(NB)]
    tags = "batch=100"
    for name in ("sgd", "adam"):
        torch.manual_seed(0)
        model = MLP(IN, U, OUT).to(t.device)
        if name == "sgd":
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        else:
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        state = {"it": 0, "loss": 0.0}

        def step():
            i = state["it"] % NB
            state["it"] += 1
            state["loss"] = train_step(lambda: F.cross_entropy(model(xs[i]), ts[i]), optimizer)

        times = measure(20, scaled(200), step)
        print_stats(f"mlp.train.{name}", t, tags, times,
                    lambda m, _: f"gflops={3 * forward_flops / (m * 1e6):.1f} "
                                 f"samples_per_s={B / (m * 1e-3):.0f} loss={state['loss']:.3f}")
    torch.manual_seed(0)
    model = MLP(IN, U, OUT).to(t.device)
    state = {"it": 0}

    def infer():
        with torch.no_grad():
            model(xs[state["it"] % NB])
        state["it"] += 1
        t.wait()

    times = measure(20, scaled(300), infer)
    print_stats("mlp.infer", t, tags, times,
                lambda m, _: f"gflops={forward_flops / (m * 1e6):.1f} samples_per_s={B / (m * 1e-3):.0f}")


# ---- the CNN (libtorch_conv.cpp) ----------------------------------------------------------------

class SmallVGG(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 64, 3, padding=1)
        self.c2 = nn.Conv2d(64, 64, 3, padding=1)
        self.c3 = nn.Conv2d(64, 128, 3, padding=1)
        self.c4 = nn.Conv2d(128, 128, 3, padding=1)
        self.fc = nn.Linear(128 * 7 * 7, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.c2(F.relu(self.c1(x)))), 2)
        h = F.max_pool2d(F.relu(self.c4(F.relu(self.c3(h)))), 2)
        return self.fc(h.flatten(1))


# The CNN's modes: (id suffix, cudnn.deterministic, cudnn.benchmark); see the module's docstring.
def conv_modes(benchmark):
    deterministic_benchmark = benchmark and os.environ.get("BENCH_TORCH_DETERMINISTIC_BENCHMARK") == "1"
    return [("", True, deterministic_benchmark), (".torchmode", False, benchmark)]


def conv_benchmarks(t, suffix, deterministic, benchmark):
    cudnn = torch.backends.cudnn
    saved = (cudnn.deterministic, cudnn.benchmark)
    cudnn.deterministic, cudnn.benchmark = deterministic, benchmark
    try:
        conv_step_and_inference(t, suffix)
    finally:
        cudnn.deterministic, cudnn.benchmark = saved


def conv_step_and_inference(t, suffix):
    B, NB = 64, 4

    def conv_flops(cin, cout, hw):
        return 2.0 * B * cin * cout * 9 * hw * hw

    forward_flops = (conv_flops(1, 64, 28) + conv_flops(64, 64, 28) + conv_flops(64, 128, 14) +
                     conv_flops(128, 128, 14) + 2.0 * B * 6272 * 10)
    gen = torch.Generator().manual_seed(0)
    xs = [torch.rand(B, 1, 28, 28, generator=gen).to(t.device) for _ in range(NB)]
    ts = [torch.randint(0, 10, (B,), generator=gen).to(t.device) for _ in range(NB)]
    tags = "batch=64"
    torch.manual_seed(0)
    model = SmallVGG().to(t.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    state = {"it": 0, "loss": 0.0}

    def step():
        i = state["it"] % NB
        state["it"] += 1
        state["loss"] = train_step(lambda: F.cross_entropy(model(xs[i]), ts[i]), optimizer)

    times = measure(5, scaled(50), step)
    print_stats("conv.train.sgd", t, tags, times,
                lambda m, _: f"gflops={3 * forward_flops / (m * 1e6):.1f} "
                             f"samples_per_s={B / (m * 1e-3):.0f} loss={state['loss']:.3f}", suffix=suffix)
    model.eval()

    def infer():
        with torch.no_grad():
            model(xs[state["it"] % NB])
        state["it"] += 1
        t.wait()

    times = measure(5, scaled(100), infer)
    print_stats("conv.infer", t, tags, times,
                lambda m, _: f"gflops={forward_flops / (m * 1e6):.1f} samples_per_s={B / (m * 1e-3):.0f}",
                suffix=suffix)


# ---- the recurrent models (libtorch_lstm.cpp) ---------------------------------------------------

V, E, H, L, BATCH, T = 1000, 256, 256, 2, 64, 25


class LanguageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.lstm = nn.LSTM(E, H, num_layers=L)
        self.out = nn.Linear(H, V)

    def forward(self, x):  # x [T, B] -> logits [T * B, V]
        return self.out(self.lstm(self.emb(x))[0].reshape(-1, H))

    def forward_packed(self, x, lengths):  # lengths on the CPU, sorted descending
        packed = nn.utils.rnn.pack_padded_sequence(self.emb(x), lengths, enforce_sorted=True)
        return self.out(self.lstm(packed)[0].data)


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.semb = nn.Embedding(V, E)
        self.temb = nn.Embedding(V, E)
        self.enc = nn.LSTM(E, H, num_layers=L)
        self.dec = nn.LSTM(E, H, num_layers=L)
        self.out = nn.Linear(H, V)

    def forward(self, src, tgt_in):
        state = self.enc(self.semb(src))[1]
        return self.out(self.dec(self.temb(tgt_in), state)[0].reshape(-1, H))


def lstm_benchmarks(t):
    NB = 4
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randint(0, V, (T, BATCH), generator=gen) for _ in range(NB)]
    ys = [torch.randint(0, V, (T, BATCH), generator=gen) for _ in range(NB)]
    srcs = [torch.randint(0, V, (T, BATCH), generator=gen) for _ in range(NB)]
    lengths = torch.randint(5, T + 1, (BATCH,), generator=gen).sort(descending=True)[0]  # stays on the CPU
    packed_tokens = float(lengths.sum())
    # The targets of the packed tokens, in the packed order, computed once.
    packed_ys = [nn.utils.rnn.pack_padded_sequence(y, lengths, enforce_sorted=True).data.to(t.device) for y in ys]
    xs = [x.to(t.device) for x in xs]
    ys = [y.reshape(-1).to(t.device) for y in ys]
    srcs = [s.to(t.device) for s in srcs]
    tags = "batch=64 seqlen=25 hidden=256 layers=2 vocab=1000"

    def report(name, times, tokens, state):
        print_stats(name, t, tags, times,
                    lambda m, _: f"tokens={tokens:.0f} tokens_per_s={tokens / (m * 1e-3):.0f} loss={state['loss']:.3f}")

    torch.manual_seed(0)
    lm = LanguageModel().to(t.device)
    optimizer = torch.optim.Adam(lm.parameters(), lr=1e-3)
    state = {"it": 0, "loss": 0.0}

    def fixed():
        i = state["it"] % NB
        state["it"] += 1
        state["loss"] = train_step(lambda: F.cross_entropy(lm(xs[i]), ys[i]), optimizer)

    report("lstm.fixed.train.adam", measure(5, scaled(30), fixed), T * BATCH, state)
    state["it"] = 0

    def packed():
        i = state["it"] % NB
        state["it"] += 1
        state["loss"] = train_step(lambda: F.cross_entropy(lm.forward_packed(xs[i], lengths), packed_ys[i]), optimizer)

    report("lstm.packed.train.adam", measure(5, scaled(30), packed), packed_tokens, state)

    torch.manual_seed(0)
    model = Seq2Seq().to(t.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    state = {"it": 0, "loss": 0.0}

    def seq2seq():
        i = state["it"] % NB
        state["it"] += 1
        state["loss"] = train_step(lambda: F.cross_entropy(model(srcs[i], xs[i]), ys[i]), optimizer)

    report("seq2seq.train.adam", measure(5, scaled(20), seq2seq), T * BATCH, state)


# ---- GEMM (gemm_bench.cc) -----------------------------------------------------------------------

def max_rel_err(a, b, c):
    """gemm_bench's check: four entries of C against a double dot product, relative to the sum
    of the magnitudes of its terms."""
    n = a.shape[0]
    worst = 0.0
    for i, j in ((0, 0), (n - 1, n - 1), (n // 3, n // 2), (n // 2, 7)):
        terms = a[i, :].double() * b[:, j].double()
        ref, mag = float(terms.sum()), float(terms.abs().sum())
        worst = max(worst, abs(ref - float(c[i, j])) / (mag + 1e-30))
    return worst


def gemm(t, n, warmup, iters, per_sample):
    if not selected("gemm"):
        return True
    gen = torch.Generator(device=t.device).manual_seed(1)
    a = torch.rand(n, n, device=t.device, generator=gen) * 2 - 1
    b = torch.rand(n, n, device=t.device, generator=gen) * 2 - 1
    result = {}

    def products():
        for _ in range(per_sample):
            result["c"] = torch.mm(a, b)
        t.wait()

    times = measure(warmup, iters, products)
    err = max_rel_err(a, b, result["c"])
    limit = 5e-3 if t.tf32 else 1e-4
    flops = 2.0 * n ** 3

    def extra(median, best):
        tflops = flops / (median * 1e-3) / 1e12
        return (f"gflops={tflops * 1e3:.0f} tflops={tflops:.2f} tflops_best={flops / (best * 1e-3) / 1e12:.2f} "
                f"relerr={err:.1e}" + (" CHECK=FAIL" if err > limit else ""))

    print_stats(f"gemm.n{n}", t, f"n={n} per_sample={per_sample}", times, extra, per_sample)
    del a, b, result
    return err <= limit


# ---- main ---------------------------------------------------------------------------------------

def main():
    global TAGS
    name = os.environ.get("BENCH_DEVICE", "cuda:0") or "cuda:0"
    if not torch.cuda.is_available():
        print(f"# torch_gpu_bench: PyTorch {torch.__version__} sees no CUDA device: nothing measured")
        return 0
    if name != "cuda" and not (name.startswith("cuda:") and name[5:].isdigit()):
        print(f"torch_gpu_bench: BENCH_DEVICE={name}: expected cuda or cuda:N", file=sys.stderr)
        return 1
    device = torch.device(name)
    if (device.index or 0) >= torch.cuda.device_count():
        print(f"torch_gpu_bench: BENCH_DEVICE={name}: only {torch.cuda.device_count()} CUDA device(s)",
              file=sys.stderr)
        return 1
    torch.cuda.set_device(device)
    benchmark = os.environ.get("BENCH_TORCH_CUDNN_BENCHMARK", "1") != "0"
    torch.backends.cudnn.benchmark = benchmark
    props = torch.cuda.get_device_properties(device)
    TAGS = (f"lib=torch-{kv(torch.__version__)} device=cuda:{device.index or 0} gpu={kv(props.name)} "
            f"cuda={kv(torch.version.cuda)} cudnn={torch.backends.cudnn.version()}")
    print(f"# torch_gpu_bench: {props.name}, {props.multi_processor_count} SMs, "
          f"{props.total_memory / 2 ** 30:.1f} GiB, torch {torch.__version__}")
    print("# start", flush=True)

    ok = True
    variants = [False, True] if os.environ.get("BENCH_TF32") == "1" else [False]
    for tf32 in variants:
        t = Target(device, tf32)
        set_tf32(tf32)
        if selected("mlp"):
            mlp_benchmarks(t)
        if selected("conv"):
            for suffix, deterministic, conv_benchmark in conv_modes(benchmark):
                conv_benchmarks(t, suffix, deterministic, conv_benchmark)
        if selected("lstm"):
            lstm_benchmarks(t)
    for tf32 in (False, True):
        t = Target(device, tf32)
        set_tf32(tf32)
        ok &= gemm(t, 1024, 5, scaled(30), 20)
        ok &= gemm(t, 4096, 3, scaled(20), 2)
        ok &= gemm(t, 8192, 2, scaled(10), 1)
    set_tf32(False)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
