#!/usr/bin/env bash
# libtorch_lm.sh - build and run the GPT-style language-model anchor bench/libtorch_lm.cpp (ids
# lm.train.adam.t{1,2}, lm.infer.t{1,2}) the way ../shared/bench builds and runs its libtorch_*
# anchors: the Makefile's compiler flags and libraries, the shared headers through -I, every line
# through runq (when run_all.sh has built it) with OMP_WAIT_POLICY=PASSIVE.
#
#   bench/libtorch_lm.sh                       build (when stale) and run once; lines on stdout
#   ANCHOR_SCALE=0.5 bench/libtorch_lm.sh      fewer timed iterations (never below 3)
#   ANCHOR_THREAD_LIST=1 bench/libtorch_lm.sh  one thread count only
#   BENCH_WORK=dir                             as run_all.sh (default /tmp/tandem-anchors): the
#                                              binary goes to dir/build-lm, runq is dir/build/runq
# scripts/bench.sh runs it under BENCH_ONLY word `lm` and adds its lines to the anchor summary.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The anchors' folder: TANDEM_ANCHORS_DIR, else ../shared/bench beside the repository.
SHARED="${TANDEM_ANCHORS_DIR:-$(cd "$HERE/../../shared/bench" 2>/dev/null && pwd || echo "$HERE/../../shared/bench")}"
WORK=${BENCH_WORK:-/tmp/tandem-anchors}
BUILD="$WORK/build-lm"
RUNQ="$WORK/build/runq"
QUIET_WAIT=${QUIET_WAIT:-20}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

# As ../shared/bench/Makefile (CXX, OPT and CXXFLAGS may be overridden the same way).
CXX=${CXX:-g++}
OPT=${OPT:--O3 -march=native}
CXXFLAGS=${CXXFLAGS:-$OPT -std=c++17 -Wall -Wno-unused-variable}
TORCH_CFLAGS="-I/usr/include/torch/csrc/api/include -D_GLIBCXX_USE_CXX11_ABI=1 -Wno-deprecated-declarations -fopenmp"
TORCH_LIBS="-Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed -lopenblas -fopenmp"

"$SHARED/deps.sh" --check
SRC="$HERE/libtorch_lm.cpp"
BIN="$BUILD/libtorch_lm"
mkdir -p "$BUILD"
if [[ ! -x "$BIN" || "$SRC" -nt "$BIN" || "$SHARED/common.hpp" -nt "$BIN" ||
      "$SHARED/torch_common.hpp" -nt "$BIN" ]]; then
  # shellcheck disable=SC2086
  cmd=($CXX $CXXFLAGS $TORCH_CFLAGS -I"$SHARED" -o "$BIN.tmp.$$" "$SRC" $TORCH_LIBS)
  echo "# building: ${cmd[*]}" >&2
  "${cmd[@]}" >&2
  mv -f "$BIN.tmp.$$" "$BIN"
fi

if [[ -x "$RUNQ" ]]; then
  exec "$RUNQ" -w "$QUIET_WAIT" -- "$BIN"
fi
echo "# no $RUNQ (run_all.sh builds it): lines carry no noise=" >&2
exec "$BIN"
