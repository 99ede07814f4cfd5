#!/usr/bin/env bash
# seq2seq_pipeline end to end on a small numbers corpus: the encoder/decoder pipeline over 2 ranks
# (1F1B, GPipe and the zero-bubble zb-h1, 3 microbatches sorted by source length, so of different
# sequence lengths through the LSTMs), and zbv on 1 rank (both stages, each backward split into
# input and weight gradients), compute what the same program computes on 1 rank with 1F1B (both
# stages in one process): the same losses and accuracies to float tolerance, per epoch and on the
# whole held-out set; it learns (the training and validation losses fall, the final loss under a
# bound); misuse fails with a one-line error.
set -uo pipefail
bin="examples/pipeline/seq2seq_pipeline"
export OMP_NUM_THREADS=1 TANDEM_COMM_TIMEOUT=60
t="$TEST_TMPDIR"
# 4000 training pairs of the numbers below 20000 (1 to 5 digits): 125 steps of 32 per epoch.
small=(--numbers 20000 --test-size 1000 --train-size 4000 --unit 32 --batchsize 32 --epoch 2 --microbatches 3)
fail() { echo "FAIL: $*"; exit 1; }
start=$SECONDS

# run NAME RANKS [flags...]: output in $t/NAME.txt, the log in $t/NAME/log.
run() {
  local name="$1" n="$2"; shift 2
  timeout --signal=KILL 60 /usr/bin/mpiexec.mpich -n "$n" "$bin" "${small[@]}" --out "$t/$name" "$@" \
    > "$t/$name.txt" 2>&1 || { cat "$t/$name.txt"; fail "$name ($n ranks: $*)"; }
}

run one 1 --schedule 1f1b
run f1b 2 --schedule 1f1b
run gpipe 2 --schedule gpipe
run zbh1 2 --schedule zb-h1
run zbv 1 --schedule zbv
grep -q "^seq2seq_pipeline: 'interleaved' (1 rank, 2 stages, 3 microbatches); 4000 train / 1000 held-out" "$t/one.txt" \
  || { cat "$t/one.txt"; fail "1-rank header"; }
grep -q "^seq2seq_pipeline: '1f1b' (2 ranks, 2 stages, 3 microbatches)" "$t/f1b.txt" || { cat "$t/f1b.txt"; fail header; }
grep -q "^seq2seq_pipeline: 'gpipe' (2 ranks, 2 stages, 3 microbatches)" "$t/gpipe.txt" || { cat "$t/gpipe.txt"; fail header; }
grep -q "^seq2seq_pipeline: 'zb-h1' (2 ranks, 2 stages, 3 microbatches)" "$t/zbh1.txt" || { cat "$t/zbh1.txt"; fail header; }
grep -q "^seq2seq_pipeline: 'zbv' (1 rank, 2 stages, 3 microbatches)" "$t/zbv.txt" || { cat "$t/zbv.txt"; fail header; }
# Rank 0 alone prints: one header, one final line.
[ "$(grep -c "^seq2seq_pipeline:" "$t/f1b.txt")" = 1 ] && [ "$(grep -c "^final validation accuracy" "$t/f1b.txt")" = 1 ] \
  || { cat "$t/f1b.txt"; fail "more than rank 0 printed"; }

/usr/bin/python3 - "$t" <<'PY' || fail "the runs disagree or did not learn"
import json, re, sys
t = sys.argv[1]
def text(name):
    return open(f"{t}/{name}.txt").read()
def final(name):
    m = re.search(r"^final validation accuracy: ([0-9.]+)  loss: ([0-9.]+)$", text(name), re.M)
    assert m, name
    return float(m.group(1)), float(m.group(2))
def log(name):
    return json.load(open(f"{t}/{name}/log"))
# The microbatches of the first batch differ in sequence length: sorted by source length, the
# first holds shorter sources than the last.
spans = re.findall(r"^  microbatch (\d): (\d+) pairs, source (\d+)(?:-(\d+))? / target", text("f1b"), re.M)
assert [int(s[0]) for s in spans] == [0, 1, 2] and sum(int(s[1]) for s in spans) == 32, spans
assert int(spans[0][2]) < int(spans[2][3] or spans[2][2]), spans
for name in ("f1b", "gpipe", "zbh1", "zbv"):
    fa, fb = final("one"), final(name)
    assert abs(fa[0] - fb[0]) <= 0.002, (name, fa, fb)
    assert abs(fa[1] - fb[1]) <= 1e-3 * fa[1], (name, fa, fb)
    la, lb = log("one"), log(name)
    assert [e["iteration"] for e in la] == [e["iteration"] for e in lb] == [125, 250], (la, lb)
    for ea, eb in zip(la, lb):
        for key in ("main/loss", "validation/main/loss", "main/accuracy", "validation/main/accuracy"):
            assert abs(ea[key] - eb[key]) <= 1e-3 * abs(ea[key]), (name, ea["epoch"], key, ea[key], eb[key])
    print(f"{name} = 1 rank (1f1b): final validation loss {fb[1]:.4f} / {fa[1]:.4f}, accuracy {fb[0]:.4f} / "
          f"{fa[0]:.4f}; main/loss {[round(e['main/loss'], 5) for e in lb]}")
# It learns (measured: main/loss 2.656 -> 1.612, final validation loss 1.426, accuracy 0.602).
one = log("one")
assert one[1]["main/loss"] < 0.75 * one[0]["main/loss"], one
assert one[1]["validation/main/loss"] < one[0]["validation/main/loss"], one
accuracy, loss = final("one")
assert loss < 1.6 and accuracy > 0.55, (accuracy, loss)
PY

# Misuse: the same one-line error on every rank and a non-zero status.
expect_error() {  # expect_error MESSAGE RANKS [flags...]
  local message="$1" n="$2"; shift 2
  if timeout --signal=KILL 60 /usr/bin/mpiexec.mpich -n "$n" "$bin" --out "$t/misuse" "$@" > "$t/err.txt" 2>&1; then
    fail "accepted: $*"
  fi
  grep -qF -- "$message" "$t/err.txt" || { cat "$t/err.txt"; fail "no '$message'"; }
}
expect_error "seq2seq_pipeline runs on 1 or 2 ranks (2 stages), not 3" 3 --numbers 100 --test-size 10
expect_error "seq2seq_pipeline: --schedule is gpipe, 1f1b, zb-h1, zb-h2 or zbv, not 'interleaved'" 2 --schedule interleaved
expect_error "seq2seq_pipeline: --schedule zbv holds 2 stages per rank, 4 on 2 ranks" 2 --schedule zbv
expect_error "seq2seq_pipeline: --microbatches 65 is more than --batchsize 64" 2 --microbatches 65
echo "PASS ($((SECONDS - start)) s)"
