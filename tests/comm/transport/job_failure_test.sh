#!/bin/bash
# A failure on one rank must end the whole job quickly, with a message that names the failed
# rank, and a non-zero exit status; no rank may be left hanging.
set -u
binary="$1"
fail() { echo "FAIL: $*"; exit 1; }

run() {  # run MODE -> sets status, output, seconds
  local start=$(date +%s)
  output=$(timeout --signal=KILL 60 /usr/bin/mpiexec.mpich -n 2 env -u TANDEM_COMM_TIMEOUT "$binary" "$1" 2>&1)
  status=$?
  seconds=$(( $(date +%s) - start ))
  echo "--- mode $1: status $status after ${seconds}s"
  echo "$output"
}

run throw
[ "$status" -ne 0 ] || fail "an uncaught exception on rank 1 did not fail the job"
[ "$status" -ne 137 ] || fail "the job hung and was killed"
echo "$output" | grep -q "tandem: rank 1 of 2 failed: rank 1 fails on purpose" || fail "no message naming rank 1"
[ "$seconds" -lt 30 ] || fail "the job took ${seconds}s to end"

run exit
[ "$status" -ne 0 ] || fail "rank 0 waiting for a finished rank did not fail the job"
[ "$status" -ne 137 ] || fail "the job hung and was killed"
echo "$output" | grep -q "tandem: rank 0 of 2 failed: comm: recv (from rank 1, tag 0) on rank 0 waits for rank 1, but rank 1 has finished" \
  || fail "no message saying that rank 1 finished"
[ "$seconds" -lt 30 ] || fail "the job took ${seconds}s to end"
echo PASS
