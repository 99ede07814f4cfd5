#!/usr/bin/env bash
# Runs the demo trainer for 3 short epochs; the training loss must fall every epoch, the
# held-out accuracy must beat chance (0.1) clearly, and a bad flag must fail with a message.
set -euo pipefail
bin="examples/train_mlp"
out="$("$bin" --epochs 3 --train-size 10000 --test-size 2000)"
echo "$out"
echo "$out" | awk '
  /^[0-9]+ / { loss[$1] = $2; acc = $4; n = $1 }
  END {
    if (n != 3) { print "expected 3 epochs, got " n; exit 1 }
    for (i = 2; i <= n; i++) if (!(loss[i] < loss[i - 1])) { print "loss did not fall at epoch " i; exit 1 }
    if (!(acc > 0.3)) { print "accuracy " acc " is not above 0.3"; exit 1 }
  }'
if "$bin" --lr nope 2>"$TEST_TMPDIR/err.txt"; then echo "bad flag accepted"; exit 1; fi
grep -q "needs a number" "$TEST_TMPDIR/err.txt"
