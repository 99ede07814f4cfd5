#!/usr/bin/env bash
# Runs what scripts/gpu_stage.sh staged, on a GPU machine without Bazel, MPICH, OpenBLAS or
# Catch2 (the device tool's machines), from the repository root:
#
#   bash scripts/gpu_run.sh [--tests-only | --bench-only | --phases "tests train memcheck gpt2 bench ab ncu"] [STAGE]
#
# STAGE: the archive or the folder gpu_stage.sh made (default .cache/gpu_stage.tar.xz when it
# exists, else .cache/gpu_stage). Through the device tool:
#   command: bash scripts/gpu_run.sh       carry: [".cache/gpu_stage.tar.xz"]
#
# 1. Unpacks the archive (into /tmp), puts the staged libraries, then CUDA's (/usr/local/cuda/lib64,
#    the NVIDIA wheels beside PyTorch: python3's site-packages/nvidia/*/lib) on LD_LIBRARY_PATH,
#    and checks with ldd that every staged binary finds all it needs.
# 2. Prints the GPU (nvidia-smi), then runs every staged test (tests.tsv): the GPU tests, the host
#    tests of tests/cuda, the multi-rank tests with the staged mpiexec.hydra on 1 and 2 ranks;
#    GPU_TEST_JOBS (default 4) at a time. One line per test: PASSED, SKIPPED (no GPU: the test
#    says so and succeeds; FAILED instead when nvidia-smi lists a GPU), FAILED or TIMEOUT; then
#    the tail of each failure's output and a summary line.
# 3. train: the examples on the GPU, side by side (train_mnist --gpu 0; train_mnist_model_parallel
#    --gpu 0 on 2 ranks sharing the GPU; seq2seq_model_parallel --gpu 0 on 2 ranks), short runs
#    whose final accuracy is compared with the same commands on the CPU (docs/gpus.md).
# 4. memcheck: every staged GPU test again under `compute-sanitizer --tool memcheck`; a report of
#    any error fails the test.
# 5. gpt2: GPT-2 124M alone on the GPU, tandem's train_gpt2 then PyTorch (bench/torch_gpu_gpt2.py):
#    tokens/s (gpt2.log).
# 6. bench: the benchmarks with what time is left (scripts/bench_gpu.sh: tandem, raw
#    cuBLAS/cuDNN, PyTorch; its table).
# 7. ab (only when asked for): one of tandem's benchmarks under several settings in one sitting
#    (GPU_AB_SETTINGS, see run_ab); ncu (only when asked for): its kernels under Nsight Compute.
# Each phase ends by its own deadline, which keeps back time for the phases after it (RESERVE).
# Everything stays within GPU_RUN_BUDGET seconds (default 570: the device tool's 10-minute limit).
#
# Files, in $OUT when it is set, else /tmp/tandem-gpu-run/<date>: gpu_run.log (all printed),
# tests.log (every test's full output), train.log (the examples' output), memcheck.log (every
# test's output under compute-sanitizer), raw.txt and table.md (the benchmarks).
# Environment: GPU_RUN_BUDGET, GPU_TEST_JOBS, GPU_TEST_TIMEOUT (seconds per test, default 300),
# GPU_TEST_FILTER (extended regex on the test labels), GPU_MEMCHECK_TIMEOUT (default 240),
# GPU_TRAIN_EPOCHS (default 1), GPU_RUN_PHASES (instead of --phases), TANDEM_COMM_TIMEOUT (default 60),
# GPU_RUN_KEEP=1 (keep the unpacked stage in /tmp), and bench_gpu.sh's BENCH_ONLY, BENCH_SCALE,
# BENCH_TF32, BENCH_TIMEOUT.
# Exit status: 0 when every test passed or skipped, every example trained, memcheck found nothing
# and every benchmark ran.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1

PHASES=${GPU_RUN_PHASES:-tests train memcheck gpt2 bench}
SRC=""
while (($#)); do
  case $1 in
    --tests-only) PHASES=tests ;;
    --bench-only) PHASES=bench ;;
    --phases) PHASES=$2; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) SRC=$1 ;;
  esac
  shift
done

START_EPOCH=$(date +%s)
BUDGET=${GPU_RUN_BUDGET:-570}
DEADLINE=$((START_EPOCH + BUDGET))
JOBS=${GPU_TEST_JOBS:-4}
TEST_TIMEOUT=${GPU_TEST_TIMEOUT:-300}
RES=${OUT:-/tmp/tandem-gpu-run/$(date +%Y%m%d-%H%M%S)}
WRAP=()
PHASE_DEADLINE=$DEADLINE
mkdir -p "$RES" || exit 1

now() { date +%s; }
elapsed() { echo "$(($(now) - START_EPOCH))s"; }

main() {
  local status=0

  # --- the staged files --------------------------------------------------------------------------
  if [[ -z "$SRC" ]]; then
    if [[ -f .cache/gpu_stage.tar.xz ]]; then SRC=.cache/gpu_stage.tar.xz; else SRC=.cache/gpu_stage; fi
  fi
  if [[ -f "$SRC" ]]; then
    local tmp
    tmp=$(mktemp -d /tmp/tandem_gpu_stage.XXXXXX) || return 1
    # shellcheck disable=SC2064  # $tmp now
    [[ "${GPU_RUN_KEEP:-0}" == 1 ]] || trap "rm -rf '$tmp'" EXIT  # main runs in a subshell
    if command -v xz > /dev/null; then
      tar -C "$tmp" -xJf "$SRC" || { echo "gpu_run.sh: cannot unpack $SRC"; return 1; }
    else  # no xz program: Python's lzma
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$SRC" "$tmp" ||
        { echo "gpu_run.sh: cannot unpack $SRC (no xz, and python3 failed)"; return 1; }
    fi
    STAGE=$tmp/gpu_stage
    echo "# unpacked $SRC ($(du -h "$SRC" | cut -f1)) into $STAGE ($(du -sh "$STAGE" | cut -f1)) in $(elapsed)"
  elif [[ -d "$SRC" ]]; then
    STAGE=$(cd "$SRC" && pwd)
  else
    echo "gpu_run.sh: no $SRC: run scripts/gpu_stage.sh on a machine with Bazel, and carry its archive"
    return 1
  fi
  [[ -f "$STAGE/tests.tsv" ]] || { echo "gpu_run.sh: $STAGE has no tests.tsv"; return 1; }
  echo "# $(head -1 "$STAGE/STAMP")"
  sed -n '2,$p' "$STAGE/STAMP" | sed 's/^/# /'
  echo "# this machine: $(uname -m), $(ldd --version 2>&1 | head -1), $(nproc) cores," \
       "avx2=$(grep -qw avx2 /proc/cpuinfo && echo yes || echo NO) avx512f=$(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)"

  # --- libraries -----------------------------------------------------------------------------------
  local dirs=("$STAGE/lib") d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -d "$d" ]] && dirs+=("$d")
  done
  # The NVIDIA wheels beside PyTorch (cuDNN, NCCL, cuBLAS, ...): nvidia/<name>/lib, nvidia/cu13/lib.
  while read -r d; do [[ -n "$d" ]] && dirs+=("$d"); done < <(python3 - 2> /dev/null << 'EOF'
import os
try:
    import nvidia
except ImportError:
    raise SystemExit
for base in list(nvidia.__path__):
    for sub in sorted(os.listdir(base)):
        lib = os.path.join(base, sub, "lib")
        if os.path.isdir(lib):
            print(lib)
EOF
  )
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do [[ -d "$d" ]] && dirs+=("$d"); done
  export BENCH_PYTHON_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}  # for PyTorch (bench_gpu.sh)
  # The staged copies of common libraries (libgomp, zlib) only where this machine has none.
  local so ldconfig
  ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
  for so in libgomp.so.1 libz.so.1; do
    if [[ -e "$STAGE/lib/$so" ]] && "$ldconfig" -p 2> /dev/null | grep -q "^[[:space:]]*$so "; then
      mkdir -p "$STAGE/lib.unused" && mv "$STAGE/lib/$so" "$STAGE/lib.unused/"
    fi
  done
  LD_LIBRARY_PATH="$(IFS=:; echo "${dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
  echo "# LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  # UCX (MPICH's transport) loads its modules from <dir of libucs>/ucx; say so in case it does not.
  [[ -d "$STAGE/lib/ucx" ]] && export UCX_MODULE_DIR="$STAGE/lib/ucx"
  # hwloc's plugins (PCI topology) are not staged; MPICH on one host needs none.
  export HWLOC_COMPONENTS=${HWLOC_COMPONENTS:--pci}
  local missing
  missing=$(find "$STAGE/bin" "$STAGE/mpi" "$STAGE/lib" -type f ! -name '*.txt' -exec ldd {} + 2> /dev/null |
            awk '/not found/ { print $1 }' | sort -u | paste -sd' ')
  if [[ -n "$missing" ]]; then
    echo "# WARNING: libraries not found: $missing (the binaries that need them will fail)"
    status=1
  fi
  local probe
  probe=$(awk -F'\t' '$1 == "gpu" { print $3; exit }' "$STAGE/tests.tsv")
  [[ -n "$probe" ]] &&
    echo "# CUDA libraries: $(ldd "$STAGE/$probe" 2> /dev/null | awk '$1 ~ /^lib(cuda|cudart|cublas|cublasLt|cudnn|nccl)\.so/ { print $1 "=" $3 }' | paste -sd' ')"

  # With a GPU listed, a GPU test that skips itself (no device: a driver or library problem)
  # counts as failed.
  GPU_PRESENT=0
  if command -v nvidia-smi > /dev/null && nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then GPU_PRESENT=1; fi
  if command -v nvidia-smi > /dev/null; then
    echo "# GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,temperature.gpu,clocks.max.sm \
                    --format=csv,noheader 2>&1 | paste -sd';')"
  else
    echo "# GPU: no nvidia-smi on this machine"
  fi

  local phase
  for phase in $PHASES; do
    PHASE_DEADLINE=$((DEADLINE - $(reserve_after "$phase")))
    case $phase in
      tests) run_tests tests "" "$RES/tests.log" || status=1 ;;
      train) run_train || status=1 ;;
      memcheck) run_memcheck || status=1 ;;
      bench) run_bench || status=1 ;;
      gpt2) run_gpt2 || status=1 ;;
      ab) run_ab || status=1 ;;
      ncu) run_ncu || status=1 ;;
      *) echo "gpu_run.sh: unknown phase $phase (tests, train, memcheck, gpt2, bench, ab, ncu)"; status=1 ;;
    esac
  done
  echo "# gpu_run.sh: exit $status after $(elapsed); files in $RES"
  return $status
}

# Seconds each phase keeps back for those after it: what each needs at least to say something.
declare -A RESERVE=([tests]=0 [train]=70 [memcheck]=90 [gpt2]=120 [bench]=100 [ab]=40 [ncu]=40)
reserve_after() {  # PHASE -> the reserves of the phases listed after it
  local p seen=0 sum=0
  for p in $PHASES; do
    ((seen)) && sum=$((sum + ${RESERVE[$p]:-0}))
    [[ $p == "$1" ]] && seen=1
  done
  echo $sum
}

# --- tests ---------------------------------------------------------------------------------------

# run_test INDEX KIND LABEL BINARY RANKS TIMEOUT: runs one test into $LOGS/INDEX.{out,status}.
# WRAP: the command to run the binary under (compute-sanitizer), empty for the tests themselves.
run_test() {
  local i=$1 kind=$2 label=$3 binary=$STAGE/$4 ranks=$5 timeout=$6 start rc r verdict out=$LOGS/$1.out
  start=$(now)
  if ((ranks == 0)); then
    timeout -k 10 "$timeout" "${WRAP[@]}" "$binary" > "$out" 2>&1
    rc=$?
  else
    # As tests/comm/run_mpi.sh, with the staged launcher: each rank's output in its own file,
    # printed in rank order afterwards.
    local ranks_dir=$LOGS/$i.ranks
    mkdir -p "$ranks_dir"
    # shellcheck disable=SC2016  # $0, $@ and $PMI_RANK: for each rank's shell
    timeout --signal=KILL "$timeout" "$STAGE/mpi/mpiexec.hydra" -launcher fork -n "$ranks" \
      /bin/sh -c 'exec "$0" "$@" > "'"$ranks_dir"'/rank.$PMI_RANK.log" 2>&1' "${WRAP[@]}" "$binary" > "$out" 2>&1
    rc=$?
    for ((r = 0; r < ranks; ++r)); do
      echo "=================== rank $r ==================="
      cat "$ranks_dir/rank.$r.log" 2> /dev/null || echo "(no output)"
    done >> "$out"
  fi
  if ((rc == 124 || rc == 137)); then
    verdict=TIMEOUT
  elif ((${#WRAP[@]})) && grep -q '^========= ERROR SUMMARY: [1-9]' "$out"; then
    verdict=FAILED  # compute-sanitizer found errors (its own exit code may be the test's)
  elif ((rc != 0)); then
    verdict=FAILED
  elif grep -q '^SKIPPED: ' "$out"; then
    verdict=SKIPPED
    ((GPU_PRESENT)) && verdict=FAILED
  else
    verdict=PASSED
  fi
  local what="" label_ranks=""
  ((ranks == 1)) && label_ranks=" (1 rank)"
  ((ranks > 1)) && label_ranks=" ($ranks ranks)"
  if grep -q '^SKIPPED: ' "$out"; then
    what=": $(grep -m1 '^SKIPPED: ' "$out" | sed 's/^SKIPPED: //')"
    [[ $verdict == FAILED ]] && what=" (skipped although nvidia-smi lists a GPU)$what"
  elif [[ $verdict == FAILED ]]; then
    what=" (exit $rc)"
  fi
  [[ $verdict == TIMEOUT ]] && what=" (killed after ${timeout}s)"
  echo "$verdict $(($(now) - start))s" > "$LOGS/$i.status"
  printf '%-8s %-48s %4ss%s\n' "$verdict" "$label$label_ranks" "$(($(now) - start))" "$what"
}

# run_tests WHAT KIND LOG: the staged tests (of KIND, gpu or host; empty: all) under WRAP, their
# outputs into LOG.
run_tests() {
  local what=$1 only_kind=$2 log=$3
  LOGS=$(mktemp -d /tmp/tandem_gpu_logs.XXXXXX)
  local -a kinds labels binaries ranks
  local kind label binary n
  while IFS=$'\t' read -r kind label binary n; do
    [[ -z "$label" ]] && continue
    if [[ -n "${GPU_TEST_FILTER:-}" ]] && ! [[ "$label" =~ $GPU_TEST_FILTER ]]; then continue; fi
    if [[ -n "$only_kind" && "$kind" != "$only_kind" ]]; then continue; fi
    kinds+=("$kind"); labels+=("$label"); binaries+=("$binary"); ranks+=("$n")
  done < "$STAGE/tests.tsv"
  local total=${#labels[@]} cores threads
  cores=$(nproc)
  threads=$((cores / JOBS))
  ((threads < 1)) && threads=1
  echo
  echo "# ---- $what: $total runs, $JOBS at a time (OMP_NUM_THREADS=$threads each), at most ${TEST_TIMEOUT}s each ----"
  export OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
  export TANDEM_COMM_TIMEOUT=${TANDEM_COMM_TIMEOUT:-60}
  [[ -d "$STAGE/data/fashion-mnist" ]] && export TANDEM_MNIST_DIR="$STAGE/data/fashion-mnist"
  local tests_deadline=$PHASE_DEADLINE i t left
  for ((i = 0; i < total; ++i)); do
    while (($(jobs -rp | wc -l) >= JOBS)); do wait -n; done
    left=$((tests_deadline - $(now)))
    t=$TEST_TIMEOUT
    ((left < t)) && t=$left
    if ((t < 10)); then
      echo "NOTRUN $i ${labels[i]}: no time left" > "$LOGS/$i.out"
      echo "NOTRUN 0s" > "$LOGS/$i.status"
      printf '%-8s %s (no time left)\n' NOTRUN "${labels[i]}"
      continue
    fi
    run_test "$i" "${kinds[i]}" "${labels[i]}" "${binaries[i]}" "${ranks[i]}" "$t" &
  done
  wait

  # Full outputs into tests.log; the tails of the failures here.
  local passed=0 skipped=0 failed=0 verdict secs failures=()
  : > "$log"
  for ((i = 0; i < total; ++i)); do
    read -r verdict secs < "$LOGS/$i.status" 2> /dev/null || verdict=LOST
    {
      echo "=================== ${labels[i]}$( ((ranks[i] > 0)) && echo " on ${ranks[i]} MPI rank(s)"):" \
           "$verdict ${secs:-} ==================="
      if (($(wc -l < "$LOGS/$i.out") > 5000)); then
        echo "(first 1000 and last 3000 of $(wc -l < "$LOGS/$i.out") lines)"
        head -1000 "$LOGS/$i.out"; echo "[...]"; tail -3000 "$LOGS/$i.out"
      else
        cat "$LOGS/$i.out"
      fi
    } >> "$log"
    case $verdict in
      PASSED) ((++passed)) ;;
      SKIPPED) ((++skipped)) ;;
      *) ((++failed)); failures+=("$i") ;;
    esac
  done
  for i in "${failures[@]}"; do
    echo
    echo "# ---- ${labels[i]}: last 40 lines of its output ----"
    tail -40 "$LOGS/$i.out"
  done
  echo
  echo "# $what: $passed passed, $skipped skipped, $failed failed of $total ($(elapsed) so far); full output in $log"
  rm -rf "$LOGS"
  ((failed == 0))
}

# --- memcheck ------------------------------------------------------------------------------------

run_memcheck() {
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null)
  if [[ -z "$sanitizer" ]]; then
    echo "# ---- memcheck: no compute-sanitizer on this machine ----"
    return 1
  fi
  # --error-exitcode: a report fails the run even when the test itself passed; leaks are left to
  # the caching allocator (it keeps blocks by design). API errors are not memory errors, and
  # tandem checks every CUDA call's status itself: NCCL's set-up probes kernels built for other
  # GPUs (cudaErrorNoKernelImageForDevice, 16 reports per communicator) and then works.
  # Slower kernels: a longer limit per test.
  WRAP=("$sanitizer" --tool memcheck --error-exitcode 97 --print-limit 20 --leak-check no --report-api-errors no)
  local saved=$TEST_TIMEOUT rc=0
  TEST_TIMEOUT=${GPU_MEMCHECK_TIMEOUT:-240}
  run_tests memcheck gpu "$RES/memcheck.log" || rc=1
  TEST_TIMEOUT=$saved
  WRAP=()
  return $rc
}

# --- train: the examples on the GPU --------------------------------------------------------------

run_train() {
  local epochs=${GPU_TRAIN_EPOCHS:-1} left=$((PHASE_DEADLINE - $(now))) dir rc=0 name
  echo
  if ((left < 20)); then echo "# ---- train: not run, ${left}s left ----"; return 1; fi
  echo "# ---- train: the examples on GPU 0, $epochs epoch(s), side by side, at most ${left}s ----"
  dir=$(mktemp -d /tmp/tandem_gpu_train.XXXXXX)
  local mpi=("$STAGE/mpi/mpiexec.hydra" -launcher fork -n 2)
  declare -A cmd=(
    [train_mnist]="$STAGE/bin/train_mnist --gpu 0 --epoch $epochs --out $dir/mnist"
    [train_mnist_model_parallel]="${mpi[*]} $STAGE/bin/train_mnist_model_parallel --gpu 0 --epoch $epochs --out $dir/mp"
    [seq2seq_model_parallel]="${mpi[*]} $STAGE/bin/seq2seq_model_parallel --gpu 0 --epoch $epochs --train-size 20000 --out $dir/s2s"
  )
  # The character language model on the staged fortunes: one rank, and 2 ranks sharing the GPU
  # split by tensors, by pipeline stages and by experts (GPU_LM_ITERATIONS steps; compare with
  # the same commands and --gpu -1 on the CPU). Never run on a GPU yet: the sharded checkpoints
  # of device tensors (comm/checkpoint).
  if [[ -x "$STAGE/bin/train_char_lm" ]]; then
    export TANDEM_FORTUNES_DIR="$STAGE/data/fortunes"
    local lm="$STAGE/bin/train_char_lm --gpu 0 --iterations ${GPU_LM_ITERATIONS:-300} --eval-interval 100 --final-eval 0 --sample-length 0 --progress 0"
    cmd[train_char_lm]="$lm --out $dir/lm"
    # (with sharded checkpoints of device tensors: asynchronous under tp 2, synchronous under pp 2)
    cmd[train_char_lm_tp2]="${mpi[*]} $lm --tp 2 --checkpoint-interval 100 --checkpoint-async 1 --out $dir/lm_tp2"
    cmd[train_char_lm_pp2]="${mpi[*]} $lm --pp 2 --microbatches 4 --checkpoint-interval 100 --out $dir/lm_pp2"
    cmd[train_char_lm_moe]="${mpi[*]} $lm --experts 4 --top-k 2 --out $dir/lm_moe"
  fi
  # A small GPT-2 on the staged Bible over 2 ranks sharing the GPU (tp 2, then pp 2); the 124M
  # model runs alone in the phase gpt2. Never run on a GPU yet.
  if [[ -x "$STAGE/bin/train_gpt2" ]]; then
    local gpt2="$STAGE/bin/train_gpt2 --gpu 0 $(gpt2_data_flags "$dir") --progress 0 --sample 32"
    cmd[train_gpt2_tp2]="${mpi[*]} $gpt2 --layers 4 --dim 256 --heads 8 --context 256 --seq-len 256 --steps 40 --eval-interval 20 --tp 2 --out $dir/gpt2_tp2"
    cmd[train_gpt2_pp2]="${mpi[*]} $gpt2 --layers 4 --dim 256 --heads 8 --context 256 --seq-len 256 --steps 40 --eval-interval 20 --pp 2 --microbatches 4 --out $dir/gpt2_pp2"
  fi
  for name in "${!cmd[@]}"; do
    if [[ ! -x "$STAGE/bin/${name%_*}" && ! -x "$STAGE/bin/$name" ]]; then echo "NOTRUN   $name (not staged)"; rc=1; continue; fi
    (
      start=$(now)
      # shellcheck disable=SC2086  # the command's words
      timeout -k 5 "$left" ${cmd[$name]} > "$dir/$name.out" 2>&1
      code=$?
      echo "$code $(($(now) - start))" > "$dir/$name.status"
    ) &
  done
  wait
  : > "$RES/train.log"
  for name in "${!cmd[@]}"; do
    [[ -f "$dir/$name.status" ]] || continue
    local code secs
    read -r code secs < "$dir/$name.status"
    { echo "=================== $name: exit $code after ${secs}s: ${cmd[$name]}"; cat "$dir/$name.out"; } >> "$RES/train.log"
    printf '%-8s %-32s %4ss  %s\n' "$( ((code == 0)) && echo PASSED || echo FAILED)" "$name" "$secs" \
      "$(grep -E '^ *[0-9]+ |final|^name=' "$dir/$name.out" | tail -2 | tr -s ' ' | paste -sd'|')"
    ((code == 0)) || { rc=1; echo "# ---- $name: last 25 lines ----"; tail -25 "$dir/$name.out"; }
  done
  rm -rf "$dir"
  return $rc
}

# --- gpt2: GPT-2 124M alone on the GPU, tandem then PyTorch -----------------------------------------

# The flags that point train_gpt2 at the staged Bible and tokenizer, its token cache in DIR.
gpt2_data_flags() {
  echo "--kjv-file $STAGE/data/gpt2/kjv.txt --tokenizer $STAGE/data/gpt2 --cache $1/kjv-tokens.bin"
}

# tandem's train_gpt2 (124M, B 8 x T 1024, f32) and then bench/torch_gpu_gpt2.py (the same model in
# PyTorch eager: f32 with TF32 off, then bf16 autocast), one after the other: tokens/s on the same
# GPU, beside llm.c's published ~460k tokens/s per H100 in bf16 (docs/gpt2.md). GPU_GPT2_STEPS
# steps each (default 20).
run_gpt2() {
  local left=$((PHASE_DEADLINE - $(now))) dir steps=${GPU_GPT2_STEPS:-20} rc=0
  echo
  if [[ ! -x "$STAGE/bin/train_gpt2" ]]; then echo "# ---- gpt2: train_gpt2 not staged ----"; return 1; fi
  if ((left < 60)); then echo "# ---- gpt2: not run, ${left}s left ----"; return 1; fi
  echo "# ---- gpt2: GPT-2 124M on GPU 0, tandem then PyTorch, ${steps} steps each, at most ${left}s ----"
  dir=$(mktemp -d /tmp/tandem_gpu_gpt2.XXXXXX)
  # shellcheck disable=SC2046  # the flags' words
  timeout -k 5 $((left * 2 / 3)) "$STAGE/bin/train_gpt2" --gpu 0 $(gpt2_data_flags "$dir") --steps "$steps" \
    --batchsize 8 --seq-len 1024 --eval-interval 10 --val-batches 2 --progress 0 --sample 32 --out "$dir/run" \
    > "$dir/tandem.out" 2>&1 || rc=1
  tee -a "$RES/gpt2.log" < "$dir/tandem.out" | grep -E '^name=|^ *[0-9]+ |Error|error' | tail -6
  if python3 -c "import torch" 2> /dev/null; then
    timeout -k 5 $((PHASE_DEADLINE - $(now))) python3 "$ROOT/bench/torch_gpu_gpt2.py" "$steps" 2>&1 |
      tee -a "$RES/gpt2.log" | tail -4 || rc=1
  else
    echo "# gpt2: no PyTorch on this machine"
  fi
  rm -rf "$dir"
  return $rc
}

# --- benchmarks ----------------------------------------------------------------------------------

run_bench() {
  local left=$((DEADLINE - $(now)))
  echo
  if ((left < 45)); then
    echo "# ---- benchmarks: not run, ${left}s left of GPU_RUN_BUDGET=$BUDGET ----"
    return 1
  fi
  echo "# ---- benchmarks: scripts/bench_gpu.sh with the staged binaries, ${left}s left ----"
  # bench_gpu.sh shares what is left among its benchmarks (BENCH_DEADLINE) and writes raw.txt
  # and table.md into $OUT.
  OMP_NUM_THREADS=$(nproc) OUT=$RES BENCH_BIN="$STAGE/bin" BENCH_DEADLINE=$((PHASE_DEADLINE - 5)) \
    bash "$ROOT/scripts/bench_gpu.sh"
}

# --- A/B: one benchmark under several settings, interleaved, in one sitting -----------------------

# GPU_AB_SETTINGS: settings separated by ";", each a space-separated list of VAR=value (default:
# the LSTM cell by cell, then on cuDNN's RNN); GPU_AB_ONLY: BENCH_ONLY of train_step_bench
# (default lstm); GPU_AB_REPEAT rounds (default 2). Lines go to gpu_run.log and ab.txt, each
# round's settings announced by a "# ab:" line.
run_ab() {
  local settings=${GPU_AB_SETTINGS:-TANDEM_CUDNN_RNN=0;TANDEM_CUDNN_RNN=1}
  local only=${GPU_AB_ONLY:-lstm} repeat=${GPU_AB_REPEAT:-2} round setting
  echo
  echo "# ---- A/B: train_step_bench BENCH_ONLY=\"$only\" under: $settings; $repeat rounds ----"
  local -a list
  IFS=';' read -r -a list <<< "$settings"
  for ((round = 1; round <= repeat; ++round)); do
    for setting in "${list[@]}"; do
      if (($(now) + 10 > PHASE_DEADLINE)); then echo "# ab: out of time"; return 1; fi
      echo "# ab: round $round: $setting" | tee -a "$RES/ab.txt"
      # shellcheck disable=SC2086
      env $setting BENCH_DEVICE=cuda:0 BENCH_ONLY="$only" BENCH_SCALE=${BENCH_SCALE:-1} \
        timeout $((PHASE_DEADLINE - $(now))) "$STAGE/bin/train_step_bench" 2>&1 | tee -a "$RES/ab.txt" | grep -v "^tandem cuDNN"
    done
  done
}

# --- ncu: the kernels of one benchmark (GPU_NCU_ONLY, default lstm) with their durations ---------

# GPU_NCU_ENV: settings (VAR=value ...) for the profiled run; GPU_NCU_COUNT kernels at most
# (default 3000). The per-kernel summary goes to ncu.txt.
run_ncu() {
  local only=${GPU_NCU_ONLY:-lstm}
  echo
  echo "# ---- ncu: train_step_bench BENCH_ONLY=\"$only\" ${GPU_NCU_ENV:-} ----"
  command -v ncu > /dev/null || { echo "# ncu: not installed"; return 1; }
  # shellcheck disable=SC2086
  env ${GPU_NCU_ENV:-} BENCH_DEVICE=cuda:0 BENCH_ONLY="$only" BENCH_SCALE=0.1 \
    timeout $((PHASE_DEADLINE - $(now))) ncu --metrics gpu__time_duration.sum -c "${GPU_NCU_COUNT:-3000}" \
    --print-summary per-kernel "$STAGE/bin/train_step_bench" > "$RES/ncu.txt" 2>&1
  local rc=$?
  grep -E "^  [A-Za-z_].*\(|gpu__time_duration" "$RES/ncu.txt" | head -80
  return $rc
}

main 2>&1 | tee -a "$RES/gpu_run.log"
exit "${PIPESTATUS[0]}"
