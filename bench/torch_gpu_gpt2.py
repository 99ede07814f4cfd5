"""GPT-2 124M's training step in PyTorch eager on a GPU, beside tandem's train_gpt2 --gpu 0
(scripts/gpu_run.sh, phase gpt2): the model of docs/gpt2.md (pre-LayerNorm, GELU tanh, tied
embedding, vocabulary 50,257 padded to 50,304, GPT-2's initialisation), batch 8 x 1024, AdamW as
train_gpt2 configures it (lr 6e-4, betas 0.9/0.95, weight decay 0.1 on the matrices and
embeddings), random tokens. Two runs: f32 with TF32 off (tandem's default), then bf16 autocast
with PyTorch's fused attention (what llm.c's ~460k tokens/s per H100 compares with).
Prints one line per run: gpt2.train.gpu.torch.<mode> ms=<median step> tokens_per_s=...
"""
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

V, VP, C, NH, NL, T, B = 50257, 50304, 768, 12, 12, 1024, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x, fused):
        b, t, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=-1)
        heads = lambda a: a.view(b, t, NH, C // NH).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        if fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            y = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VP, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block() for _ in range(NL))
        self.ln_f = nn.LayerNorm(C)
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                std = 0.02 / math.sqrt(2 * NL) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, ids, fused):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for blk in self.h:
            x = blk(x, fused)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return logits[..., :V].reshape(-1, V)


def run(mode, steps):
    dev = torch.device("cuda:0")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    model = GPT2().to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    data = torch.randint(0, V, (4, B, T + 1), device=dev)
    bf16 = mode == "bf16"
    times = []
    for i in range(steps + 3):
        batch = data[i % 4]
        torch.cuda.synchronize()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(batch[:, :T], fused=bf16).float(), batch[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - start)
    ms = statistics.median(times) * 1e3
    peak = torch.cuda.max_memory_allocated() / 2**20
    print(f"gpt2.train.gpu.torch.{mode} ms={ms:.2f} tokens_per_s={B * T / ms * 1e3:.0f} batch={B} seqlen={T} "
          f"loss={loss.item():.4f} peak_mib={peak:.0f} torch={torch.__version__} gpu={torch.cuda.get_device_name(0)}")
    del model, opt
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    for mode in ("f32", "bf16"):
        run(mode, steps)
