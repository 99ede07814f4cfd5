#!/usr/bin/env bash
# train_mnist_model_parallel end to end on 2 ranks and the real Fashion-MNIST (small, fast
# settings), in both forms: it learns, rank 0 writes the log, each rank its snapshots; it
# resumes from the latest snapshots; and misuse fails with a one-line error.
set -uo pipefail
bin="examples/mnist/train_mnist_model_parallel"
mpi() { timeout --signal=KILL 300 /usr/bin/mpiexec.mpich -n "$@"; }
export OMP_NUM_THREADS=1 TANDEM_COMM_TIMEOUT=60

for form in chainlist explicit; do
  out="$TEST_TMPDIR/$form"
  mpi 2 "$bin" --form "$form" --epoch 1 --unit 50 --batchsize 500 --out "$out" > "$TEST_TMPDIR/$form.txt" 2>&1 \
    || { cat "$TEST_TMPDIR/$form.txt"; echo "FAIL: $form run"; exit 1; }
  grep -q "final test accuracy" "$TEST_TMPDIR/$form.txt" || { cat "$TEST_TMPDIR/$form.txt"; exit 1; }
  test -f "$out/log" && test -f "$out/snapshot_iter_120.npz" && test -f "$out/rank1/snapshot_iter_120.npz" \
    && test -f "$out/snapshot_manifest.json" \
    || { ls -R "$out"; echo "FAIL: $form outputs"; exit 1; }
  # Both ranks' graphs in rank 0's cg.dot (DumpGraph): two clusters, joined by the two messages.
  grep -q cluster_rank1 "$out/cg.dot" && [[ $(grep -c 'color="#c03000"' "$out/cg.dot") -eq 2 ]] \
    || { cat "$out/cg.dot"; echo "FAIL: $form graph"; exit 1; }
  /usr/bin/python3 - "$out/log" <<'PY' || exit 1
import json, sys
log = json.load(open(sys.argv[1]))
assert len(log) == 1 and log[0]["iteration"] == 120, log
assert log[0]["validation/main/accuracy"] > 0.7, log
PY
done

out="$TEST_TMPDIR/chainlist"
mpi 2 "$bin" --epoch 2 --unit 50 --batchsize 500 --out "$out" --resume latest > "$TEST_TMPDIR/resumed.txt" 2>&1 \
  || { cat "$TEST_TMPDIR/resumed.txt"; echo "FAIL: resume"; exit 1; }
grep -q "resumed at iteration 120" "$TEST_TMPDIR/resumed.txt" || { cat "$TEST_TMPDIR/resumed.txt"; exit 1; }
/usr/bin/python3 - "$out/log" <<'PY' || exit 1
import json, sys
log = json.load(open(sys.argv[1]))
assert [e["epoch"] for e in log] == [1, 2], log
assert log[1]["main/loss"] < log[0]["main/loss"], log
PY

# Misuse: one rank, or a bad flag, ends with a clear error and a non-zero status.
if mpi 1 "$bin" --epoch 1 > "$TEST_TMPDIR/one.txt" 2>&1; then echo "FAIL: ran on 1 rank"; exit 1; fi
grep -q "runs on exactly 2 ranks" "$TEST_TMPDIR/one.txt" || { cat "$TEST_TMPDIR/one.txt"; exit 1; }
if mpi 2 "$bin" --form sideways > "$TEST_TMPDIR/form.txt" 2>&1; then echo "FAIL: bad --form accepted"; exit 1; fi
grep -q "form is chainlist or explicit" "$TEST_TMPDIR/form.txt" || { cat "$TEST_TMPDIR/form.txt"; exit 1; }
if mpi 2 "$bin" --epochs 3 > "$TEST_TMPDIR/flag.txt" 2>&1; then echo "FAIL: unknown flag accepted"; exit 1; fi
grep -q "unknown flag --epochs" "$TEST_TMPDIR/flag.txt" || { cat "$TEST_TMPDIR/flag.txt"; exit 1; }
echo PASS
