#!/usr/bin/env bash
# Installs missing system packages, then trains the MNIST MLP on Fashion-MNIST:
#   scripts/run.sh [args passed to //examples/mnist:train_mnist, e.g. --epoch 3]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

"$ROOT/scripts/setup.sh"
exec bazel run //examples/mnist:train_mnist -- "$@"
