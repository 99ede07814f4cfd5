#!/usr/bin/env bash
# Installs missing system packages, then runs every test:
#   scripts/test.sh [extra bazel test args, e.g. --config=cuda]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

"$ROOT/scripts/setup.sh"
exec bazel test //... "$@"
