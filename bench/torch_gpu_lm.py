"""The character language model's training step in PyTorch eager on a GPU, beside tandem's
train_char_lm --gpu 0 (scripts/gpu_run.sh, phase lm). Same model as bench/libtorch_lm.cpp
(pre-norm, d=128, 4 heads, 4 blocks, context 64, batch 32, GELU tanh, explicit causal
attention), with the fortunes vocabulary's 113 symbols; Adam lr 2e-3; random tokens.
Prints one line: lm.train.adam.gpu.torch ms=<median step> (zero_grad+forward+loss+backward+step).
"""
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

V, C, NH, NL, T, B = 113, 128, 4, 4, 64, 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc1, self.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        heads = lambda a: a.view(b, t, NH, C // NH).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block() for _ in range(NL))
        self.lnf, self.head = nn.LayerNorm(C), nn.Linear(C, V)
        self.register_buffer("positions", torch.arange(T))
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1))

    def forward(self, ids):
        x = self.tok(ids) + self.pos(self.positions)
        for blk in self.blocks:
            x = blk(x, self.mask)
        return self.head(self.lnf(x)).view(-1, V)


def main():
    dev = torch.device("cuda:0")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    model = GPT().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    data = torch.randint(0, V, (20, B, T + 1), device=dev)
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    times = []
    for i in range(steps + 10):
        batch = data[i % 20]
        torch.cuda.synchronize()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(batch[:, :T]), batch[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if i >= 10:
            times.append(time.perf_counter() - start)
    print(f"lm.train.adam.gpu.torch ms={statistics.median(times) * 1e3:.3f} loss={loss.item():.4f}")


if __name__ == "__main__":
    main()
