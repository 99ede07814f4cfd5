#!/usr/bin/env bash
# Sharded checkpoints across layouts (comm/checkpoint), on train_char_lm (fortunes): a checkpoint
# saved at step 2 under layout A loads under layout B, and
#   (a) B's copy of the state is A's, bit for bit: B resumed with nothing left to train saves it
#       again (the writer saves at the end), and that checkpoint equals A's in every model,
#       optimizer, iterator and step tensor;
#   (b) B trained on to step 4 equals B's uninterrupted run: bit for bit where deterministic mode
#       makes A and B compute alike (the same tensor-parallel degree, ZeRO <= 2, the same gradient
#       groups: microbatches of one sequence), and otherwise the logged losses within a relative
#       1e-5 (tensor parallelism splits the products, so the first two steps round differently;
#       Adam then turns rounding in near-zero gradients into differences of up to a learning
#       rate in the parameters, so those are not compared).
# Then: missing, extra and mis-shaped tensors are errors naming them; a save cut short by a crash
# is ignored (the previous checkpoint is resumed); a damaged block is an error naming the file.
#
# CHECKPOINT_PAIRS=all runs every ordered pair of the layouts below (scripts/checkpoint_matrix.sh);
# by default a sample in which every layout is a source and a target.
set -uo pipefail
t="${TEST_TMPDIR:?}"
bin="$PWD/examples/lm/train_char_lm"
tool="$PWD/tools/checkpoint"
fail() { echo "FAIL: $*"; exit 1; }
[ -d /usr/share/games/fortunes ] || { echo "SKIPPED: no /usr/share/games/fortunes (apt-get install fortunes)"; exit 0; }
export OMP_NUM_THREADS=1 TANDEM_COMM_TIMEOUT=120
unset TANDEM_KERNEL_TUNING TANDEM_KERNEL_CHOICES TANDEM_GEMM TANDEM_CONV TANDEM_PACKED_WEIGHTS TANDEM_GRAIN_SCALE

lm=(--context 16 --dim 32 --heads 2 --layers 4 --batchsize 12 --eval-interval 1 --val-examples 12 --progress 0
    --sample-length 0 --final-eval 0 --snapshot-interval 100 --checkpoint-interval 2)

# name ranks class flags (three write their checkpoints asynchronously): the class says which layouts compute bit for bit alike in deterministic
# mode (ZeRO-3 does not run in it: its class is its own, and it runs without the mode).
layouts=(
  "one 1 dense --microbatches 12"
  "dp2 2 dense --microbatches 6"
  "dp3 3 dense --microbatches 4 --checkpoint-async 1"
  "pp2 2 dense --pp 2 --microbatches 12"
  "pp2i 2 dense --pp 2 --schedule interleaved --stages-per-rank 2 --microbatches 12"
  "tp2 2 tp2 --tp 2 --microbatches 12"
  "tp2pp2 4 tp2 --tp 2 --pp 2 --microbatches 12 --checkpoint-async 1"
  "tp2dp2z1 4 tp2 --tp 2 --zero 1 --microbatches 6"
  "dp3z3 3 zero3 --zero 3 --microbatches 4"
  "moe1 1 moe --experts 4 --load-balance 0 --z-loss 0 --microbatches 12"
  "moe2 2 moe --experts 4 --load-balance 0 --z-loss 0 --microbatches 6 --checkpoint-async 1"
)
declare -A ranks class flags
names=()
for l in "${layouts[@]}"; do
  read -r name n c rest <<< "$l"
  names+=("$name"); ranks[$name]=$n; class[$name]=$c; flags[$name]="$rest"
done

# train NAME OUT [flags...]: layout NAME's run, output in $t/OUT.txt, checkpoints in $t/OUT/ck.
train() {
  local name="$1" out="$2"; shift 2
  local mode=${DETERMINISTIC:-1}
  [ "${class[$name]}" = zero3 ] && mode=0
  # shellcheck disable=SC2086
  TANDEM_DETERMINISTIC=$mode timeout --signal=KILL 300 /usr/bin/mpiexec.mpich -n "${ranks[$name]}" "$bin" "${lm[@]}" \
    ${flags[$name]} --out "$t/$out" --checkpoint-dir "$t/$out/ck" "$@" > "$t/$out.txt" 2>&1
}

# Every layout from scratch: checkpoints at steps 2 and 4.
for name in "${names[@]}"; do
  train "$name" "$name" --iterations 4 || { cat "$t/$name.txt"; fail "$name"; }
done
# The layouts of a class agree bit for bit among themselves (what makes (b) meaningful).
for name in "${names[@]}"; do
  for other in "${names[@]}"; do
    [ "${class[$name]}" = "${class[$other]}" ] || continue
    [ "$other" = "$name" ] && break
    "$tool" compare "$t/$other/ck/step_4" "$t/$name/ck/step_4" > "$t/same.txt" \
      || { cat "$t/same.txt"; fail "$name and $other compute differently"; }
    break
  done
done

if [ "${CHECKPOINT_PAIRS:-sample}" = all ]; then
  pairs=()
  for a in "${names[@]}"; do
    for b in "${names[@]}"; do
      a_moe=0; b_moe=0
      [ "${class[$a]}" = moe ] && a_moe=1
      [ "${class[$b]}" = moe ] && b_moe=1
      [ "$a" != "$b" ] && [ $a_moe = $b_moe ] && pairs+=("$a $b")
    done
  done
else
  # Each layout a source and a target: fewer and more ranks (2 -> 3, 4 -> 3), another split of
  # the layers into stages, tensor parallelism on and off, ZeRO 1 and 3, experts spread and not.
  pairs=("one tp2pp2" "tp2pp2 dp3" "dp2 dp3" "dp3 pp2i" "pp2 pp2i" "pp2i tp2dp2z1" "tp2 dp3z3" "dp3z3 pp2"
         "tp2dp2z1 one" "moe2 moe1" "moe1 moe2")
fi

exact=0; close=0
for pair in "${pairs[@]}"; do
  read -r a b <<< "$pair"
  from="$t/$a/ck/step_2"
  if [ "${class[$a]}" = "${class[$b]}" ] && [ "${class[$a]}" != zero3 ]; then
    train "$b" "$a-$b" --iterations 4 --resume-checkpoint "$from" || { cat "$t/$a-$b.txt"; fail "$a -> $b"; }
    "$tool" compare "$t/$b/ck/step_4" "$t/$a-$b/ck/step_4" > "$t/cmp.txt" \
      || { cat "$t/cmp.txt"; fail "$a -> $b: step 4 differs from $b's uninterrupted run"; }
    exact=$((exact + 1))
  else
    # (a) the state as B holds it is A's.
    train "$b" "$a-$b-0" --iterations 2 --resume-checkpoint "$from" || { cat "$t/$a-$b-0.txt"; fail "$a -> $b"; }
    for prefix in model/ optimizer/ iterator/ trainer/iteration; do
      "$tool" compare "$from" "$t/$a-$b-0/ck/step_2" --prefix "$prefix" > "$t/cmp.txt" \
        || { cat "$t/cmp.txt"; fail "$a -> $b: $prefix changed through $b's layout"; }
    done
    # (b) trained on, the losses of B's uninterrupted run.
    train "$b" "$a-$b" --iterations 4 --resume-checkpoint "$from" || { cat "$t/$a-$b.txt"; fail "$a -> $b"; }
    /usr/bin/python3 - "$t/$b/log" "$t/$a-$b/log" <<'PY' || fail "$a -> $b: the losses differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert [e["iteration"] for e in a] == [e["iteration"] for e in b] == [1, 2, 3, 4], (a, b)
for x, y in zip(a, b):
    for key in ("main/loss", "validation/main/loss"):
        assert abs(x[key] - y[key]) <= 1e-5 * abs(x[key]), (x["iteration"], key, x[key], y[key])
PY
    close=$((close + 1))
  fi
  grep -q "^resumed from checkpoint $from at iteration 2 (saved by ${ranks[$a]} ranks" "$t/$a-$b.txt" \
    || { cat "$t/$a-$b.txt"; fail "$a -> $b: no resume line"; }
  echo "$a -> $b: ok"
done
echo "${#pairs[@]} pairs: $exact bit for bit, $close by losses (with the state carried over bit for bit)"

# 16 bits: mixed_f16's loss scaler and bf16's f32 master copies go from tp 2 to pp 2 bit for bit
# (deterministic mode sums f32 and f64 gradients only: these run without it).
for dtype in mixed_f16 bf16; do
  DETERMINISTIC=0 train tp2 "$dtype" --iterations 2 --dtype "$dtype" || { cat "$t/$dtype.txt"; fail "$dtype"; }
  DETERMINISTIC=0 train pp2 "$dtype-pp2" --iterations 2 --dtype "$dtype" --resume-checkpoint "$t/$dtype/ck/step_2" \
    || { cat "$t/$dtype-pp2.txt"; fail "$dtype under pp2"; }
  for prefix in model/ optimizer/ iterator/; do
    "$tool" compare "$t/$dtype/ck/step_2" "$t/$dtype-pp2/ck/step_2" --prefix "$prefix" > "$t/cmp.txt" \
      || { cat "$t/cmp.txt"; fail "$dtype: $prefix changed through pp2"; }
  done
done
"$tool" inspect "$t/mixed_f16/ck/step_2" | grep -q "optimizer/loss_scaler/scale" || fail "no loss scale saved"
"$tool" inspect "$t/bf16/ck/step_2" | grep -q "optimizer/block0/attention/qkv/W/master  *f32" || fail "no master copy"
echo "mixed_f16 and bf16: the loss scaler and the master copies carried over"

# The model through safetensors and back: exported from one layout, imported as a one-process
# checkpoint, and loaded by --init-checkpoint under tp 2 x pp 2: one step from it equals one step
# from --init-checkpoint of the original.
"$tool" to-safetensors "$t/dp3/ck/step_2" "$t/model.safetensors" > /dev/null || fail "to-safetensors"
"$tool" from-safetensors "$t/model.safetensors" "$t/imported" 0 > /dev/null || fail "from-safetensors"
train tp2pp2 init --iterations 1 --init-checkpoint "$t/imported/step_0" || { cat "$t/init.txt"; fail "--init-checkpoint"; }
train tp2pp2 init-original --iterations 1 --init-checkpoint "$t/dp3/ck/step_2" || { cat "$t/init-original.txt"; fail "init"; }
grep -q "^model weights from $t/imported/step_0" "$t/init.txt" || { cat "$t/init.txt"; fail "no init line"; }
"$tool" compare "$t/init-original/ck/step_1" "$t/init/ck/step_1" > "$t/cmp.txt" \
  || { cat "$t/cmp.txt"; fail "the model changed through safetensors"; }
/usr/bin/python3 - "$t/tp2pp2/log" "$t/init/log" <<'PY' || fail "--init-checkpoint did not change the model"
import json, sys
fresh, init = (json.load(open(p))[0]["main/loss"] for p in sys.argv[1:3])
assert abs(fresh - init) > 1e-3 * fresh, (fresh, init)  # trained weights, not the seed's
PY
echo "the model through safetensors into tp2pp2: bit for bit"

# Errors name the tensors: a dense checkpoint under the experts' model, a narrower model, and a
# checkpoint whose tensors no rank takes.
expect_error() {
  local want="$1"; shift
  train "$@" > /dev/null 2>&1 && { cat "$t/bad.txt"; fail "no error for: $*"; }
  grep -q -- "$want" "$t/bad.txt" || { cat "$t/bad.txt"; fail "the error does not say: $want"; }
}
expect_error "has no 'model/block0/mlp/router/W', 'model/block0/mlp/experts/0/fc1/W'" moe2 bad --iterations 4 --resume-checkpoint "$t/dp2/ck/step_2"
expect_error "'model/token/W' is f32\[113, 32\] in the checkpoint but this layout's is \[113, 48\]" \
  dp2 bad --iterations 4 --dim 48 --resume-checkpoint "$t/dp2/ck/step_2"
expect_error "holds 'model/block3/attention/proj/W'" dp2 bad --iterations 4 --layers 3 --resume-checkpoint "$t/dp2/ck/step_2"
expect_error "no complete checkpoint in" dp2 bad --iterations 4 --resume-checkpoint latest --checkpoint-dir "$t/none"

# A rank killed after writing its file and before the commit: step_4 stays partial, and 'latest'
# is step 2.
TANDEM_FAULT_INJECT="rank=1,iteration=4,point=snapshot,action=kill" train dp2 crash --iterations 4 \
  && fail "the killed run succeeded"
[ -d "$t/crash/ck/step_4.partial" ] && [ ! -d "$t/crash/ck/step_4" ] || { ls "$t/crash/ck"; fail "step_4 was committed"; }
train dp2 crash --iterations 4 --resume-checkpoint latest || { cat "$t/crash.txt"; fail "resuming after the crash"; }
grep -q "^resumed from checkpoint $t/crash/ck/step_2 at iteration 2" "$t/crash.txt" || { cat "$t/crash.txt"; fail "not step 2"; }
"$tool" compare "$t/dp2/ck/step_4" "$t/crash/ck/step_4" > "$t/cmp.txt" || { cat "$t/cmp.txt"; fail "after the crash"; }
echo "a save cut short is ignored; the run resumed from the one before it"

# A damaged block: an error naming the file and the block.
cp -r "$t/dp2/ck/step_2" "$t/damaged"
printf '\x01' | dd of="$t/damaged/rank1.bin" bs=1 seek=100 conv=notrunc status=none
expect_error "rank1.bin': block 0 (bytes 0 to" dp2 bad --iterations 4 --resume-checkpoint "$t/damaged"
echo "PASS"
