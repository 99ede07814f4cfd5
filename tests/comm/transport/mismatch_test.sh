#!/bin/bash
# Programs whose ranks communicate in ways that do not match (mismatch_main.cc) must fail the
# job, without a timeout, with every rank that took part naming both sides: the operations, the
# ranks, the tag, dtype and shape of the message. mismatch_test.sh BINARY [RANKS...]
set -u
binary="$1"; shift
sizes=("${@:-2}")
# Under the sanitizers (TANDEM_TEST_SHORT=1, .bazelrc's asan config) on the first size only: the
# other sizes take the same error paths once more, and the plain run has them.
if [ "${TANDEM_TEST_SHORT:-0}" = 1 ]; then sizes=("${sizes[0]}"); fi
logs="${TEST_TMPDIR:-$(mktemp -d)}/mismatch"
failures=0
fail() { echo "FAIL ($mode, $ranks ranks): $*"; failures=$((failures + 1)); }

run() {  # run MODE RANKS: sets status, seconds; rank R's output in $logs/rank.R.log
  mode="$1"; ranks="$2"
  rm -rf "$logs"; mkdir -p "$logs"
  local start=$(date +%s%N)
  timeout --signal=KILL 60 /usr/bin/mpiexec.mpich -n "$ranks" env -u TANDEM_COMM_TIMEOUT \
    /bin/sh -c 'exec "$0" "$@" > "'"$logs"'/rank.$PMI_RANK.log" 2>&1' "$binary" "$mode"
  status=$?
  seconds=$(( ($(date +%s%N) - start) / 1000000000 ))
  echo "--- $mode on $ranks ranks: status $status after ${seconds}s"
  for ((r = 0; r < ranks; ++r)); do sed "s/^/  rank $r: /" "$logs/rank.$r.log"; done
  [ "$status" -ne 137 ] || fail "the job hung and was killed"
  [ "$seconds" -lt 20 ] || fail "the job took ${seconds}s to end"
}
says() {  # says RANK TEXT: rank RANK's output contains TEXT
  grep -qF -- "$2" "$logs/rank.$1.log" || fail "rank $1 does not say: $2"
}
failed() { [ "$status" -ne 0 ] || fail "the job succeeded"; }

for ranks in "${sizes[@]}"; do
  # 1. A plain send against a collective: the send returns (MPI buffers it) and rank 0 finishes;
  #    the others fail in the collective naming the send, and rank 0 names both.
  for op in barrier bcast:bcast gather0:gather gather1:gather scatter:scatter allgather:allgather \
            alltoall:alltoall allreduce:allreduce reduce:reduce reduce_scatter:reduce_scatter; do
    name="${op#*:}"; op="${op%%:*}"
    run "send:$op" "$ranks"; failed
    says 1 "$name"; says 1 "rank 0 has finished"
    says 1 "rank 0 sent send f32[3] (tag 5, message #0) to rank 1, which rank 1 never received"
    says 0 "rank 1 failed while this rank was finishing: comm: $name"
    says 0 "rank 0 sent send f32[3] (tag 5, message #0) to rank 1, which rank 1 never received"
  done
  # The same with a receive: rank 0 fails at once (its peer is in a collective), and the others,
  # waiting in the collective, are told why.
  for op in barrier bcast:bcast gather0:gather gather1:gather scatter:scatter allgather:allgather \
            alltoall:alltoall allreduce:allreduce reduce:reduce reduce_scatter:reduce_scatter; do
    name="${op#*:}"; op="${op%%:*}"
    run "recv:$op" "$ranks"; failed
    says 0 "recv (from rank 1, tag 5) on rank 0 waits for rank 1, but rank 1 has entered $name"
    says 1 "cannot complete: rank 0 failed: comm: recv (from rank 1, tag 5) on rank 0"
    says 1 "has entered $name"
  done

  # 2. Messages that nobody receives fail the job at its end, named on both sides.
  run unreceived "$ranks"; failed
  for r in 0 1; do
    says $r "that were sent and never received"
    says $r "rank 0 sent send f32[2, 3] (tag 4, message #0) to rank 1, which rank 1 never received"
    says $r "returned from main"
  done
  run partial "$ranks"; failed
  for r in 0 1; do
    says $r "rank 0 sent send f32[2] (tag 4, message #1) to rank 1, which rank 1 never received"
    says $r "rank 0 sent send f32[3] (tag 4, message #2) to rank 1, which rank 1 never received"
  done
  grep -qF "message #0)" "$logs/rank.0.log" && fail "rank 0 names the message that was received"
  run split "$ranks"; failed
  for r in 0 1; do
    says $r "rank 0 sent send i64[5] (tag 1, message #0) to rank 1 on communicator #1 (of 2 ranks), which rank 1 never received"
  done
  run differentiable "$ranks"; failed
  says 1 "rank 0 sent activation f64[4] (tag 2, message #0) to rank 1, which rank 1 never received"

  # 3. A cycle of receives is found without a timeout, and every rank of it names the cycle.
  run cycle "$ranks"; failed
  for ((r = 0; r < ranks; ++r)); do
    says $r "tandem: rank $r of $ranks failed: comm: deadlock: recv (from rank $(( (r + 1) % ranks )), tag 0) on rank $r can never complete"
    says $r "rank 0 waits in recv (from rank 1, tag 0) for message #0"
    says $r "rank $((ranks - 1)) waits in recv (from rank 0, tag 0) for message #0"
  done

  # 4. A skipped collective, with the call-site check on: every rank fails at the skipped call,
  #    naming every rank's line (not one collective later, where MPI would have paired the next).
  run skip "$ranks"; failed
  read -r _ skipped next < <(grep "^lines " "$logs/rank.0.log")
  for ((r = 0; r < ranks; ++r)); do
    says $r "they called it from different lines: has a rank skipped a collective?"
    says $r "rank 0 is in allreduce f32[2] (collective #"
    says $r ") at tests/comm/transport/mismatch_main.cc:$skipped (main); rank 1 is in allreduce f32[2] (collective #"
    says $r ") at tests/comm/transport/mismatch_main.cc:$next (main)"
  done

  # A program whose messages all match ends normally, and tandem says nothing.
  run matched "$ranks"
  [ "$status" -eq 0 ] || fail "a matched program failed"
  for ((r = 0; r < ranks; ++r)); do
    grep -q "^tandem:" "$logs/rank.$r.log" && fail "rank $r printed a tandem message"
  done
done

if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo PASS
