#!/usr/bin/env bash
# Same program, seed, machine and layout: the same bits, always (core/kernel_choices.h). Each
# trainer runs twice, each time with a kernel-choice cache folder of its own (fresh), the second
# time while two busy loops keep both cores loaded; the two runs' logs and snapshots (parameters,
# optimizer state, iterator, random streams) must be identical bit for bit.
set -uo pipefail
t="$TEST_TMPDIR"
fail() { echo "FAIL: $*"; exit 1; }
compare="tests/examples/common/compare_runs.py"
/usr/bin/python3 tests/examples/common/mnist_subset.py "$t/mnist" 3000 500 || fail "mnist subset"
export TANDEM_COMM_TIMEOUT=120
unset TANDEM_KERNEL_TUNING TANDEM_KERNEL_CHOICES TANDEM_GEMM TANDEM_CONV TANDEM_PACKED_WEIGHTS TANDEM_GRAIN_SCALE

load=()
stop_load() { for p in "${load[@]}"; do kill "$p" 2>/dev/null; done; wait "${load[@]}" 2>/dev/null; load=(); }
trap stop_load EXIT

# twice NAME RANKS THREADS binary-and-flags...: run A quietly, run B under load; compare.
twice() {
  local name="$1" n="$2" threads="$3"; shift 3
  local bin="$1"; shift
  for run in a b; do
    if [ "$run" = b ]; then
      for _ in 1 2; do ( while :; do :; done ) & load+=($!); done
    fi
    OMP_NUM_THREADS="$threads" TANDEM_CACHE_DIR="$t/cache-$name-$run" timeout --signal=KILL 300 \
      /usr/bin/mpiexec.mpich -n "$n" "$bin" "$@" --out "$t/$name-$run" > "$t/$name-$run.txt" 2>&1 \
      || { stop_load; cat "$t/$name-$run.txt"; fail "$name: run $run"; }
    stop_load
  done
  /usr/bin/python3 "$compare" "$name" "$t/$name-a" "$t/$name-b" || fail "$name: the runs differ"
}

twice mnist 1 2 examples/mnist/train_mnist --epoch 1 --unit 100 --batchsize 100 --data-dir "$t/mnist"
twice model_parallel 2 1 examples/mnist/train_mnist_model_parallel --epoch 1 --unit 100 --batchsize 100 \
  --data-dir "$t/mnist" --snapshot-interval 7
twice data_parallel_zero2 2 1 examples/mnist/train_mnist_data_parallel --epoch 1 --unit 50 --batchsize 100 \
  --data-dir "$t/mnist" --zero 2 --accumulate 2 --bucket-mb 0.05
twice pipeline 2 1 examples/pipeline/train_mnist_pipeline --epoch 1 --layers 4 --unit 64 --batchsize 50 \
  --train-size 1000 --test-size 200
twice seq2seq 2 1 examples/seq2seq/seq2seq_model_parallel --epoch 1 --numbers 2000 --test-size 100 --train-size 640 \
  --unit 32 --batchsize 64
twice cnn 1 2 examples/cnn/train_parallel_convolution --epoch 1 --train-size 1000 --test-size 200 --batchsize 50 \
  --unit 6
if [ -d /usr/share/games/fortunes ]; then
  twice char_lm 2 1 examples/lm/train_char_lm --iterations 8 --tp 2 --context 16 --dim 32 --heads 4 --layers 2 \
    --batchsize 8 --eval-interval 4 --val-examples 8 --progress 0 --sample-length 0 --final-eval 0 --snapshot-interval 4
else
  echo "char_lm: skipped (no /usr/share/games/fortunes)"
fi
echo PASS
