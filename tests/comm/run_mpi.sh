#!/bin/bash
# Runs a test binary on N MPI ranks: run_mpi.sh N BINARY [ARGS...]
# Each rank's output goes to its own log, printed afterwards in rank order so that failures
# are readable. A deadlock fails the test: tandem's own timeout (TANDEM_COMM_TIMEOUT, short
# here) turns a stuck wait into an error, and `timeout` kills the whole job as a last resort.
set -u
ranks="$1"; shift
binary="$1"; shift
logs="${TEST_TMPDIR:-$(mktemp -d)}/ranks"
mkdir -p "$logs"
export TANDEM_COMM_TIMEOUT="${TANDEM_COMM_TIMEOUT:-20}"
timeout --signal=KILL "${MPI_TEST_DEADLINE:-240}" /usr/bin/mpiexec.mpich -n "$ranks" \
  /bin/sh -c 'exec "$0" "$@" > "'"$logs"'/rank.$PMI_RANK.log" 2>&1' "$binary" "$@"
status=$?
for ((r = 0; r < ranks; ++r)); do
  echo "=================== rank $r ==================="
  cat "$logs/rank.$r.log" 2>/dev/null || echo "(no output)"
done
if [ "$status" -ne 0 ]; then echo "run_mpi.sh: $ranks-rank run of $(basename "$binary") exited with status $status"; fi
exit "$status"
