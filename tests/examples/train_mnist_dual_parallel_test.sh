#!/usr/bin/env bash
# train_mnist_dual_parallel end to end on 4 ranks (2 pairs) and 2 ranks (1 pair), on the real
# Fashion-MNIST (small, fast settings): it learns; the data-parallel replicas end with identical
# weights and optimizer state (rank 0 = rank 2, rank 1 = rank 3); it resumes from each rank's
# latest snapshot; and misuse (an odd number of ranks, --gpu, a bad flag) fails with a one-line
# error and a non-zero status.
set -uo pipefail
bin="examples/mnist/train_mnist_dual_parallel"
mpi() { timeout --signal=KILL 300 /usr/bin/mpiexec.mpich -n "$@"; }
export OMP_NUM_THREADS=1 TANDEM_COMM_TIMEOUT=60

# --help says what --batchsize means (no MPI needed to print it).
"$bin" --help > "$TEST_TMPDIR/help.txt" 2>&1 || { cat "$TEST_TMPDIR/help.txt"; echo "FAIL: --help"; exit 1; }
grep -q "minibatch of each pair" "$TEST_TMPDIR/help.txt" || { cat "$TEST_TMPDIR/help.txt"; exit 1; }

# 4 ranks: 60000 / 2 pairs / 500 = 60 iterations per epoch.
out="$TEST_TMPDIR/r4"
mpi 4 "$bin" --epoch 1 --unit 50 --batchsize 500 --out "$out" > "$TEST_TMPDIR/r4.txt" 2>&1 \
  || { cat "$TEST_TMPDIR/r4.txt"; echo "FAIL: 4-rank run"; exit 1; }
grep -q "4 ranks = 2 pairs" "$TEST_TMPDIR/r4.txt" && grep -q "30000 train / 5000 test examples per pair" \
  "$TEST_TMPDIR/r4.txt" || { cat "$TEST_TMPDIR/r4.txt"; echo "FAIL: header"; exit 1; }
for r in 1 2 3; do
  test -f "$out/rank$r/snapshot_iter_60.npz" || { ls -R "$out"; echo "FAIL: rank $r snapshot"; exit 1; }
done
test -f "$out/log" && test -f "$out/snapshot_iter_60.npz" && test ! -e "$out/rank1/log" \
  || { ls -R "$out"; echo "FAIL: rank 0 outputs"; exit 1; }

# The replicas of each half are identical (model and optimizer state), and the run learned.
check_run() {  # check_run OUT_DIR ITERATION EPOCHS FINAL_OUTPUT
  /usr/bin/python3 - "$@" <<'PY'
import json, re, sys
import numpy as np
out, iteration, epochs, printed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), open(sys.argv[4]).read()
log = json.load(open(out + "/log"))
assert [e["epoch"] for e in log] == list(range(1, epochs + 1)), log
assert log[-1]["iteration"] == iteration, log
assert log[-1]["validation/main/accuracy"] > 0.7, log
final = float(re.search(r"final test accuracy: ([0-9.]+)", printed).group(1))
assert abs(final - log[-1]["validation/main/accuracy"]) < 1e-3, (final, log[-1])
snap = lambda r: np.load(out + ("" if r == 0 else "/rank%d" % r) + "/snapshot_iter_%d.npz" % iteration)
for a, b, n_params in [(0, 2, 2), (1, 3, 4)]:
    x, y = snap(a), snap(b)
    keys = [k for k in x.files if k.startswith(("model/", "optimizer/"))]
    assert len([k for k in keys if k.startswith("model/")]) == n_params, (a, keys)
    assert keys == [k for k in y.files if k.startswith(("model/", "optimizer/"))], (a, b)
    for k in keys:
        assert np.array_equal(x[k], y[k]), ("ranks %d and %d differ" % (a, b), k)
    assert int(x["optimizer/t"]) == iteration - 1, int(x["optimizer/t"])  # the first update broadcasts
# The pairs trained on different data: their iterators' orders differ.
assert not np.array_equal(snap(0)["iterator/order"], snap(2)["iterator/order"])
PY
}
check_run "$out" 60 1 "$TEST_TMPDIR/r4.txt" || { cat "$TEST_TMPDIR/r4.txt"; echo "FAIL: 4-rank results"; exit 1; }

# Resume: every rank continues from the newest snapshot that all ranks completed.
mpi 4 "$bin" --epoch 2 --unit 50 --batchsize 500 --out "$out" --resume latest > "$TEST_TMPDIR/resumed.txt" 2>&1 \
  || { cat "$TEST_TMPDIR/resumed.txt"; echo "FAIL: resume"; exit 1; }
grep -q "resumed at iteration 60" "$TEST_TMPDIR/resumed.txt" || { cat "$TEST_TMPDIR/resumed.txt"; exit 1; }
test -f "$out/rank3/snapshot_iter_120.npz" || { ls -R "$out"; echo "FAIL: resumed snapshots"; exit 1; }
/usr/bin/python3 - "$out/log" <<'PY' || { cat "$TEST_TMPDIR/resumed.txt"; exit 1; }
import json, sys
log = json.load(open(sys.argv[1]))
assert log[1]["main/loss"] < log[0]["main/loss"], log
assert log[1]["validation/main/loss"] < log[0]["validation/main/loss"], log
PY
check_run_resumed() {
  /usr/bin/python3 - "$out" <<'PY'
import numpy as np, sys
out = sys.argv[1]
snap = lambda r: np.load(out + ("" if r == 0 else "/rank%d" % r) + "/snapshot_iter_120.npz")
for a, b in [(0, 2), (1, 3)]:
    x, y = snap(a), snap(b)
    for k in x.files:
        if k.startswith(("model/", "optimizer/")):
            assert np.array_equal(x[k], y[k]), ("ranks %d and %d differ after the resume" % (a, b), k)
PY
}
check_run_resumed || { echo "FAIL: replicas differ after resume"; exit 1; }

# 2 ranks: one pair, the whole data set (120 iterations).
out2="$TEST_TMPDIR/r2"
mpi 2 "$bin" --epoch 1 --unit 50 --batchsize 500 --out "$out2" > "$TEST_TMPDIR/r2.txt" 2>&1 \
  || { cat "$TEST_TMPDIR/r2.txt"; echo "FAIL: 2-rank run"; exit 1; }
grep -q "2 ranks = 1 pair (model" "$TEST_TMPDIR/r2.txt" && test -f "$out2/rank1/snapshot_iter_120.npz" \
  || { cat "$TEST_TMPDIR/r2.txt"; ls -R "$out2"; echo "FAIL: 2-rank outputs"; exit 1; }
/usr/bin/python3 - "$out2/log" <<'PY' || { cat "$TEST_TMPDIR/r2.txt"; exit 1; }
import json, sys
log = json.load(open(sys.argv[1]))
assert len(log) == 1 and log[0]["iteration"] == 120 and log[0]["validation/main/accuracy"] > 0.7, log
PY

# Misuse: a clear one-line error and a non-zero status.
expect_error() {  # expect_error NAME MESSAGE RANKS ARGS...
  local name="$1" message="$2"; shift 2
  if mpi "$@" > "$TEST_TMPDIR/$name.txt" 2>&1; then cat "$TEST_TMPDIR/$name.txt"; echo "FAIL: $name accepted"; exit 1; fi
  grep -q -- "$message" "$TEST_TMPDIR/$name.txt" || { cat "$TEST_TMPDIR/$name.txt"; echo "FAIL: $name message"; exit 1; }
}
expect_error odd "runs on an even number of ranks (pairs of ranks; mpiexec.mpich -n 4), not 3" 3 "$bin" --epoch 1
expect_error gpu "train_mnist_dual_parallel --gpu 0: no CUDA device" 4 "$bin" --gpu 0
expect_error flag "unknown flag --epochs" 4 "$bin" --epochs 3
expect_error resume "no snapshot manifest $TEST_TMPDIR/none/snapshot_manifest.json" 4 "$bin" --epoch 1 --out "$TEST_TMPDIR/none" --resume latest
echo PASS
