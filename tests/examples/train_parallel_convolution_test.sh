#!/usr/bin/env bash
# train_parallel_convolution end to end on the real Fashion-MNIST (a small subset): the
# channel-parallel CNN on 2 and 3 ranks follows the same CNN on 1 rank (same seed, same batches:
# the same losses to float tolerance); every rank snapshots and resumes; misuse fails clearly.
set -uo pipefail
bin="examples/cnn/train_parallel_convolution"
mpi() { timeout --signal=KILL 300 /usr/bin/mpiexec.mpich -n "$@"; }
export OMP_NUM_THREADS=1 TANDEM_COMM_TIMEOUT=60
# 1000 examples, 20 steps of 50 an epoch. Under the sanitizers (TANDEM_TEST_SHORT=1, .bazelrc's asan
# config) 500, 10 steps: the same comparisons; the accuracy floor is left to the normal run.
short="${TANDEM_TEST_SHORT:-0}"
if [ "$short" = 1 ]; then steps=10; else steps=20; fi
small=(--train-size $((steps * 50)) --test-size 300 --batchsize 50 --unit 6)

for n in 1 2 3; do
  mpi "$n" "$bin" "${small[@]}" --epoch 2 --out "$TEST_TMPDIR/r$n" > "$TEST_TMPDIR/r$n.txt" 2>&1 \
    || { cat "$TEST_TMPDIR/r$n.txt"; echo "FAIL: $n-rank run"; exit 1; }
  grep -q "final test accuracy: .* on $n rank(s)" "$TEST_TMPDIR/r$n.txt" || { cat "$TEST_TMPDIR/r$n.txt"; exit 1; }
done
last=$((2 * steps))
test -f "$TEST_TMPDIR/r2/snapshot_iter_$last.npz" && test -f "$TEST_TMPDIR/r2/rank1/snapshot_iter_$last.npz" \
  && test -f "$TEST_TMPDIR/r3/rank2/snapshot_iter_$last.npz" || { ls -R "$TEST_TMPDIR"; echo "FAIL: snapshots"; exit 1; }
/usr/bin/python3 - "$TEST_TMPDIR" "$short" <<'PY' || exit 1
import json, sys
logs = {n: json.load(open(f"{sys.argv[1]}/r{n}/log")) for n in (1, 2, 3)}
for n in (2, 3):
    for one, many in zip(logs[1], logs[n]):
        for key in ("main/loss", "validation/main/loss"):
            assert abs(one[key] - many[key]) <= 1e-3 * abs(one[key]), (n, key, one, many)
        assert abs(one["validation/main/accuracy"] - many["validation/main/accuracy"]) <= 0.011, (n, one, many)
assert logs[1][1]["main/loss"] < logs[1][0]["main/loss"], logs[1]
assert sys.argv[2] == "1" or logs[1][1]["validation/main/accuracy"] > 0.5, logs[1]
PY

# Resume from the newest snapshot that every rank completed: one more epoch, the same as an
# uninterrupted run.
mpi 2 "$bin" "${small[@]}" --epoch 1 --out "$TEST_TMPDIR/cut" > /dev/null 2>&1 || { echo "FAIL: first half"; exit 1; }
mpi 2 "$bin" "${small[@]}" --epoch 2 --out "$TEST_TMPDIR/cut" --resume latest > "$TEST_TMPDIR/resumed.txt" 2>&1 \
  || { cat "$TEST_TMPDIR/resumed.txt"; echo "FAIL: resume"; exit 1; }
grep -q "resumed at iteration $steps\$" "$TEST_TMPDIR/resumed.txt" || { cat "$TEST_TMPDIR/resumed.txt"; exit 1; }
/usr/bin/python3 - "$TEST_TMPDIR" <<'PY' || exit 1
import json, sys
whole, cut = (json.load(open(f"{sys.argv[1]}/{d}/log")) for d in ("r2", "cut"))
assert [e["epoch"] for e in cut] == [1, 2], cut
assert abs(whole[1]["main/loss"] - cut[1]["main/loss"]) <= 1e-4 * whole[1]["main/loss"], (whole, cut)
PY

# Misuse: a clear error and a non-zero status.
expect_error() {
  local message="$1"; shift
  if mpi "$@" > "$TEST_TMPDIR/err.txt" 2>&1; then echo "FAIL: accepted: $*"; exit 1; fi
  grep -q "$message" "$TEST_TMPDIR/err.txt" || { cat "$TEST_TMPDIR/err.txt"; echo "FAIL: no '$message'"; exit 1; }
}
expect_error "train_parallel_convolution --gpu 0: no CUDA device" 2 "$bin" --gpu 0
expect_error "fewer channels than the 3 ranks" 3 "$bin" --unit 2
expect_error "resume takes 'latest'" 2 "$bin" "${small[@]}" --resume nowhere.npz
expect_error "unknown flag --epochs" 2 "$bin" --epochs 3
echo PASS
