#!/usr/bin/env bash
# peak_memory.sh - peak resident memory of the training and inference steps, tandem against the
# LibTorch anchors (../shared/bench/libtorch_{mlp,conv,lstm}.cpp) on the same workloads:
#
#   bench/peak_memory.sh                  mlp, conv and lstm at 1 and 2 threads
#   MEM_ONLY="mlp conv" MEM_THREADS=1 bench/peak_memory.sh
#
# Each program runs alone, once per workload family and thread count (tandem:
# bench/train_step_bench with BENCH_ONLY=<family>; LibTorch: its anchor with ANCHOR_THREAD_LIST),
# and its peak resident set is the kernel's (getrusage of the child: ru_maxrss). What a process
# holds before any workload differs a lot between the two (LibTorch's libraries are large), so a
# baseline is measured the same way and subtracted: one tiny step of each kind, the libraries
# loaded (tandem: the benchmark's BENCH_ONLY=baseline; LibTorch: bench/libtorch_baseline.cpp). One line
# per measurement, in ../shared/bench's format:
#   name=peak_rss.<family>.t<n> lib=libtorch peak_mb= baseline_mb= workload_mb=
#   name=tandem.peak_rss.<family>.t<n> lib=tandem ... workload_mb= ratio=<tandem / libtorch workload>
# A family's peak is the largest of its steps (mlp: SGD, Adam and inference; conv: training and
# inference; lstm: fixed and packed lengths, seq2seq). Iterations are cut (ANCHOR_SCALE,
# BENCH_SCALE = 0.2): the peak is reached in the first steps.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
SHARED="${TANDEM_ANCHORS_DIR:-$(cd "$ROOT/../shared/bench" 2>/dev/null && pwd || echo "$ROOT/../shared/bench")}"  # the anchors' folder
WORK=${BENCH_WORK:-/tmp/tandem-anchors}
FAMILIES=${MEM_ONLY:-mlp conv lstm}
THREADS=${MEM_THREADS:-1 2}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
unset OPENBLAS_CORETYPE

"$SHARED/deps.sh" --check

# The anchors, built as run_all.sh builds them (skipped when they are already there).
mkdir -p "$WORK"
if [[ ! -x "$WORK/build/libtorch_mlp" || ! -x "$WORK/build/libtorch_conv" || ! -x "$WORK/build/libtorch_lstm" ]]; then
  cp "$SHARED"/*.cpp "$SHARED"/*.hpp "$SHARED"/Makefile "$WORK"/
  make -C "$WORK" -j2 build/libtorch_mlp build/libtorch_conv build/libtorch_lstm >&2
fi
# The LibTorch baseline, with the anchors' compiler flags and libraries (as bench/libtorch_lm.sh).
BASELINE="$WORK/build-mem/libtorch_baseline"
mkdir -p "$WORK/build-mem"
if [[ ! -x "$BASELINE" || "$HERE/libtorch_baseline.cpp" -nt "$BASELINE" ]]; then
  g++ -O2 -std=c++17 -I/usr/include/torch/csrc/api/include -D_GLIBCXX_USE_CXX11_ABI=1 -Wno-deprecated-declarations \
    -fopenmp -o "$BASELINE" "$HERE/libtorch_baseline.cpp" \
    -Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed -lopenblas -fopenmp >&2
fi
(cd "$ROOT" && bazel build -c opt //bench:train_step_bench >&2)
TANDEM="$ROOT/bazel-bin/bench/train_step_bench"

# Peak resident set of a command in MB (its output discarded).
peak_mb() {
  python3 - "$@" << 'EOF'
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
if status != 0:
    sys.exit("peak_memory.sh: %s exited with status %d" % (sys.argv[1], status))
print("%.1f" % (usage.ru_maxrss / 1024.0))
EOF
}

for t in $THREADS; do
  torch_base=$(peak_mb env ANCHOR_THREAD_LIST="$t" "$BASELINE")
  tandem_base=$(peak_mb env BENCH_ONLY=baseline BENCH_THREADS="$t" "$TANDEM")
  for family in $FAMILIES; do
    torch_peak=$(peak_mb env ANCHOR_THREAD_LIST="$t" ANCHOR_SCALE=0.2 "$WORK/build/libtorch_$family")
    tandem_peak=$(peak_mb env BENCH_ONLY="$family" BENCH_THREADS="$t" BENCH_SCALE=0.2 "$TANDEM")
    awk -v f="$family" -v t="$t" -v tp="$torch_peak" -v tb="$torch_base" -v np="$tandem_peak" -v nb="$tandem_base" \
      'BEGIN {
        tw = tp - tb; nw = np - nb
        printf "name=peak_rss.%s.t%s lib=libtorch peak_mb=%.1f baseline_mb=%.1f workload_mb=%.1f\n", f, t, tp, tb, tw
        printf "name=tandem.peak_rss.%s.t%s lib=tandem peak_mb=%.1f baseline_mb=%.1f workload_mb=%.1f ratio=%.2f\n",
               f, t, np, nb, nw, nw / tw
      }'
  done
done
