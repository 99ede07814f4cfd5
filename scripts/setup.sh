#!/usr/bin/env bash
# Installs (with apt-get) the Debian packages the offline Bazel build needs,
# but only those that are missing. Prints one line and does nothing if all
# are present.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap
  libeigen3-dev
  mpich
  libmpich-dev
  catch2
  zlib1g-dev
  nlohmann-json3-dev  # JSON: the training log, the multi-node snapshot manifest
  libcli11-dev  # the trainers' command-line flags
  libopenblas0-openmp  # fp32/fp64 GEMM (core/cpu/matmul.cc), the OpenMP build of OpenBLAS
  libtcmalloc-minimal4  # malloc and new for tandem's programs (core/BUILD.bazel)
  libdnnl-dev  # oneDNN: JIT GEMM and convolutions (core/cpu/gemm_choice.h, core/cpu/onednn_conv.cc)
  graphviz  # dump_graph (autograd/graph_dump.h): the SVG beside each DOT graph
  iproute2  # scripts/sim_hosts.sh: network namespaces, veth pairs, a bridge, tc (tests/comm:hosts_test)
  gnuplot-nox  # PlotReport (training/extensions/plot_report.h): the PNG and SVG plots of the training curves
  dataset-fashion-mnist
  fortunes  # English text for the character language model (examples/lm, data/text_corpus.h)
  python3-numpy  # tests: .npz files must round-trip with NumPy
  clang lld libclang-rt-14-dev libomp-14-dev  # scripts/fuzz.sh: clang 14, lld, libFuzzer + sanitizer runtimes, OpenMP
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup.sh: all required packages are present (${PACKAGES[*]})."
  exit 0
fi

echo "setup.sh: installing missing packages: ${missing[*]}"
SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
  SUDO=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
