#!/usr/bin/env bash
# train_unet end to end on canvases of real Fashion-MNIST items (64 x 64, a U-Net of depth 2):
# split into bands over 2 and 3 ranks (3: cuts that are not multiples of 4, so the upsampled maps
# move to the skip connections' layout) and a 2 x 2 grid over 4 ranks, the U-Net follows the same
# U-Net in one process, both the spatial layers on 1 rank and the plain layers (--mode whole):
# the same losses to float tolerance and the same accuracy; every rank snapshots and resumes;
# misuse fails clearly.
set -uo pipefail
bin="examples/unet/train_unet"
mpi() { timeout --signal=KILL 300 /usr/bin/mpiexec.mpich -n "$@"; }
export OMP_NUM_THREADS=1 TANDEM_COMM_TIMEOUT=60
small=(--size 64 --depth 2 --unit 4 --train-size 16 --test-size 2 --eval-interval 10)

run() {  # run NAME RANKS FLAGS...
  local name="$1" n="$2"; shift 2
  mpi "$n" "$bin" "${small[@]}" "$@" --out "$TEST_TMPDIR/$name" > "$TEST_TMPDIR/$name.txt" 2>&1 \
    || { cat "$TEST_TMPDIR/$name.txt"; echo "FAIL: $name"; exit 1; }
  grep -q "final test accuracy: .* on $n rank(s)" "$TEST_TMPDIR/$name.txt" || { cat "$TEST_TMPDIR/$name.txt"; exit 1; }
}
run whole 1 --iterations 20 --mode whole
run r1 1 --iterations 20
run r2 2 --iterations 20
run r3 3 --iterations 20
run r4 4 --iterations 20 --layout grid
grep -q "2 x 2 tiles of 64 x 64" "$TEST_TMPDIR/r4.txt" || { cat "$TEST_TMPDIR/r4.txt"; exit 1; }
test -f "$TEST_TMPDIR/r3/snapshot_iter_20.npz" && test -f "$TEST_TMPDIR/r3/rank2/snapshot_iter_20.npz" \
  || { ls -R "$TEST_TMPDIR"; echo "FAIL: snapshots"; exit 1; }
/usr/bin/python3 - "$TEST_TMPDIR" <<'PY' || exit 1
import json, sys
logs = {n: json.load(open(f"{sys.argv[1]}/{n}/log")) for n in ("whole", "r1", "r2", "r3", "r4")}
assert [e["iteration"] for e in logs["whole"]] == [10, 20], logs["whole"]
for n in ("r1", "r2", "r3", "r4"):
    for one, many in zip(logs["whole"], logs[n]):
        for key in ("main/loss", "validation/main/loss"):
            assert abs(one[key] - many[key]) <= 1e-3 * abs(one[key]), (n, key, one, many)
        for key in ("validation/main/accuracy", "validation/main/miou"):
            assert abs(one[key] - many[key]) <= 0.005, (n, key, one, many)
first, last = logs["whole"]
assert last["main/loss"] < first["main/loss"], logs["whole"]
PY

# Resume from the newest snapshot that every rank completed: the same as an uninterrupted run.
run cut 2 --iterations 10
mpi 2 "$bin" "${small[@]}" --iterations 20 --out "$TEST_TMPDIR/cut" --resume latest > "$TEST_TMPDIR/resumed.txt" 2>&1 \
  || { cat "$TEST_TMPDIR/resumed.txt"; echo "FAIL: resume"; exit 1; }
grep -q "resumed at iteration 10\$" "$TEST_TMPDIR/resumed.txt" || { cat "$TEST_TMPDIR/resumed.txt"; exit 1; }
/usr/bin/python3 - "$TEST_TMPDIR" <<'PY' || exit 1
import json, sys
whole, cut = (json.load(open(f"{sys.argv[1]}/{d}/log")) for d in ("r2", "cut"))
assert [e["iteration"] for e in cut] == [10, 20], cut
for key in ("main/loss", "validation/main/loss", "validation/main/accuracy"):
    assert abs(whole[1][key] - cut[1][key]) <= 1e-6 * abs(whole[1][key]), (key, whole, cut)
PY

# Misuse: a clear error and a non-zero status.
expect_error() {
  local message="$1"; shift
  if mpi "$@" > "$TEST_TMPDIR/err.txt" 2>&1; then echo "FAIL: accepted: $*"; exit 1; fi
  grep -q "$message" "$TEST_TMPDIR/err.txt" || { cat "$TEST_TMPDIR/err.txt"; echo "FAIL: no '$message'"; exit 1; }
}
expect_error "train_unet: --mode whole runs in one process, not on 2 ranks" 2 "$bin" "${small[@]}" --mode whole
expect_error "UNet: a U-Net of depth 3 needs a height and width that are multiples of 8, got 60 x 60" 2 "$bin" --size 60
expect_error "train_unet: --layout must be bands or grid" 1 "$bin" --layout rings
expect_error "train_unet --gpu 0: no CUDA device" 2 "$bin" --gpu 0
echo PASS
