#!/usr/bin/env bash
# Builds one fuzz target with libFuzzer (clang, ASan, UBSan: --config=fuzz in .bazelrc) and
# runs it on a writable copy of its seed corpus:
#
#   scripts/fuzz.sh NAME [SECONDS] [libFuzzer flags...]
#
# NAME is one of idx, npz, npy, message, snapshot (tests/fuzz/NAME_fuzzer.cc); SECONDS
# defaults to 300. Flags after SECONDS go to libFuzzer (e.g. -jobs=2 -workers=2). Set
# BAZEL_STARTUP_OPTS (e.g. --output_base=/tmp/bazel_fuzz) to build in another output base.
#
# Inputs that crash are written to the work directory printed at the start (crash-*, leak-*,
# timeout-*, oom-*); reproduce one with `bazel-bin-of-the-fuzz-config/.../NAME_fuzzer FILE`
# (the command is printed), fix the parser, and keep the input as a regression case:
#   cp WORKDIR/crash-... tests/fuzz/corpus/NAME/regression/
# `bazel test //tests/fuzz/...` replays every regression input on each run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [[ $# -lt 1 || ! -f "tests/fuzz/$1_fuzzer.cc" ]]; then
  echo "usage: $0 NAME [SECONDS] [libFuzzer flags...]; NAME is one of:" \
    $(cd tests/fuzz && ls *_fuzzer.cc | sed 's/_fuzzer\.cc$//') >&2
  exit 2
fi
NAME="$1"
SECONDS_TO_RUN="${2:-300}"
shift $(( $# >= 2 ? 2 : 1 ))

# shellcheck disable=SC2206
BAZEL=(bazel ${BAZEL_STARTUP_OPTS:-})
# No convenience symlinks: bazel-bin & co. keep pointing at the default build (and at the
# default output base when BAZEL_STARTUP_OPTS names another one).
"${BAZEL[@]}" build --config=fuzz --symlink_prefix=/ "//tests/fuzz:${NAME}_fuzzer"
BIN="$("${BAZEL[@]}" info --config=fuzz bazel-bin 2>/dev/null)/tests/fuzz/${NAME}_fuzzer"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/tandem_fuzz_${NAME}.XXXXXX")"
mkdir -p "$WORK/corpus"
cp -R "tests/fuzz/corpus/${NAME}/." "$WORK/corpus/"
chmod -R u+w "$WORK/corpus"
echo "fuzz.sh: ${NAME} for ${SECONDS_TO_RUN} s; corpus and findings in ${WORK}"

# Dictionaries of the format's tokens (tests/fuzz/*.dict).
DICTS=()
case "$NAME" in
  idx) DICTS=(tests/fuzz/idx.dict) ;;
  npy | npz) DICTS=(tests/fuzz/npy.dict) ;;
  snapshot) DICTS=(tests/fuzz/npy.dict tests/fuzz/snapshot.dict) ;;
esac
DICT_FLAG=()
if [[ ${#DICTS[@]} -gt 0 ]]; then
  cat "${DICTS[@]}" > "$WORK/dict"
  DICT_FLAG=(-dict="$WORK/dict")
fi

# detect_leaks=0: the process lives for the whole run, and caches that live until exit (the
# tensor block cache is off in the targets) are not leaks. -rss_limit_mb: an input that makes
# a parser allocate past 2 GiB is a finding (oom-*).
set +e
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}" "$BIN" \
  -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$WORK/" "${DICT_FLAG[@]}" "$@" "$WORK/corpus"
STATUS=$?
set -e

shopt -s nullglob
FINDINGS=("$WORK"/crash-* "$WORK"/leak-* "$WORK"/timeout-* "$WORK"/oom-*)
if [[ ${#FINDINGS[@]} -gt 0 ]]; then
  echo "fuzz.sh: ${#FINDINGS[@]} finding(s):"
  for f in "${FINDINGS[@]}"; do echo "  $f    (reproduce: $BIN $f)"; done
fi
echo "fuzz.sh: the corpus now has $(find "$WORK/corpus" -type f | wc -l) files ($WORK/corpus)"
exit "$STATUS"
