#!/usr/bin/env bash
# tandem across hosts, on 2 simulated hosts (scripts/sim_hosts.sh): every process of a host in
# its own network namespace with its own host name, MPICH between hosts over TCP on a veth
# bridge. Checks, at 2 hosts x 2 ranks unless said:
#   - the hierarchical communicator (tests/comm/transport/hierarchical_test.cc, here with the real hosts):
#     intra/inter ranks, allreduce and its gradients equal to the flat communicator's;
#   - the trainers end to end with their accuracy: the model-parallel MLP and the pipeline
#     (2 hosts x 1 rank: each stage on its own host), data parallelism flat and hierarchical
#     (the same accuracy; every rank's weights identical; flat and hierarchical weights equal to
#     f32 rounding);
#   - resume: a hierarchical run stopped after epoch 1 and resumed ends bit-identical to an
#     uninterrupted one;
#   - the job timeline (TANDEM_TIMELINE) with host 1's clock 250 ms ahead: aligned, every message
#     received after it was sent;
#   - a host killed mid-training (every process in its namespace, SIGKILL): every other rank
#     exits non-zero within 10 s, and nothing of the job or the hosts is left.
# Where network namespaces cannot be made (not root, or no CAP_SYS_ADMIN) it says SKIPPED and why.
set -uo pipefail
sim="scripts/sim_hosts.sh"
dp="examples/mnist/train_mnist_data_parallel"
mp="examples/mnist/train_mnist_model_parallel"
pipe="examples/pipeline/train_mnist_pipeline"
t="$TEST_TMPDIR"
export OMP_NUM_THREADS=1 TANDEM_COMM_TIMEOUT=60
fail() { echo "FAIL: $*"; exit 1; }

probe="$(timeout 60 "$sim" --hosts 1 --ranks-per-host 1 -- /bin/true 2>&1)"
case $? in
  0) ;;
  77) echo "SKIPPED: $probe"; exit 0 ;;
  *) echo "$probe"; fail "sim_hosts.sh cannot run /bin/true on one host" ;;
esac

run() {  # run NAME HOSTS PER_HOST PROGRAM ARGS...: one job into $t/NAME(.txt)
  local name="$1" hosts="$2" per="$3"
  shift 3
  timeout -k 10 240 "$sim" --hosts "$hosts" --ranks-per-host "$per" -- "$@" > "$t/$name.txt" 2>&1 && return 0
  # MPICH over UCX's TCP transport sometimes hangs in MPI_Finalize (openucx/ucx#8738; mpi_env.cc
  # ends such a rank once every message is known received). When every rank of the job hung
  # there, the process manager reported a bad termination although each rank ended with status
  # 0 (seen 3 times in 10 runs here on 2026-11-29, in a cluster; 0 in the other 7), or its proxies
  # failed to write to the ranks they had lost ("assert (!closed) failed", "demux engine error
  # waiting for event": once in a parallel `bazel test //tests/comm/...`, session 17). That job,
  # and only that one, runs once more: anything else, or the same twice, fails.
  if [ "$(grep -c "MPI_Finalize did not return within" "$t/$name.txt")" -ge $((hosts * per)) ] &&
     grep -qE "BAD TERMINATION|assert \(!closed\) failed|demux engine error waiting for event" "$t/$name.txt" &&
     ! grep -q "ending with status [^0]" "$t/$name.txt"; then
    echo "note: $name: every rank hung in MPI_Finalize (the known MPICH/UCX TCP hang); running it once more"
    cp "$t/$name.txt" "$t/$name.first.txt"
    timeout -k 10 240 "$sim" --hosts "$hosts" --ranks-per-host "$per" -- "$@" > "$t/$name.txt" 2>&1 && return 0
  fi
  cat "$t/$name.txt"
  fail "$name"
}
accuracy() {  # accuracy OUT MIN: the last validation accuracy in OUT/log is above MIN
  /usr/bin/python3 - "$1" "$2" <<'PY' || { cat "$1.txt" 2>/dev/null; fail "accuracy of $1"; }
import json, sys
log = json.load(open(sys.argv[1] + "/log"))
acc = log[-1]["validation/main/accuracy"]
print("%s: validation accuracy %.4f" % (sys.argv[1].rsplit("/", 1)[-1], acc))
assert acc > float(sys.argv[2]), acc
PY
}

# The hierarchical communicator against the flat one, on real hosts.
run hierarchical 2 2 tests/comm/transport/hierarchical_test_bin
grep -q "All tests passed" "$t/hierarchical.txt" || { cat "$t/hierarchical.txt"; fail "hierarchical_test"; }

# With TANDEM_TEST_SHORT=1 (by hand: the test is tagged no_asan, so the sanitizer run that sets
# it leaves it out) the MNIST runs train on the first 12000 examples: the same runs and
# comparisons, a fifth of the steps; the accuracy floors are left to the normal run.
data=() floor=0.7
if [ "${TANDEM_TEST_SHORT:-0}" = 1 ]; then
  /usr/bin/python3 tests/examples/common/mnist_subset.py "$t/mnist" 12000 2000 || fail "mnist subset"
  data=(--data-dir "$t/mnist") floor=0
fi

# The model-parallel MLP and the pipeline: one rank per host.
run mp 2 1 "$mp" --epoch 1 --unit 50 --batchsize 200 "${data[@]}" --out "$t/mp"
accuracy "$t/mp" "$floor"
run pipe 2 1 "$pipe" --layers 4 --unit 64 --batchsize 50 --train-size 10000 --test-size 2000 --epoch 1 \
  --schedule 1f1b --microbatches 4 --out "$t/pipe"
accuracy "$t/pipe" "$([ "$floor" = 0 ] && echo 0 || echo 0.6)"

# Data parallelism, flat and hierarchical.
dp_flags=(--unit 50 --batchsize 200 "${data[@]}")
run flat 2 2 "$dp" "${dp_flags[@]}" --epoch 2 --out "$t/flat"
run hier 2 2 "$dp" "${dp_flags[@]}" --epoch 2 --communicator hierarchical --out "$t/hier"
accuracy "$t/flat" "$floor"
accuracy "$t/hier" "$floor"
# Resume: epoch 1, then epoch 2 from its snapshot.
run resumed 2 2 "$dp" "${dp_flags[@]}" --epoch 1 --communicator hierarchical --out "$t/resumed"
run resumed2 2 2 "$dp" "${dp_flags[@]}" --epoch 2 --communicator hierarchical --out "$t/resumed" --resume latest
/usr/bin/python3 - "$t" <<'PY' || fail "weights"
import glob, sys
import numpy as np
t = sys.argv[1]
def last(d):
    return np.load(sorted(glob.glob(d + "/snapshot_iter_*.npz"))[-1])
def model(a):
    return {k: a[k] for k in a.files if k.startswith("model/")}
for run in ["flat", "hier"]:  # every rank holds the same replica
    first = model(last("%s/%s" % (t, run)))
    assert len(first) == 6, first.keys()
    for r in range(1, 4):
        other = model(last("%s/%s/rank%d" % (t, run, r)))
        for k in first:
            assert np.array_equal(first[k], other[k]), (run, r, k)
flat, hier = model(last(t + "/flat")), model(last(t + "/hier"))
worst = max(float(np.max(np.abs(flat[k] - hier[k]))) for k in flat)
print("flat against hierarchical after 2 epochs: largest weight difference %.3g" % worst)
assert worst < 1e-4, worst
resumed = model(last(t + "/resumed"))
for k in hier:
    assert np.array_equal(hier[k], resumed[k]), ("resumed", k)
print("resumed run: bit-identical to the uninterrupted one")
PY

# The job timeline across hosts, host 1's clock 250 ms ahead: rank 0 measures every rank's
# clock against its own and moves that host's spans back, so no message arrives before it left.
TANDEM_TIMELINE="$t/timeline.json" run timeline 2 1 /bin/sh -c \
  'case "$(hostname)" in *h1) export TANDEM_CLOCK_SKEW_US=250000 ;; esac; exec "$0" "$@"' \
  "$pipe" --layers 4 --unit 64 --batchsize 50 --train-size 400 --test-size 100 --epoch 1 --microbatches 4 \
  --out "$t/timeline"
tests/comm/trace/check_timeline "$t/timeline.json" 2 100 || fail "the timeline across hosts"
# The note names the measured offset and its error bound: the offset is measured (Cristian's
# algorithm over TCP), so it reads 249.9xx as well as 250.0xx ms on a loaded machine; the true
# 250 ms must lie within the stated bound.
/usr/bin/python3 - "$t/timeline.json" <<'PY' || fail "the timeline does not say that rank 1's clock was moved by 250 ms"
import re, sys
text = open(sys.argv[1]).read()
notes = re.findall(r"clock ([+-][0-9.]+) ms from rank 0's, aligned to within ([0-9]+) us", text)
assert len(notes) == 1, notes
offset_us, error_us = float(notes[0][0]) * 1e3, int(notes[0][1])
print("timeline: rank 1's clock %+.3f ms, within %d us" % (offset_us / 1e3, error_us))
assert abs(offset_us - 250000) <= error_us + 1, (offset_us, error_us)
PY

# A host killed mid-training: every process of host 1 (its two ranks and its MPI proxy).
state="$t/kill.state"
started=$EPOCHREALTIME
{ timeout -k 10 120 "$sim" --hosts 2 --ranks-per-host 2 --state-file "$state" -- \
    "$dp" "${dp_flags[@]}" --epoch 200 --communicator hierarchical --out "$t/kill" > "$t/kill.txt" 2>&1
  echo $? > "$t/kill.status"; echo "$EPOCHREALTIME" > "$t/kill.ended"; } &
job=$!
for _ in $(seq 1200); do
  [ -f "$t/kill/snapshot_manifest.json" ] && break  # epoch 1 is done on every rank
  sleep 0.05
done
[ -f "$t/kill/snapshot_manifest.json" ] || { cat "$t/kill.txt"; fail "the job to kill never finished epoch 1"; }
host1=$(sed -n 's/^host1=//p' "$state")
pids=$(ip netns pids "$host1")
[ -n "$pids" ] || fail "no process on $host1"
killed_at=$EPOCHREALTIME
kill -KILL $pids
wait "$job"
status=$(cat "$t/kill.status")
seconds=$(/usr/bin/python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$killed_at" "$(cat "$t/kill.ended")")
echo "host 1 killed (pids $(echo $pids)): the job exited with status $status ${seconds}s later"
tail -n 8 "$t/kill.txt"
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] && [ "$status" -ne 137 ] || fail "status $status after the host was killed"
/usr/bin/python3 -c "import sys; sys.exit(not float(sys.argv[1]) < 10)" "$seconds" || fail "took ${seconds}s to end"
! grep -q "processes left behind" "$t/kill.txt" || fail "processes of the job outlived mpiexec"
prefix=$(sed -n 's/^prefix=//p' "$state")
left=$(ip netns list | grep -c "^$prefix" || true)
[ "$left" -eq 0 ] || { ip netns list; fail "namespaces of the job remain"; }
left=$(pgrep -f -- "--out $t/kill\$" || true)
[ -z "$left" ] || { ps -o pid,args -p $left; fail "processes of the job remain"; }
echo "PASS"
