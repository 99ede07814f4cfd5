#!/usr/bin/python3
"""Checks the LibTorch GPT-2 reference (tests/gpt2/libtorch_gpt2_reference.cc) against NumPy.

    /usr/bin/python3 tests/gpt2/check_reference.py bazel-bin/tests/gpt2/libtorch_gpt2_reference

A tiny random GPT-2 (V=50, C=16, P=16, L=2, 2 heads; batch B=2, T=8) is written in Hugging Face's
safetensors layout; the program's outputs are compared with a NumPy forward pass written here
from the same definition (f64):
  - logits and loss (f64 mode) agree within 1e-10; the f32 mode within f32 rounding;
  - one entry of every parameter's gradient agrees with a central finite difference of the NumPy
    loss (f64);
  - losses[0] == loss, and 10 AdamW steps at lr 1e-2 lower the loss at every step;
  - the first AdamW step (decay on the 2-D parameters only) agrees with NumPy: the NumPy loss of
    the weights after one step, computed from the program's gradients, equals losses[1];
  - bad inputs (C not divisible by the heads, a missing tensor, a wrong shape, T > P, a target
    out of range) exit 1 with a message naming the problem.
Exits 1 on the first mismatch. Needs only NumPy (python3-numpy); takes a few seconds.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

V, C, P, L, H, B, T = 50, 16, 16, 2, 2, 2, 8
LR, BETA1, BETA2, EPS, WD = 1e-2, 0.9, 0.95, 1e-8, 0.1

_DTYPES = {"F64": np.float64, "F32": np.float32, "I64": np.int64, "I32": np.int32}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


# ---- safetensors ----------------------------------------------------------------------------

def write_safetensors(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for raw in blobs:
            f.write(raw)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(data[8 + n + b:8 + n + e], dtype=dt).reshape(info["shape"]).astype(dt.newbyteorder("="))
    return out, meta, n


# ---- the model, in NumPy --------------------------------------------------------------------

def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)  # biased
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(u):
    return 0.5 * u * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u ** 3)))


def forward(w, ids, heads):
    bsz, t = ids.shape
    c = w["wte.weight"].shape[1]
    hd = c // heads
    x = w["wte.weight"][ids] + w["wpe.weight"][:t]
    mask = np.triu(np.ones((t, t), dtype=bool), 1)
    nl = 1 + max(int(k.split(".")[1]) for k in w if k.startswith("h."))
    for i in range(nl):
        p = lambda s: w["h.%d.%s" % (i, s)]
        u = layer_norm(x, p("ln_1.weight"), p("ln_1.bias"))
        qkv = u @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
        q, k, v = (qkv[..., j * c:(j + 1) * c].reshape(bsz, t, heads, hd).transpose(0, 2, 1, 3) for j in range(3))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
        s = np.where(mask, -np.inf, s)
        s = np.exp(s - s.max(-1, keepdims=True))
        a = s / s.sum(-1, keepdims=True)
        y = (a @ v).transpose(0, 2, 1, 3).reshape(bsz, t, c)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        u = layer_norm(x, p("ln_2.weight"), p("ln_2.bias"))
        x = x + gelu_tanh(u @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias")) @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"])
    return x @ w["wte.weight"].T


def loss_of(logits, targets):
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -np.take_along_axis(logp, targets[..., None], -1).mean()


# ---- the test -------------------------------------------------------------------------------

def make_weights(rng):
    w = {"wte.weight": rng.normal(0, 0.3, (V, C)), "wpe.weight": rng.normal(0, 0.3, (P, C))}
    shapes = {"ln_1.weight": (C,), "ln_1.bias": (C,), "attn.c_attn.weight": (C, 3 * C), "attn.c_attn.bias": (3 * C,),
              "attn.c_proj.weight": (C, C), "attn.c_proj.bias": (C,), "ln_2.weight": (C,), "ln_2.bias": (C,),
              "mlp.c_fc.weight": (C, 4 * C), "mlp.c_fc.bias": (4 * C,), "mlp.c_proj.weight": (4 * C, C),
              "mlp.c_proj.bias": (C,)}
    for i in range(L):
        for n, s in shapes.items():
            if n.startswith("ln_") and n.endswith("weight"):
                a = 1.0 + rng.normal(0, 0.1, s)
            elif len(s) == 1:
                a = rng.normal(0, 0.1, s)
            else:
                a = rng.normal(0, 0.3, s)
            w["h.%d.%s" % (i, n)] = a
    w["ln_f.weight"] = 1.0 + rng.normal(0, 0.1, (C,))
    w["ln_f.bias"] = rng.normal(0, 0.1, (C,))
    # The weights are F32 in the file: round them once, then compute everything in f64.
    return {k: v.astype(np.float32).astype(np.float64) for k, v in w.items()}


def to_file(w):
    out = {k: v.astype(np.float32) for k, v in w.items()}
    for i in range(L):  # HF's mask buffers: the program must ignore them
        out["h.%d.attn.bias" % i] = np.tril(np.ones((1, 1, P, P), dtype=np.float32))
        out["h.%d.attn.masked_bias" % i] = np.array(-1e4, dtype=np.float32)
    return out


class Run:
    """A run of the program, started at once (LibTorch takes about a second to load, so the runs
    overlap) and waited for by result()."""

    def __init__(self, binary, args):
        self.proc = subprocess.Popen([binary] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def result(self):
        out, err = self.proc.communicate()
        return self.proc.returncode, out, err


def main():
    if len(sys.argv) != 2:
        print("usage: check_reference.py PATH/TO/libtorch_gpt2_reference", file=sys.stderr)
        return 2
    binary = os.path.abspath(sys.argv[1])
    rng = np.random.default_rng(1234)
    w = make_weights(rng)
    ids = rng.integers(0, V, (B, T)).astype(np.int32)
    targets = rng.integers(0, V, (B, T)).astype(np.int32)
    ids64, targets64 = ids.astype(np.int64), targets.astype(np.int64)

    with tempfile.TemporaryDirectory() as tmp:
        f = lambda name: os.path.join(tmp, name)
        wf, bf = f("w.safetensors"), f("b.safetensors")
        write_safetensors(wf, to_file(w), {"format": "pt"})
        write_safetensors(bf, {"ids": ids, "targets": targets})
        common = ["--weights", wf, "--batch", bf, "--heads", str(H), "--threads", "1"]
        # the bad inputs
        bad = to_file(w)
        del bad["h.1.ln_2.bias"]
        write_safetensors(f("missing.safetensors"), bad)
        bad = to_file(w)
        bad["h.0.attn.c_attn.weight"] = bad["h.0.attn.c_attn.weight"].T.copy()
        write_safetensors(f("shape.safetensors"), bad)
        long_ids = rng.integers(0, V, (1, P + 1)).astype(np.int32)
        write_safetensors(f("long.safetensors"), {"ids": long_ids, "targets": long_ids})
        bad_t = targets.copy()
        bad_t[1, 3] = V
        write_safetensors(f("range.safetensors"), {"ids": ids, "targets": bad_t})

        # All runs at once. f64: logits, loss, gradients, 10 losses; f32 with clipping on the path.
        o64, o32, eo = f("o64.safetensors"), f("o32.safetensors"), f("e.safetensors")
        run64 = Run(binary, common + ["--out", o64, "--dtype", "f64", "--steps", "10", "--lr", str(LR),
                                      "--beta1", str(BETA1), "--beta2", str(BETA2), "--eps", str(EPS),
                                      "--weight-decay", str(WD)])
        run32 = Run(binary, common + ["--out", o32, "--steps", "3", "--lr", str(LR), "--clip", "0.5"])
        errors = [
            ("C=16 with 3 heads", ["divisible", "3"],
             ["--weights", wf, "--batch", bf, "--heads", "3", "--out", eo]),
            ("missing tensor", ["h.1.ln_2.bias"],
             ["--weights", f("missing.safetensors"), "--batch", bf, "--heads", "2", "--out", eo]),
            ("transposed c_attn", ["h.0.attn.c_attn.weight", "[48, 16]", "[16, 48]"],
             ["--weights", f("shape.safetensors"), "--batch", bf, "--heads", "2", "--out", eo]),
            ("T > P", ["T = 17", "P = 16"],
             ["--weights", wf, "--batch", f("long.safetensors"), "--heads", "2", "--out", eo]),
            ("target out of range", ["targets[1, 3] = 50", "V=50"],
             ["--weights", wf, "--batch", f("range.safetensors"), "--heads", "2", "--out", eo]),
        ]
        error_runs = [(what, words, Run(binary, args)) for what, words, args in errors]

        rc, so, se = run64.result()
        if rc != 0:
            print(so + se)
            check(False, "f64 run exits 0")
            return 1
        out, meta, hlen = read_safetensors(o64)
        check(hlen % 8 == 0, "output header length %d is a multiple of 8" % hlen)
        check(meta.get("dtype") == "f64" and meta.get("n_layer") == str(L) and meta.get("n_head") == str(H)
              and meta.get("vocab_size") == str(V) and "libtorch 1.13" in meta.get("implementation", ""),
              "__metadata__ carries the config")
        ref_logits = forward(w, ids64, H)
        ref_loss = loss_of(ref_logits, targets64)
        check(out["logits"].dtype == np.float64 and out["logits"].shape == (B, T, V), "logits F64 [B, T, V]")
        d = np.abs(out["logits"] - ref_logits).max()
        check(d <= 1e-10, "f64 logits match NumPy: max |diff| = %.3g (<= 1e-10)" % d)
        check(out["loss"].shape == (), "loss has shape []")
        d = abs(float(out["loss"]) - ref_loss)
        check(d <= 1e-10, "f64 loss %.12f matches NumPy %.12f: |diff| = %.3g" % (float(out["loss"]), ref_loss, d))
        losses = out["losses"]
        check(losses.shape == (10,), "losses has shape [10]")
        check(losses[0] == out["loss"], "losses[0] == loss exactly (%.17g)" % losses[0])
        check(bool(np.all(np.diff(losses) < 0)),
              "losses decrease at every step: " + " ".join("%.5f" % v for v in losses))

        # every parameter has a gradient of its shape; one entry of each against finite differences
        worst = 0.0
        for name, p in w.items():
            g = out.get("grad." + name)
            if g is None or g.shape != p.shape:
                check(False, "grad.%s present with shape %s" % (name, p.shape))
                continue
            idx = tuple(int(rng.integers(0, s)) for s in p.shape)
            if name == "wpe.weight":
                idx = (int(rng.integers(0, T)),) + idx[1:]  # positions >= T get no gradient
            hstep = 1e-5
            wp = dict(w)
            wp[name] = p.copy()
            wp[name][idx] += hstep
            lp = loss_of(forward(wp, ids64, H), targets64)
            wp[name][idx] -= 2 * hstep
            lm = loss_of(forward(wp, ids64, H), targets64)
            fd = (lp - lm) / (2 * hstep)
            err = abs(fd - g[idx]) / max(1e-3, abs(fd))
            worst = max(worst, err)
            if err > 1e-5:
                check(False, "grad.%s%s = %.10g, finite difference %.10g" % (name, list(idx), g[idx], fd))
        check(worst <= 1e-5, "one entry of each of the %d gradients matches a central difference "
              "(worst relative error %.3g)" % (len(w), worst))
        check(len([k for k in out if k.startswith("grad.")]) == len(w), "exactly one grad.<name> per parameter")
        check(bool(np.all(out["grad.wpe.weight"][T:] == 0)), "grad.wpe.weight rows >= T are zero")

        # AdamW's first step from the program's gradients:
        #   p <- p (1 - lr wd [2-D parameters only]) - lr m^ / (sqrt(v^) + eps)
        def adamw_step1(decay_1d):
            w1 = {}
            for name, p in w.items():
                g = out["grad." + name]
                m, v = (1 - BETA1) * g, (1 - BETA2) * g * g
                mhat, vhat = m / (1 - BETA1), v / (1 - BETA2)
                decay = WD if p.ndim >= 2 or decay_1d else 0.0
                w1[name] = p * (1 - LR * decay) - LR * mhat / (np.sqrt(vhat) + EPS)
            return loss_of(forward(w1, ids64, H), targets64)

        l1 = adamw_step1(False)
        d = abs(l1 - losses[1])
        check(d <= 1e-10, "losses[1] %.12f matches NumPy AdamW step 1 %.12f: |diff| = %.3g" % (losses[1], l1, d))
        d = abs(adamw_step1(True) - losses[1])
        check(d > 1e-8, "(decaying the 1-D parameters too would differ by %.3g)" % d)

        rc, so, se = run32.result()
        if rc != 0:
            print(so + se)
            check(False, "f32 run exits 0")
            return 1
        o, meta32, _ = read_safetensors(o32)
        check(o["logits"].dtype == np.float32 and o["grad.wte.weight"].dtype == np.float32 and meta32.get("dtype") == "f32",
              "f32 mode writes F32")
        d = np.abs(o["logits"] - ref_logits).max()
        check(d <= 1e-4, "f32 logits match NumPy: max |diff| = %.3g (<= 1e-4)" % d)
        d = max(float(np.abs(o["grad." + n] - out["grad." + n]).max() / (np.abs(out["grad." + n]).max() + 1e-12))
                for n in w)
        check(d <= 1e-4, "f32 gradients match f64: worst max|diff|/max|g| = %.3g" % d)
        check(o["losses"][0] == o["loss"] and o["losses"].shape == (3,), "f32: losses[0] == loss")

        for what, words, r in error_runs:
            rc, _, se = r.result()
            ok = rc == 1 and all(x in se for x in words)
            check(ok, "%s: exit 1, message names %s" % (what, words))
            if not ok:
                print("   rc=%d stderr: %s" % (rc, se.strip()))

    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
