#!/usr/bin/env bash
# train_mnist end to end on the real Fashion-MNIST (small and fast settings): it learns, writes a
# JSON log and snapshots, resumes from the latest snapshot and continues the log, and bad
# flags or data directories fail with a one-line error and a non-zero exit.
set -euo pipefail
bin="examples/mnist/train_mnist"
out="$TEST_TMPDIR/mnist"
export OMP_NUM_THREADS=1

"$bin" --epoch 1 --unit 50 --batchsize 500 --out "$out" | tee "$TEST_TMPDIR/first.txt"
test -f "$out/log"
test -f "$out/snapshot_iter_120.npz"
grep -q 'label="predictor/l1/W\\nf32\[50, 784\]"' "$out/cg.dot"  # DumpGraph: the graph of a step
/usr/bin/python3 - "$out/log" <<'PY'
import json, sys
log = json.load(open(sys.argv[1]))
assert len(log) == 1 and log[0]["iteration"] == 120, log
assert log[0]["validation/main/accuracy"] > 0.7, log
PY

"$bin" --epoch 2 --unit 50 --batchsize 500 --out "$out" --resume latest | tee "$TEST_TMPDIR/second.txt"
grep -q "resumed from .*snapshot_iter_120.npz at iteration 120" "$TEST_TMPDIR/second.txt"
/usr/bin/python3 - "$out/log" <<'PY'
import json, sys
log = json.load(open(sys.argv[1]))
assert [e["epoch"] for e in log] == [1, 2], log
assert log[1]["iteration"] == 240, log
assert log[1]["main/loss"] < log[0]["main/loss"], log
PY

fails() {  # fails EXPECTED-TEXT ARGS...: the command must exit non-zero with that one-line error
  local expected="$1"; shift
  if "$bin" "$@" > "$TEST_TMPDIR/out.txt" 2> "$TEST_TMPDIR/err.txt"; then echo "accepted: $*"; exit 1; fi
  grep -q "$expected" "$TEST_TMPDIR/err.txt" || { echo "for $*:"; cat "$TEST_TMPDIR/err.txt"; exit 1; }
  [[ $(wc -l < "$TEST_TMPDIR/err.txt") -eq 1 ]] || { echo "not one line for $*"; exit 1; }
}
fails "needs an integer" --epoch ten
fails "unknown flag --epochs" --epochs 3
fails "/nonexistent-mnist" --data-dir /nonexistent-mnist --out "$TEST_TMPDIR/bad"
fails "no snapshot" --resume latest --out "$TEST_TMPDIR/empty"
fails "train_mnist --gpu 0: no CUDA device" --gpu 0
"$bin" --help | grep -q -- "--batchsize"
