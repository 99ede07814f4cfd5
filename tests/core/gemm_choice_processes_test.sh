#!/usr/bin/env bash
# The measured GEMM choice (core/cpu/measured_choice.h) shared by processes started together, as
# the ranks of a job are: they take turns under the file's lock, so every class is timed once,
# written once, and every process computes with the same library. A later process reads them.
set -uo pipefail
probe="tests/core/gemm_choice_probe"
# The measured mode (core/kernel_choices.h), its timings kept though other tests run beside this one.
export TANDEM_CACHE_DIR="$TEST_TMPDIR/cache" OMP_NUM_THREADS=1 TANDEM_KERNEL_TUNING=measure TANDEM_KERNEL_TIMING_UNDER_LOAD=keep
for i in 1 2 3 4; do "$probe" > "$TEST_TMPDIR/p$i.txt" & done
wait
for i in 2 3 4; do
  cmp -s "$TEST_TMPDIR/p1.txt" "$TEST_TMPDIR/p$i.txt" \
    || { paste "$TEST_TMPDIR/p1.txt" "$TEST_TMPDIR/p$i.txt"; echo "FAIL: processes 1 and $i chose differently"; exit 1; }
done
[[ $(wc -l < "$TEST_TMPDIR/p1.txt") == 6 ]] || { cat "$TEST_TMPDIR/p1.txt"; echo "FAIL: probe output"; exit 1; }
file=$(ls "$TEST_TMPDIR"/cache/choices-*.txt) || { echo "FAIL: no choice file"; exit 1; }
cat "$file"
# Six shapes, six classes, each written once, with every candidate's figure.
[[ $(grep -c '^gemm\.f32\.t1\.' "$file") == 6 ]] || { echo "FAIL: expected 6 lines"; exit 1; }
[[ $(cut -d' ' -f1 "$file" | sort -u | wc -l) == 6 ]] || { echo "FAIL: a class written twice"; exit 1; }
grep -q 'eigen=' "$file" || { echo "FAIL: no figures"; exit 1; }
# The choice in the file is the one the processes used.
while read -r shape layout library; do
  m=${shape%%x*}; rest=${shape#*x}; n=${rest%%x*}; k=${rest#*x}
  log2() { local v=$1 p=0; while (( v > 1 )); do v=$((v / 2)); p=$((p + 1)); done; echo $p; }
  ta=${layout:0:1}; tb=${layout:1:1}
  key="gemm.f32.t1.$([[ $ta == 1 ]] && echo T || echo N)$([[ $tb == 1 ]] && echo T || echo N).m$(log2 "$m").n$(log2 "$n").k$(log2 "$k")"
  grep -q "^$key $library " "$file" || { echo "FAIL: $key: processes used $library"; exit 1; }
done < "$TEST_TMPDIR/p1.txt"
# A later process measures nothing and chooses the same.
before=$(wc -l < "$file")
"$probe" > "$TEST_TMPDIR/later.txt" && cmp -s "$TEST_TMPDIR/p1.txt" "$TEST_TMPDIR/later.txt" \
  || { echo "FAIL: a later process chose differently"; exit 1; }
[[ $(wc -l < "$file") == "$before" ]] || { echo "FAIL: a later process measured again"; exit 1; }
# Timings taken under one OpenBLAS kernel family do not hold under another: a process whose
# OpenBLAS runs other kernels (OPENBLAS_CORETYPE) keeps its own file.
if grep -q 'openblas=' "$file"; then
  OPENBLAS_CORETYPE=Nehalem "$probe" > /dev/null || { echo "FAIL: the probe under OPENBLAS_CORETYPE=Nehalem"; exit 1; }
  [[ $(ls "$TEST_TMPDIR"/cache/choices-*.txt | wc -l) == 2 ]] \
    || { ls "$TEST_TMPDIR"/cache; echo "FAIL: OPENBLAS_CORETYPE=Nehalem did not get a file of its own"; exit 1; }
fi
# TANDEM_GEMM overrides the file.
TANDEM_GEMM=eigen "$probe" | grep -qv ' eigen$' && { echo "FAIL: TANDEM_GEMM=eigen ignored"; exit 1; }
echo PASS
