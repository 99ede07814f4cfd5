#!/usr/bin/env bash
# tandem on a GPU beside raw cuBLAS/cuDNN and PyTorch on the same GPU, in one sitting:
#   - bench/train_step_bench and bench/gemm_bench with BENCH_DEVICE=cuda:0 (MLP, CNN, LSTM,
#     packed LSTM and seq2seq training steps, inference, GEMM n = 1024/4096/8192),
#   - bench/gpu_raw_bench: cublasSgemm and cudnnConvolution* alone on the same shapes,
#   - bench/torch_gpu_bench.py: the same models in PyTorch (when `import torch` works),
# then a table: per id, the median time of tandem, raw and torch, and tandem's ratios to them.
# Exact FP32 throughout; the .gpu.tf32 ids allow TF32 (GEMM always; the training steps too with
# BENCH_TF32=1). The CNN runs in two modes in both frameworks: <id> is each one's deterministic
# mode (tandem's default: deterministic, direct algorithms only, cuDNN's heuristics; PyTorch with
# cudnn.deterministic = True, cudnn.benchmark = False) and <id>.torchmode PyTorch's default
# (cudnn.benchmark, atomics, FFT/Winograd; tandem with cuda::set_cudnn_benchmark(true),
# set_deterministic(false), set_conv_direct_only(false)). The table lists <id>.torchmode right
# after <id>, and a second table pairs the two modes side by side.
#
#   scripts/bench_gpu.sh                   on a GPU machine with Bazel: builds with
#                                          -c opt --config=cuda, runs the three, prints the table
#   BENCH_BIN=dir scripts/bench_gpu.sh     uses train_step_bench, gemm_bench, gpu_raw_bench from dir
#   scripts/bench_gpu.sh --stage           = scripts/gpu_stage.sh (no GPU needed): portable builds
#                                          (x86-64-v3, Eigen GEMM: no OpenBLAS) of these and of the
#                                          GPU tests, with the libraries they need, packed as
#                                          .cache/gpu_stage.tar.xz for a GPU machine without Bazel
# On the device machine (bare, no Bazel), from the repository root, after --stage here:
#   command: bash scripts/gpu_run.sh --bench-only     carry: [".cache/gpu_stage.tar.xz"]
# (scripts/gpu_run.sh unpacks, sets LD_LIBRARY_PATH and calls this with BENCH_BIN; without the
# option it runs the GPU tests first). Without BENCH_BIN and without Bazel, an unpacked stage in
# .cache/gpu_stage is used when there is one.
#
# Environment: BENCH_DEVICE (default cuda:0), BENCH_ONLY (words: mlp conv lstm gemm), BENCH_SCALE
# (fewer timed iterations), BENCH_TF32=1, BENCH_TIMEOUT (seconds per benchmark, default 420),
# BENCH_DEADLINE (a time, in seconds since 1970, by which all must be done: each benchmark then
# gets at most its share of what is left, the unused part passing on to the next).
# Output: everything on stdout; the files go to $OUT when it is set (raw.txt: every line the
# benchmarks printed; table.md: the table), else to /tmp/tandem-bench-gpu/<date>.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
STAGED=.cache/gpu_stage
TARGETS=(//bench:train_step_bench //bench:gemm_bench //bench:gpu_raw_bench)

# --- --stage: portable binaries for a machine without Bazel (one staging step: gpu_stage.sh) ---

if [[ "${1:-}" == --stage ]]; then
  shift
  exec "$ROOT/scripts/gpu_stage.sh" "$@"
fi

RES=${OUT:-/tmp/tandem-bench-gpu/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RES"
RAW="$RES/raw.txt"
: > "$RAW"
STATUS=0
export BENCH_DEVICE=${BENCH_DEVICE:-cuda:0}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
export PYTHONUNBUFFERED=1
TIMEOUT=${BENCH_TIMEOUT:-420}

note() { echo "# $*" | tee -a "$RAW"; }

note "bench_gpu: $(date -Is) tandem=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
     "changed_files=$(git status --porcelain 2>/dev/null | wc -l) BENCH_DEVICE=$BENCH_DEVICE" \
     "BENCH_ONLY=${BENCH_ONLY:-} BENCH_SCALE=${BENCH_SCALE:-1} BENCH_TF32=${BENCH_TF32:-0}"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 |
    while read -r line; do note "gpu: $line"; done
fi

# --- the binaries ----------------------------------------------------------------------------

BIN=""
if [[ -n "${BENCH_BIN:-}" ]]; then
  BIN=$BENCH_BIN
elif command -v bazel > /dev/null; then
  note "building: bazel build -c opt --config=cuda ${TARGETS[*]}"
  if bazel build -c opt --config=cuda "${TARGETS[@]}" 2>&1 | tail -25; then
    BIN="$(bazel info -c opt --config=cuda bazel-bin)/bench"
  else
    note "BUILD FAILED: tandem and raw not measured"
    STATUS=1
  fi
elif [[ -x "$STAGED/bin/train_step_bench" ]]; then
  BIN=$STAGED/bin
  LD_LIBRARY_PATH="$ROOT/$STAGED/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
  note "no bazel here: using the binaries staged in $STAGED ($(head -1 "$STAGED/STAMP" 2>/dev/null))"
else
  note "no bazel, no BENCH_BIN and no $STAGED (scripts/gpu_stage.sh makes it; with its archive only," \
       "run scripts/gpu_run.sh --bench-only): tandem and raw not measured"
  STATUS=1
fi

# Binaries built elsewhere may not find CUDA's libraries at their build-time path: look for the
# missing ones in this machine's CUDA and in the NVIDIA wheels beside PyTorch.
fix_library_path() {
  local missing lib found dirs=() site
  missing=$(ldd "$@" 2>/dev/null | awk '/not found/ { print $1 }' | sort -u)
  [[ -z "$missing" ]] && return 0
  site=$(python3 -c 'import site; print(" ".join(p + "/nvidia" for p in site.getsitepackages()))' 2>/dev/null)
  for lib in $missing; do
    # shellcheck disable=SC2086  # $site: several directories
    found=$(find /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
                 /usr/lib/x86_64-linux-gnu $site -maxdepth 3 -name "$lib" 2>/dev/null | head -1)
    if [[ -n "$found" ]]; then dirs+=("$(dirname "$found")"); else note "WARNING: $lib not found on this machine"; fi
  done
  if ((${#dirs[@]})); then
    LD_LIBRARY_PATH="$(printf '%s\n' "${dirs[@]}" | sort -u | paste -sd:)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
    note "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  fi
}

# run NAME COMMAND...: one benchmark, its output on stdout and in raw.txt. Its time limit:
# BENCH_TIMEOUT, or less with BENCH_DEADLINE (its share of what is left: REMAINING benchmarks
# to run, this one included).
REMAINING=4
LINEBUF=()
if command -v stdbuf > /dev/null; then LINEBUF=(stdbuf -oL -eL); fi  # lines survive a timeout
run() {
  local name=$1
  shift
  local limit=$TIMEOUT left
  if [[ -n "${BENCH_DEADLINE:-}" ]]; then
    left=$(( (BENCH_DEADLINE - $(date +%s)) / (REMAINING > 0 ? REMAINING : 1) ))
    ((left < limit)) && limit=$left
  fi
  ((REMAINING--))
  if ((limit < 10)); then
    note "$name: not run, no time left before BENCH_DEADLINE"
    STATUS=1
    return
  fi
  note "run $name (at most ${limit}s): $*"
  local start=$SECONDS rc=0
  timeout "$limit" "${LINEBUF[@]}" "$@" 2>&1 | tee -a "$RAW" || rc=$?
  note "$name: exit $rc after $((SECONDS - start))s"
  if [[ $rc != 0 ]]; then STATUS=1; fi
}

# The short ones first: with BENCH_DEADLINE, what they leave goes to the long ones.
if [[ -n "$BIN" ]]; then
  fix_library_path "$BIN/train_step_bench" "$BIN/gemm_bench" "$BIN/gpu_raw_bench"
  run gpu_raw_bench "$BIN/gpu_raw_bench"
  run gemm_bench "$BIN/gemm_bench"
  # TANDEM_CUDNN_VERBOSE: the cuDNN algorithm of every convolution shape, and in benchmark mode
  # each candidate's time, go to raw.txt (lines starting "tandem cuDNN:"; 0 turns them off).
  run train_step_bench env TANDEM_CUDNN_VERBOSE="${TANDEM_CUDNN_VERBOSE:-1}" "$BIN/train_step_bench"
else
  REMAINING=1
fi
# PyTorch with its own libraries: BENCH_PYTHON_LD_LIBRARY_PATH (scripts/gpu_run.sh: the path it
# had before it put the staged libraries first), else LD_LIBRARY_PATH.
PYTHON=(env LD_LIBRARY_PATH="${BENCH_PYTHON_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}" python3)
if "${PYTHON[@]}" -c "import torch" 2> /dev/null; then
  run torch_gpu_bench "${PYTHON[@]}" bench/torch_gpu_bench.py
else
  ((REMAINING--))
  note "python3 has no torch: PyTorch not measured"
fi

# --- the table --------------------------------------------------------------------------------

# tandem's id -> the raw line measuring the library calls of the same work (GEMMs for the MLP,
# convolutions for the CNN; none for the LSTMs): a floor, not the same work.
awk '
function val(line, key,   n, i, a) {
  n = split(line, a, " ")
  for (i = 1; i <= n; i++) if (index(a[i], key "=") == 1) return substr(a[i], length(key) + 2)
  return ""
}
function ms(line) { return val(line, "median_ms") + 0 }
function fmt(line) { return line == "" ? "-" : sprintf("%.3f", ms(line)) }
function ratio(a, b) { return (a == "" || b == "" || ms(b) <= 0) ? "-" : sprintf("%.2f", ms(a) / ms(b)) }
function rate(line,   v) {
  if (line == "") return "-"
  if ((v = val(line, "tflops")) != "") return v " TFLOP/s"
  if ((v = val(line, "tokens_per_s")) != "") return v " tok/s"
  if ((v = val(line, "gflops")) != "") return v " GFLOP/s"
  return "-"
}
function raw_id(id,   suffix, base) {
  if (id in raw) return id
  if (id ~ /\.torchmode$/) id = substr(id, 1, length(id) - length(".torchmode"))  # raw: the fastest of cudnnFind
  suffix = id ~ /\.gpu\.tf32$/ ? ".gpu.tf32" : ".gpu"
  base = substr(id, 1, length(id) - length(suffix))
  if (base ~ /^mlp\.train\./) base = "mlp.train.matmuls"
  else if (base == "mlp.infer") base = "mlp.infer.matmuls"
  else if (base ~ /^conv\.train\./) base = "conv.train.convs"
  else if (base == "conv.infer") base = "conv.infer.convs"
  else return ""
  return (base suffix) in raw ? base suffix : ""
}
/^name=/ {
  name = val($0, "name")
  lib = substr(name, 1, index(name, ".") - 1)
  id = substr(name, length(lib) + 2)
  if (lib == "tandem") { if (!(id in tandem)) order[++n] = id; tandem[id] = $0 }
  else if (lib == "torch") { if (!(id in torch)) torch_order[++m] = id; torch[id] = $0 }
  else if (lib == "raw") { if (!(id in raw)) raw_order[++k] = id; raw[id] = $0 }
  if (index($0, "CHECK=FAIL")) failed[name] = 1
}
function listed(id) { return (id in tandem) || (id in torch) }
# <id>.torchmode whose <id> is listed too: printed right after it.
function follower(id,   base) {
  if (id !~ /\.torchmode$/) return 0
  base = substr(id, 1, length(id) - length(".torchmode"))
  return listed(base)
}
END {
  for (i = 1; i <= m; i++) if (!(torch_order[i] in tandem)) order[++n] = torch_order[i]
  rows = 0
  for (i = 1; i <= n; i++) {
    if (follower(order[i])) continue
    row[++rows] = order[i]
    if (listed(order[i] ".torchmode")) { row[++rows] = order[i] ".torchmode"; paired[++pairs] = order[i] }
  }
  print "| id | tandem ms | raw ms | torch ms | tandem/raw | tandem/torch | tandem | torch | raw measures |"
  print "|---|---:|---:|---:|---:|---:|---:|---:|---|"
  for (i = 1; i <= rows; i++) {
    id = row[i]; t = tandem[id]; p = torch[id]; r_id = raw_id(id); r = r_id == "" ? "" : raw[r_id]
    used[r_id] = 1
    what = r_id == "" ? "-" : (r_id == id ? "same work" : r_id)
    if (("tandem." id) in failed || ("torch." id) in failed || (r_id != "" && ("raw." r_id) in failed))
      what = what " CHECK=FAIL"
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", id, fmt(t), fmt(r), fmt(p), ratio(t, r), ratio(t, p),
           rate(t), rate(p), what
  }
  rows = 0
  for (i = 1; i <= k; i++) if (!(raw_order[i] in used)) {
    if (!rows++) {
      print ""
      print "raw cuBLAS/cuDNN alone (the layers of the rows above):"
      print ""
      print "| raw id | ms | GFLOP/s | algo | math |"
      print "|---|---:|---:|---|---|"
    }
    r = raw[raw_order[i]]
    printf "| %s | %s | %s | %s | %s |\n", raw_order[i], fmt(r), val(r, "gflops"), val(r, "algo"), val(r, "math")
  }
  if (pairs) {
    print ""
    print "The CNN in the deterministic mode of each framework and in the default mode of PyTorch (ms):"
    print ""
    print "| id | tandem default | torch deterministic | tandem/torch | tandem torchmode | torch default | tandem/torch | tandem default/torchmode |"
    print "|---|---:|---:|---:|---:|---:|---:|---:|"
    for (i = 1; i <= pairs; i++) {
      id = paired[i]; fast = id ".torchmode"
      printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", id, fmt(tandem[id]), fmt(torch[id]),
             ratio(tandem[id], torch[id]), fmt(tandem[fast]), fmt(torch[fast]), ratio(tandem[fast], torch[fast]),
             ratio(tandem[id], tandem[fast])
    }
    print ""
    print "default/deterministic: tandem deterministic, direct algorithms only, cuDNN heuristics; torch"
    print "cudnn.deterministic=True, benchmark=False (FFT/Winograd allowed). torchmode/default: cudnn.benchmark,"
    print "atomics allowed, FFT/Winograd allowed, FP32 products (no TF32) in both."
  }
  print ""
  print "ms: median per step (per product for gemm); ratio > 1: tandem slower. raw = the library calls alone"
  print "(GEMMs of the MLP, convolutions of the CNN: a floor, no bias/ReLU/loss/update); .tf32 = TF32 allowed;"
  print ".torchmode = the default choice of cuDNN algorithms of PyTorch in both frameworks (the id without it:"
  print "the deterministic mode of each framework)."
}' "$RAW" | tee "$RES/table.md"

note "results in $RES (exit $STATUS)"
exit $STATUS
