#!/usr/bin/env bash
# checkpoint_matrix.sh - every ordered pair of the layouts in tests/examples/checkpoint_layouts_test.sh
# (a checkpoint saved under one loaded under the other; bazel test runs a sample of the pairs),
# with optimised builds. Prints one line per pair and the totals.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bazel build -c opt //examples/lm:train_char_lm //tools:checkpoint >&2
work=$(mktemp -d /tmp/checkpoint_matrix.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/run/examples/lm" "$work/run/tools" "$work/tmp"
ln -s "$ROOT/bazel-out/k8-opt/bin/examples/lm/train_char_lm" "$work/run/examples/lm/train_char_lm"
ln -s "$ROOT/bazel-out/k8-opt/bin/tools/checkpoint" "$work/run/tools/checkpoint"
cd "$work/run"
CHECKPOINT_PAIRS=all TEST_TMPDIR="$work/tmp" bash "$ROOT/tests/examples/checkpoint_layouts_test.sh"
