#!/usr/bin/env bash
# Checkpoint/resume across ranks loses nothing: train_mnist_model_parallel is killed (SIGKILL)
# mid-run, `--resume latest` continues from the newest snapshot that both ranks completed (the
# manifest, comm/multi_node_training/multi_node_snapshot.h), and the resumed run equals an uninterrupted run
# with the same seed bit for bit: its per-epoch log, its final metrics and (where both runs wrote
# it) its last snapshot's parameters and optimizer state.
#   1. rank 1 dies right after writing its epoch-2 snapshot, before the ranks agree on it
#      (TANDEM_FAULT_INJECT, training/trainer.h): its newer file is ignored, the run resumes
#      from epoch 1;
#   2. rank 0 dies mid epoch 3: the run resumes from epoch 2;
#   3. this script SIGKILLs rank 1 from outside at whatever point epoch 2 or 3 has reached;
#   4. snapshots mid-epoch (--snapshot-interval): rank 0 dies mid epoch 2 and the run resumes
#      from the middle of the epoch (the iterator's position and order, the random streams).
set -uo pipefail
bin="examples/mnist/train_mnist_model_parallel"
# 60000 examples: 120 steps of 500 an epoch. Under the sanitizers (TANDEM_TEST_SHORT=1, .bazelrc's
# asan config) the first 12000: 24 steps, the same crashes at the same points of the epochs.
small=(--unit 50 --batchsize 500) per=120
if [ "${TANDEM_TEST_SHORT:-0}" = 1 ]; then
  /usr/bin/python3 tests/examples/common/mnist_subset.py "$TEST_TMPDIR/mnist" 12000 2000 || exit 1
  small+=(--data-dir "$TEST_TMPDIR/mnist") per=24
fi
export OMP_NUM_THREADS=1 TANDEM_COMM_TIMEOUT=60
t="$TEST_TMPDIR"
fail() { echo "FAIL: $*"; exit 1; }
mpi() { timeout --signal=KILL 300 /usr/bin/mpiexec.mpich -n 2 "$bin" "${small[@]}" "$@"; }
manifest_iteration() {
  /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["iteration"])' "$1/snapshot_manifest.json"
}

# A crashed run must end by itself (not by this script's timeout) with a non-zero status.
expect_crash() {  # expect_crash NAME [mpi args...]
  local name="$1"; shift
  mpi "$@" > "$t/$name.txt" 2>&1
  local status=$?
  { [ "$status" -ne 0 ] && [ "$status" -ne 137 ]; } || { cat "$t/$name.txt"; fail "$name: status $status"; }
}

# Resumes OUT to epoch 3 from iteration FROM and compares it with the uninterrupted run.
resume_and_compare() {  # resume_and_compare NAME FROM [flags of the resumed run...]
  local out="$t/$1"
  mpi --epoch 3 --out "$out" --resume latest "${@:3}" > "$t/$1.resumed.txt" 2>&1 \
    || { cat "$t/$1.resumed.txt"; fail "$1: resume"; }
  grep -q "^resumed at iteration $2\$" "$t/$1.resumed.txt" || { cat "$t/$1.resumed.txt"; fail "$1: not resumed at $2"; }
  local a b
  a=$(grep "final test accuracy" "$t/whole.txt")
  b=$(grep "final test accuracy" "$t/$1.resumed.txt")
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "$1: final metrics differ: '$a' vs '$b'"
  # The per-epoch log and the last snapshot of both ranks, bit for bit.
  /usr/bin/python3 tests/examples/common/compare_runs.py "$1" "$t/whole" "$out" $((3 * per)) \
    || fail "$1: the resumed run differs"
}

mpi --epoch 3 --out "$t/whole" > "$t/whole.txt" 2>&1 || { cat "$t/whole.txt"; fail "the uninterrupted run"; }

# 1. Rank 1 crashes between writing its snapshot of epoch 2 and the agreement.
TANDEM_FAULT_INJECT="rank=1,iteration=$((2 * per)),point=snapshot,action=kill" expect_crash cut1 --epoch 3 --out "$t/cut1"
test -f "$t/cut1/rank1/snapshot_iter_$((2 * per)).npz" || { ls -R "$t/cut1"; fail "cut1: rank 1 did not write epoch 2"; }
[ "$(manifest_iteration "$t/cut1")" = "$per" ] || { cat "$t/cut1/snapshot_manifest.json"; fail "cut1: manifest"; }
resume_and_compare cut1 "$per"

# 2. Rank 0 crashes mid epoch 3.
TANDEM_FAULT_INJECT="rank=0,iteration=$((5 * per / 2)),action=kill" expect_crash cut2 --epoch 3 --out "$t/cut2"
[ "$(manifest_iteration "$t/cut2")" = $((2 * per)) ] || { cat "$t/cut2/snapshot_manifest.json"; fail "cut2: manifest"; }
resume_and_compare cut2 $((2 * per))

# 3. A SIGKILL from outside, once epoch 1's snapshot is complete.
out="$t/cut3"
mpi --epoch 100 --out "$out" > "$t/cut3.txt" 2>&1 &
job=$!
for _ in $(seq 600); do
  [ -f "$out/snapshot_manifest.json" ] && break
  sleep 0.05
done
pid=""
for p in $(pgrep -f -- "--out $out\$"); do
  grep -qz "^PMI_RANK=1\$" "/proc/$p/environ" 2>/dev/null && pid=$p
done
[ -n "$pid" ] || { cat "$t/cut3.txt"; fail "cut3: rank 1's process not found"; }
kill -KILL "$pid"
wait "$job"
status=$?
{ [ "$status" -ne 0 ] && [ "$status" -ne 137 ]; } || { cat "$t/cut3.txt"; fail "cut3: status $status"; }
from=$(manifest_iteration "$out")
echo "cut3: killed rank 1 (pid $pid); the manifest names iteration $from"
# (A short run's epochs pass quickly: the kill may land some epochs later.)
[ "$from" -ge "$per" ] && [ $((from % per)) -eq 0 ] && { [ "${TANDEM_TEST_SHORT:-0}" = 1 ] || [ "$from" -le $((3 * per)) ]; } \
  || fail "cut3: manifest iteration $from"
resume_and_compare cut3 "$from"

# 4. Snapshots mid-epoch: rank 0 dies in epoch 2 between two snapshots.
# (Every per/3 iterations: 40 or 8, a divisor of the epoch, so both runs snapshot the last one.)
every=$((per / 3)) at=$((per + per * 5 / 12))
TANDEM_FAULT_INJECT="rank=0,iteration=$at,action=kill" expect_crash cut4 --epoch 3 --out "$t/cut4" --snapshot-interval "$every"
[ "$(manifest_iteration "$t/cut4")" = $((at / every * every)) ] || { cat "$t/cut4/snapshot_manifest.json"; fail "cut4: manifest"; }
resume_and_compare cut4 $((at / every * every)) --snapshot-interval "$every"
echo PASS
