#!/usr/bin/env bash
# Installs missing system packages, then trains the example MLP:
#   scripts/run.sh [args passed to //examples:train_mlp]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

"$ROOT/scripts/setup.sh"
exec bazel run //examples:train_mlp -- "$@"
