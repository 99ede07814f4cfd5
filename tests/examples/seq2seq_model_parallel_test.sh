#!/usr/bin/env bash
# seq2seq_model_parallel end to end on 2 ranks, on a small numbers corpus (fast settings): it
# learns (the loss falls, held-out exact match above a floor), each rank writes its snapshots,
# a run resumed after one epoch ends exactly as an uninterrupted one, a TSV file works as
# data, and misuse fails with a one-line error.
set -uo pipefail
bin="examples/seq2seq/seq2seq_model_parallel"
mpi() { timeout --signal=KILL 120 /usr/bin/mpiexec.mpich -n "$@"; }
export TANDEM_COMM_TIMEOUT=60
tmp="$TEST_TMPDIR"
# 19000 training pairs: 297 steps of 64 per epoch. Under the sanitizers (TANDEM_TEST_SHORT=1,
# .bazelrc's asan config; the LSTMs' many small operations run ~25x slower there) 2560 pairs, 40
# steps: the same code paths, and the learning thresholds are left to the normal run.
short="${TANDEM_TEST_SHORT:-0}"
if [ "$short" = 1 ]; then steps=40; pairs=2560; else steps=297; pairs=0; fi
small=(--numbers 20000 --test-size 1000 --train-size "$pairs" --unit 64 --batchsize 64)
run() {  # run NAME ARGS...: 2 ranks, output in $tmp/NAME.txt, failure ends the test
  local name="$1"; shift
  mpi 2 "$bin" "$@" > "$tmp/$name.txt" 2>&1 || { cat "$tmp/$name.txt"; echo "FAIL: $name run"; exit 1; }
}

run straight "${small[@]}" --epoch 2 --out "$tmp/straight"
grep -q "^final held-out exact match" "$tmp/straight.txt" && grep -q "  13364 -> " "$tmp/straight.txt" \
  || { cat "$tmp/straight.txt"; echo "FAIL: no final score or translations"; exit 1; }
for f in snapshot_iter_$steps.npz snapshot_iter_$((2 * steps)).npz rank1/snapshot_iter_$steps.npz \
         rank1/snapshot_iter_$((2 * steps)).npz; do
  test -f "$tmp/straight/$f" || { ls -R "$tmp/straight"; echo "FAIL: no $f"; exit 1; }
done
/usr/bin/python3 - "$tmp/straight/log" "$steps" "$short" <<'PY' || exit 1
import json, sys
log, steps, short = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3] == "1"
assert [e["iteration"] for e in log] == [steps, 2 * steps], log
assert log[1]["main/loss"] < (0.9 if short else 0.5) * log[0]["main/loss"], log
if not short:
    assert log[1]["validation/main/exact_match"] > 0.6, log
    assert log[1]["validation/main/accuracy"] > 0.9, log
PY

# One epoch, then resumed for the second: the same numbers as without the interruption.
run first "${small[@]}" --epoch 1 --out "$tmp/resumed"
run resumed "${small[@]}" --epoch 2 --out "$tmp/resumed" --resume latest
grep -q "resumed at iteration $steps" "$tmp/resumed.txt" || { cat "$tmp/resumed.txt"; exit 1; }
/usr/bin/python3 - "$tmp/resumed/log" "$tmp/straight/log" <<'PY' || exit 1
import json, sys
resumed, straight = (json.load(open(p)) for p in sys.argv[1:])
assert [e["epoch"] for e in resumed] == [1, 2], resumed
for key in ["main/loss", "main/accuracy", "validation/main/exact_match", "validation/main/accuracy"]:
    assert abs(resumed[1][key] - straight[1][key]) <= 1e-4 * abs(straight[1][key]), (key, resumed, straight)
PY

# Other data: a directory with pairs.tsv (here: reverse three letters).
mkdir -p "$tmp/tsv"
/usr/bin/python3 - "$tmp/tsv/pairs.tsv" <<'PY'
import itertools, sys
with open(sys.argv[1], "w") as f:
    for w in itertools.product("abcdef", repeat=3):
        f.write(" ".join(w) + "\t" + " ".join(reversed(w)) + "\n")
PY
run tsv --data-dir "$tmp/tsv" --test-size 16 --unit 32 --epoch 1 --out "$tmp/tsv_out"
grep -q "200 train / 16 held-out pairs" "$tmp/tsv.txt" && grep -q "vocabulary 6 -> 7" "$tmp/tsv.txt" \
  || { cat "$tmp/tsv.txt"; echo "FAIL: TSV data"; exit 1; }

# Misuse: one rank, no CUDA, an unknown flag, a malformed TSV line: a clear error, non-zero status.
fails() {  # fails NAME MESSAGE RANKS ARGS...
  local name="$1" message="$2" ranks="$3"; shift 3
  if mpi "$ranks" "$bin" "$@" > "$tmp/$name.txt" 2>&1; then echo "FAIL: $name accepted"; exit 1; fi
  grep -q -- "$message" "$tmp/$name.txt" || { cat "$tmp/$name.txt"; echo "FAIL: $name message"; exit 1; }
}
fails one_rank "runs on exactly 2 ranks (mpiexec.mpich -n 2), not 1" 1 --epoch 1
fails gpu "error: seq2seq_model_parallel --gpu 0: no CUDA device" 2 --gpu 0
fails flag "error: seq2seq_model_parallel: unknown flag --epochs" 2 --epochs 3
printf '1 2\tone two\nno tab here\n' > "$tmp/bad.tsv"
fails tsv_line "bad.tsv:2: expected 'source<TAB>target'" 2 --data-dir "$tmp/bad.tsv"
# One line per rank, nothing else.
test "$(wc -l < "$tmp/flag.txt")" -eq 2 || { cat "$tmp/flag.txt"; echo "FAIL: more than the error line"; exit 1; }
echo PASS
