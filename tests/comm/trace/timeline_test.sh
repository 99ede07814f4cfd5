#!/bin/bash
# The job timeline of a real run: the pipelined MLP on Fashion-MNIST over 2 ranks with
# TANDEM_TIMELINE set; rank 0 writes one file that check_timeline validates (Chrome-trace JSON,
# a process per rank, nested spans, every send paired with its receive by a flow). Without
# TANDEM_TIMELINE, no file.
set -u
trainer="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
checker="$2"
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/timeline.XXXXXX")
args=(--epoch 1 --train-size 400 --test-size 100 --unit 64 --layers 4 --microbatches 4)
TANDEM_TIMELINE="$dir/timeline.json" timeout --signal=KILL 120 /usr/bin/mpiexec.mpich -n 2 "$trainer" "${args[@]}" \
  --out "$dir/out" > "$dir/log" 2>&1 || { cat "$dir/log"; echo "FAIL: the training run failed"; exit 1; }
"$checker" "$dir/timeline.json" 2 || exit 1
rm "$dir/timeline.json"
(cd "$dir" && timeout --signal=KILL 120 /usr/bin/mpiexec.mpich -n 2 "$trainer" "${args[@]}" --out "$dir/out2" \
  > "$dir/log2" 2>&1) || { cat "$dir/log2"; exit 1; }
if [ -n "$(find "$dir" -name '*.json' -newer "$dir/log" ! -path "*/out2/*")" ] || grep -q "timeline" "$dir/log2"; then
  echo "FAIL: a timeline was written without TANDEM_TIMELINE"; exit 1
fi
echo "timeline_test: passed"
