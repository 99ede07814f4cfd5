#!/usr/bin/env bash
# Installs missing system packages, then runs the main job: ChainerMN's model-parallel MNIST
# MLP on Fashion-MNIST over 2 MPI ranks (MPICH):
#   scripts/run.sh [args passed to //examples/mnist:train_mnist_model_parallel, e.g. --epoch 3]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

"$ROOT/scripts/setup.sh"
bazel build //examples/mnist:train_mnist_model_parallel
# MPICH's launcher by its own name: plain `mpiexec` may be Open MPI's, which refuses root.
exec /usr/bin/mpiexec.mpich -n 2 "$ROOT/bazel-bin/examples/mnist/train_mnist_model_parallel" "$@"
