#!/usr/bin/env bash
# train_mnist_data_parallel end to end on 2 and 3 ranks and the real Fashion-MNIST (small,
# fast settings): it learns, every rank ends with identical weights (the multi-node optimizer
# keeps the replicas equal), and a bad flag fails with a one-line error. At 2 ranks also the
# data-parallel modes (ZeRO 1 and 2, accumulation, averaging after backward, double buffering)
# learn alike and keep the replicas equal, and a ZeRO-2 run resumed from its snapshot ends
# bit-identical to the uninterrupted one.
set -uo pipefail
bin="examples/mnist/train_mnist_data_parallel"
consolidate="tools/consolidate_snapshot"
mpi() { timeout --signal=KILL 300 /usr/bin/mpiexec.mpich -n "$@"; }
export OMP_NUM_THREADS=1 TANDEM_COMM_TIMEOUT=60
# Under the sanitizers (TANDEM_TEST_SHORT=1, .bazelrc's asan config) the first 12000 training and
# 2000 test examples: the same runs and comparisons, a fifth of the steps; the accuracy floor is
# left to the normal run.
short="${TANDEM_TEST_SHORT:-0}" data=() floor=0.7
if [ "$short" = 1 ]; then
  /usr/bin/python3 tests/examples/common/mnist_subset.py "$TEST_TMPDIR/mnist" 12000 2000 || exit 1
  data=(--data-dir "$TEST_TMPDIR/mnist") floor=0
fi

check() {  # out ranks: it learned, and every rank's weights are identical
  /usr/bin/python3 - "$1" "$2" "$floor" <<'PY' || exit 1
import glob, json, sys
import numpy as np
out, ranks, floor = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
log = json.load(open(out + "/log"))
assert log[-1]["validation/main/accuracy"] > floor, log
snaps = [sorted(glob.glob(out + "/snapshot_iter_*.npz"))[-1]]
snaps += [sorted(glob.glob("%s/rank%d/snapshot_iter_*.npz" % (out, r)))[-1] for r in range(1, ranks)]
first = np.load(snaps[0])
keys = [k for k in first.files if k.startswith("model/")]
assert len(keys) == 6, keys
for path in snaps[1:]:
    other = np.load(path)
    for k in keys:
        assert np.array_equal(first[k], other[k]), (path, k)
PY
}

run() {  # name ranks flags...: one training run into $TEST_TMPDIR/name
  local name="$1" ranks="$2"
  shift 2
  mpi "$ranks" "$bin" --unit 50 --batchsize 200 "${data[@]}" --out "$TEST_TMPDIR/$name" "$@" > "$TEST_TMPDIR/$name.txt" 2>&1 \
    || { cat "$TEST_TMPDIR/$name.txt"; echo "FAIL: $name"; exit 1; }
  grep -q "final test accuracy" "$TEST_TMPDIR/$name.txt" || { cat "$TEST_TMPDIR/$name.txt"; exit 1; }
}

for ranks in 2 3; do
  run "r$ranks" "$ranks" --epoch 1
  check "$TEST_TMPDIR/r$ranks" "$ranks"
done
run zero1 2 --epoch 1 --zero 1 && check "$TEST_TMPDIR/zero1" 2
run zero2acc 2 --epoch 1 --zero 2 --accumulate 2 --bucket-mb 0.05 && check "$TEST_TMPDIR/zero2acc" 2
run zero3 2 --epoch 1 --zero 3 && check "$TEST_TMPDIR/zero3" 2
run after 2 --epoch 1 --overlap 0 && check "$TEST_TMPDIR/after" 2
run double 2 --epoch 1 --double-buffering 1 && check "$TEST_TMPDIR/double" 2

# ZeRO 3: two epochs straight, and one epoch then a resumed second: the same bits; the
# consolidated snapshot holds what a zero = 0 run's does, within f32 rounding.
run straight 2 --epoch 2 --zero 3
run resumed 2 --epoch 1 --zero 3
run resumed 2 --epoch 2 --zero 3 --resume latest
run plain 2 --epoch 2
/usr/bin/python3 - "$TEST_TMPDIR" <<'PY' || exit 1
import glob, sys
import numpy as np
tmp = sys.argv[1]
for sub in ["", "/rank1"]:
    a = np.load(sorted(glob.glob(tmp + "/straight" + sub + "/snapshot_iter_*.npz"))[-1])
    b = np.load(sorted(glob.glob(tmp + "/resumed" + sub + "/snapshot_iter_*.npz"))[-1])
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
        if k.startswith("model/") or k.startswith("optimizer/"):
            assert np.array_equal(a[k], b[k]), (sub, k)
    assert any("[" in k for k in a.files if k.startswith("optimizer/")), a.files  # sharded state
PY
last() { ls "$1"/snapshot_iter_*.npz | sort -V | tail -1; }
"$consolidate" "$TEST_TMPDIR/one.npz" "$(last "$TEST_TMPDIR/straight")" "$(last "$TEST_TMPDIR/straight/rank1")" \
  > "$TEST_TMPDIR/consolidate.txt" 2>&1 || { cat "$TEST_TMPDIR/consolidate.txt"; exit 1; }
/usr/bin/python3 - "$TEST_TMPDIR/one.npz" "$(last "$TEST_TMPDIR/plain")" <<'PY' || exit 1
import sys
import numpy as np
one, plain = np.load(sys.argv[1]), np.load(sys.argv[2])
keys = [k for k in plain.files if k.startswith("model/") or k.startswith("optimizer/")]
assert sorted(keys) == sorted(k for k in one.files if k.startswith("model/") or k.startswith("optimizer/")), (one.files, plain.files)
for k in keys:
    assert one[k].shape == plain[k].shape, k
    assert np.allclose(one[k], plain[k], rtol=1e-4, atol=1e-6), (k, np.abs(one[k] - plain[k]).max())
PY

if mpi 2 "$bin" --unit ten > "$TEST_TMPDIR/flag.txt" 2>&1; then echo "FAIL: bad --unit accepted"; exit 1; fi
grep -q "needs an integer" "$TEST_TMPDIR/flag.txt" || { cat "$TEST_TMPDIR/flag.txt"; exit 1; }
echo PASS
