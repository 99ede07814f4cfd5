#!/bin/bash
# Six seeded communication faults (seeded_faults.cc) at 2 and 3 ranks, with the flight recorder
# on (TANDEM_TRACE_DIR): every rank must exit non-zero within TANDEM_COMM_TIMEOUT + 10 s, each
# rank must write its dump, and rank 0's report must name the right ranks, operations and call
# sites (the lines marked FAULT:<fault>:<what> in seeded_faults.cc).
set -u
binary="$1"
source_file="$2"
analyzer="$3"
failures=0
timeout_s=5

line_of() {  # line_of FAULT WHAT -> the source line number of its marker
  grep -n "FAULT:$1:$2\$" "$source_file" | cut -d: -f1
}

# expect LOG TEXT...: each TEXT must appear in LOG (fixed strings).
expect() {
  local log=$1; shift
  local text
  for text in "$@"; do
    if ! grep -qF -- "$text" "$log"; then
      echo "FAIL ($case_name): the report does not say: $text"
      failures=$((failures + 1))
    fi
  done
}

for ranks in 2 3; do
  for fault in missing_recv tag_mismatch shape_mismatch skipped_allreduce exception dtype_mismatch; do
    case_name="$fault on $ranks ranks"
    dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/trace.XXXXXX")
    log="$dir/output.log"
    start=$(date +%s%N)
    TANDEM_TRACE_DIR="$dir" TANDEM_COMM_TIMEOUT=$timeout_s timeout --signal=KILL 60 \
      /usr/bin/mpiexec.mpich -n "$ranks" "$binary" "$fault" > "$log" 2>&1
    status=$?
    elapsed_ms=$((($(date +%s%N) - start) / 1000000))
    echo "=== $case_name: exit $status after ${elapsed_ms} ms"
    if [ "$status" -eq 0 ]; then echo "FAIL ($case_name): the job exited 0"; failures=$((failures + 1)); fi
    if [ "$elapsed_ms" -gt $(((timeout_s + 10) * 1000)) ]; then
      echo "FAIL ($case_name): took ${elapsed_ms} ms, over the timeout + 10 s"; failures=$((failures + 1))
    fi
    dumps=$(ls "$dir"/tandem-trace-*-rank*.json 2> /dev/null | wc -l)
    if [ "$dumps" -ne "$ranks" ]; then
      echo "FAIL ($case_name): $dumps dump(s) for $ranks ranks"; failures=$((failures + 1))
    fi
    file=$(basename "$source_file")
    case $fault in
      missing_recv)
        expect "$log" "rank 0 sent send f32[4] (to rank 1, tag 0, message #0) at tests/comm/trace/$file:$(line_of missing_recv send)" \
          "which rank 1 never received on tag 0" ;;
      tag_mismatch)
        expect "$log" "rank 1 waits in recv (from rank 0, tag 2, message #0) at tests/comm/trace/$file:$(line_of tag_mismatch recv)" \
          "which rank 0 never sent (it sent to rank 1 on tag(s) 1)" \
          "rank 0 sent send f32[4] (to rank 1, tag 1, message #0) at tests/comm/trace/$file:$(line_of tag_mismatch send)" ;;
      shape_mismatch)
        expect "$log" "collective #1 of communicator" \
          "rank 0 is in allreduce f32[4] at tests/comm/trace/$file:$(line_of shape_mismatch allreduce)" \
          "rank 1 is in allreduce f32[5] at tests/comm/trace/$file:$(line_of shape_mismatch allreduce)" ;;
      skipped_allreduce)
        expect "$log" "collective #1 of communicator" \
          "rank 0 is in allreduce f32[4] at tests/comm/trace/$file:$(line_of skipped_allreduce allreduce)" \
          "rank 1 is in bcast (root 0) at tests/comm/trace/$file:$(line_of skipped_allreduce bcast)" ;;
      exception)
        expect "$log" "rank 1 (" "seeded failure on rank 1" \
          "rank 0 is in allreduce f32[4] at tests/comm/trace/$file:$(line_of exception allreduce)" \
          "rank 1 never reached it" ;;
      dtype_mismatch)
        expect "$log" "collective #1 of communicator" \
          "rank 0 is in allreduce f32[4] at tests/comm/trace/$file:$(line_of dtype_mismatch allreduce)" \
          "rank 1 is in allreduce f64[4] at tests/comm/trace/$file:$(line_of dtype_mismatch allreduce)" ;;
    esac
    if [ "$failures" -gt 0 ]; then echo "--- output of $case_name:"; cat "$log"; fi
  done
done
# A hang without a timeout: SIGUSR1 makes every rank write its ring, and the analyser says who
# waits where.
case_name="hang, SIGUSR1"
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/trace.XXXXXX")
TANDEM_TRACE_DIR="$dir" timeout --signal=KILL 60 /usr/bin/mpiexec.mpich -n 2 "$binary" hang > "$dir/output.log" 2>&1 &
job=$!
for _ in $(seq 100); do  # until both ranks are up and rank 1 waits (at most 10 s)
  sleep 0.1
  [ "$(pgrep -f "$binary hang" | wc -l)" -ge 2 ] && break
done
sleep 1
pkill -USR1 -f "^$binary hang"
for _ in $(seq 100); do
  [ "$(ls "$dir"/tandem-trace-*-rank*.json 2> /dev/null | wc -l)" -ge 2 ] && break
  sleep 0.1
done
pkill -KILL -f "^$binary hang"
wait "$job" 2> /dev/null
"$analyzer" "$dir" > "$dir/report.txt" 2>&1
echo "=== $case_name"
cat "$dir/report.txt"
expect "$dir/report.txt" "2 of 2 rank(s) dumped" "rank 1 (" "SIGUSR1" \
  "rank 1: waiting in recv (from rank 0, tag 0, message #0) at tests/comm/trace/$(basename "$source_file"):$(line_of hang recv)"

echo "seeded_faults_test: $failures failure(s)"
[ "$failures" -eq 0 ]
