#!/usr/bin/env bash
# train_mnist_data_parallel end to end on 2 and 3 ranks and the real Fashion-MNIST (small,
# fast settings): it learns, every rank ends with identical weights (the multi-node optimizer
# keeps the replicas equal), and a bad flag fails with a one-line error.
set -uo pipefail
bin="examples/mnist/train_mnist_data_parallel"
mpi() { timeout --signal=KILL 300 /usr/bin/mpiexec.mpich -n "$@"; }
export OMP_NUM_THREADS=1 TANDEM_COMM_TIMEOUT=60

for ranks in 2 3; do
  out="$TEST_TMPDIR/r$ranks"
  mpi "$ranks" "$bin" --epoch 1 --unit 50 --batchsize 200 --out "$out" > "$TEST_TMPDIR/r$ranks.txt" 2>&1 \
    || { cat "$TEST_TMPDIR/r$ranks.txt"; echo "FAIL: $ranks-rank run"; exit 1; }
  grep -q "final test accuracy" "$TEST_TMPDIR/r$ranks.txt" || { cat "$TEST_TMPDIR/r$ranks.txt"; exit 1; }
  /usr/bin/python3 - "$out" "$ranks" <<'PY' || exit 1
import glob, json, sys
import numpy as np
out, ranks = sys.argv[1], int(sys.argv[2])
log = json.load(open(out + "/log"))
assert len(log) == 1 and log[0]["validation/main/accuracy"] > 0.7, log
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
done

if mpi 2 "$bin" --unit ten > "$TEST_TMPDIR/flag.txt" 2>&1; then echo "FAIL: bad --unit accepted"; exit 1; fi
grep -q "needs an integer" "$TEST_TMPDIR/flag.txt" || { cat "$TEST_TMPDIR/flag.txt"; exit 1; }
echo PASS
