#!/usr/bin/env bash
# Every multi-rank trainer writes sharded checkpoints (comm/checkpoint) and resumes from one: each
# runs 2 epochs of a Fashion-MNIST subset on 2 ranks with a checkpoint every 10 iterations, then
# again from its checkpoint of iteration 10; the resumed run's final checkpoint equals the
# uninterrupted run's bit for bit (model, optimizer, iterator). A per-rank data order (a
# scattered dataset) resumed on another number of ranks is an error saying so.
set -uo pipefail
t="${TEST_TMPDIR:?}"
tool="$PWD/tools/checkpoint"
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1 TANDEM_COMM_TIMEOUT=120
/usr/bin/python3 tests/examples/common/mnist_subset.py "$t/mnist" 600 200 || fail "mnist subset"
common=(--epoch 2 --batchsize 50 --data-dir "$t/mnist" --checkpoint-interval 10)

# check NAME BINARY [flags...]: the uninterrupted run, the resumed run, and their final checkpoints.
check() {
  local name="$1" bin="$2"; shift 2
  timeout --signal=KILL 300 /usr/bin/mpiexec.mpich -n 2 "$bin" "${common[@]}" --out "$t/$name" "$@" \
    > "$t/$name.txt" 2>&1 || { cat "$t/$name.txt"; fail "$name"; }
  timeout --signal=KILL 300 /usr/bin/mpiexec.mpich -n 2 "$bin" "${common[@]}" --out "$t/$name-resumed" "$@" \
    --resume-checkpoint "$t/$name/checkpoints/step_10" > "$t/$name-resumed.txt" 2>&1 \
    || { cat "$t/$name-resumed.txt"; fail "$name resumed"; }
  grep -q "^resumed from checkpoint $t/$name/checkpoints/step_10 at iteration 10" "$t/$name-resumed.txt" \
    || { cat "$t/$name-resumed.txt"; fail "$name: no resume line"; }
  local last
  last=$(ls "$t/$name/checkpoints" | sed -n 's/^step_\([0-9]*\)$/\1/p' | sort -n | tail -1)
  for prefix in model/ optimizer/ iterator/; do
    "$tool" compare "$t/$name/checkpoints/step_$last" "$t/$name-resumed/checkpoints/step_$last" --prefix "$prefix" \
      > "$t/cmp.txt" || { cat "$t/cmp.txt"; fail "$name: the resumed run's $prefix differs at step $last"; }
  done
  echo "$name: resumed at 10, step $last equal bit for bit"
}

check data_parallel examples/mnist/train_mnist_data_parallel --zero 2
check model_parallel examples/mnist/train_mnist_model_parallel
check dual_parallel examples/mnist/train_mnist_dual_parallel
check pipeline examples/pipeline/train_mnist_pipeline --microbatches 2
check convolution examples/cnn/train_parallel_convolution --unit 8

timeout --signal=KILL 120 /usr/bin/mpiexec.mpich -n 3 examples/mnist/train_mnist_data_parallel "${common[@]}" \
  --out "$t/bad" --resume-checkpoint "$t/data_parallel/checkpoints/step_10" > "$t/bad.txt" 2>&1 \
  && fail "a per-rank data order resumed on 3 ranks"
grep -q "each iterating its own share of the data (a scattered dataset): its data order resumes only on 2 ranks, not 3" \
  "$t/bad.txt" || { cat "$t/bad.txt"; fail "the error does not say why"; }
echo "PASS"
