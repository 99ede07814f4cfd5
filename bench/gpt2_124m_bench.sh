#!/usr/bin/env bash
# gpt2_124m_bench.sh - GPT-2 124M training steps (forward, backward, AdamW) on this machine:
#   1. one process, tandem's train_gpt2 against the LibTorch program (tests/gpt2) on a batch of
#      the same size, at 1 and 2 threads, interleaved over ROUNDS rounds (one sitting);
#   2. tandem over 2 and 4 ranks of 1 thread each: tp 2, pp 2 (1F1B), dp 2 with ZeRO 3 and dp 4
#      with ZeRO 3, the same global batch, with each rank's peak RSS (/usr/bin/time).
# Every line is in the bench format (name=... median_ms=... tokens_per_s=... peak_rss_mb=...);
# a "# rss" line per multi-rank run lists every rank's peak. docs/gpt2.md holds the figures.
#
#   bench/gpt2_124m_bench.sh
#   WORK=dir B=4 T=128 STEPS=6 ROUNDS=2 MULTI=1   (MULTI=0: one process only)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WORK=${WORK:-/tmp/tandem-gpt2-bench}
B=${B:-4}
T=${T:-128}
STEPS=${STEPS:-6}
ROUNDS=${ROUNDS:-2}
MULTI=${MULTI:-1}
mkdir -p "$WORK"
bazel build -c opt //examples/gpt2:train_gpt2 //examples/gpt2:gpt2_reference_compare //tests/gpt2:libtorch_gpt2_reference >&2
bin="$(bazel info -c opt bazel-bin)"
# The LibTorch side's weights and batch (the 124M model, a seeded batch of B x T tokens).
"$bin/examples/gpt2/gpt2_reference_compare" --export-only 1 --work "$WORK" --layers 12 --dim 768 --heads 12 \
  --context 1024 --batch "$B" --seq-len "$T" >&2
# tandem: the same steps on the Bible's tokens (the work does not depend on the tokens), no
# evaluation, no clipping (the LibTorch program clips only when asked), no sample.
tandem=(--steps $((STEPS + 2)) --batchsize "$B" --seq-len "$T" --eval-interval 100000 --val-batches 1 --sample 0
        --progress 0 --clip 0 --out "$WORK/run")
export OMP_WAIT_POLICY=PASSIVE
echo "# start"
for round in $(seq "$ROUNDS"); do
  for threads in 1 2; do
    OMP_NUM_THREADS=$threads "$bin/examples/gpt2/train_gpt2" "${tandem[@]}" | grep "^name="
    OMP_NUM_THREADS=$threads "$bin/tests/gpt2/libtorch_gpt2_reference" --weights "$WORK/gpt2_weights.safetensors" \
      --batch "$WORK/gpt2_batch.safetensors" --time-steps "$STEPS" --threads "$threads" | grep "^name="
  done
done
[[ $MULTI == 1 ]] || exit 0
# run RANKS FLAGS...: the bench line and each rank's peak RSS in MB.
run() {
  local ranks=$1; shift
  # Each rank under /usr/bin/time, writing its peak to rss.<rank> (MPICH sets PMI_RANK).
  OMP_NUM_THREADS=1 /usr/bin/mpiexec.mpich -n "$ranks" bash -c \
    'exec /usr/bin/time -f "rss_kb=%M" -o "$0/rss.$PMI_RANK" "$@"' "$WORK" \
    "$bin/examples/gpt2/train_gpt2" "${tandem[@]}" "$@" | grep "^name="
  echo "# rss ranks=$ranks $*: $(cat "$WORK"/rss.* | sed 's/rss_kb=//' | awk '{printf "%.0f ", $1 / 1024}')MB"
  rm -f "$WORK"/rss.*
}
run 1
run 2 --tp 2
run 2 --pp 2 --microbatches 4
run 2 --zero 3
run 4 --zero 3
