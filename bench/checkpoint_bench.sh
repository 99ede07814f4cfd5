#!/usr/bin/env bash
# checkpoint_bench.sh - sharded checkpoints (comm/checkpoint) of the GPT-style LM of examples/lm at
# 25M parameters (8 blocks x 512 wide, Adam: 305 MB of state), on 1, 2 and 4 data-parallel ranks:
# the time a synchronous save takes from training, the stall of an asynchronous one (the first,
# which also allocates the host copies, and the median of the later ones), the time to load, and
# the bytes each rank writes. Lines in the bench format, e.g.
#   name=tandem.checkpoint.lm25m.save_sync.r2 median_ms=512.3
#
#   bench/checkpoint_bench.sh            (builds -c opt; RANKS="1 2 4", SAVES=4 saves a run)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bazel build -c opt //examples/lm:train_char_lm >&2
bin="$ROOT/bazel-out/k8-opt/bin/examples/lm/train_char_lm"
work=$(mktemp -d /tmp/checkpoint_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
saves=${SAVES:-4}
model=(--context 64 --dim 512 --heads 8 --layers 8 --batchsize 8 --eval-interval 1000 --val-examples 8 --progress 0
       --sample-length 0 --final-eval 0 --snapshot-interval 100000 --checkpoint-interval 2
       --iterations $((2 * saves)))

for n in ${RANKS:-1 2 4}; do
  threads=$(( n >= 2 ? 1 : 2 ))
  for mode in sync async; do
    rm -rf "$work/run"
    OMP_NUM_THREADS=$threads /usr/bin/mpiexec.mpich -n "$n" "$bin" "${model[@]}" --out "$work/run" \
      --checkpoint-async $([ $mode = async ] && echo 1 || echo 0) > "$work/out.txt" 2>&1 || { cat "$work/out.txt" >&2; exit 1; }
    line=$(grep "^checkpoints:" "$work/out.txt")
    first=$(sed -E 's/.*stalled ([0-9.]+) ms by the first.*/\1/' <<< "$line")
    later=$(sed -E 's/.*, ([0-9.]+) ms \(median\) by the others.*/\1/' <<< "$line")
    step=$(ls "$work/run/checkpoints" | sed -n 's/^step_//p' | sort -n | tail -1)
    bytes=$(stat -c %s "$work/run/checkpoints/step_$step"/rank*.bin | sort -n | tail -1)
    echo "name=tandem.checkpoint.lm25m.save_$mode.r$n median_ms=$later first_ms=$first max_rank_mb=$(awk "BEGIN{printf \"%.1f\", $bytes/1e6}")"
  done
  OMP_NUM_THREADS=$threads /usr/bin/mpiexec.mpich -n "$n" "$bin" "${model[@]}" --out "$work/run" \
    --resume-checkpoint latest > "$work/out.txt" 2>&1 || { cat "$work/out.txt" >&2; exit 1; }
  load=$(sed -nE 's/^resumed from .* read ([0-9.]+) MB in ([0-9.]+) s$/\2 \1/p' "$work/out.txt")
  echo "name=tandem.checkpoint.lm25m.load.r$n median_ms=$(awk "BEGIN{printf \"%.1f\", ${load% *}*1000}") rank0_read_mb=${load#* }"
done
