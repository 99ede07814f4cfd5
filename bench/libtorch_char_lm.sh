#!/usr/bin/env bash
# libtorch_char_lm.sh - the char LM of examples/lm, exported from a tandem checkpoint to
# safetensors, gives the same logits in an independent LibTorch 1.13 implementation
# (bench/libtorch_char_lm.cpp) within f32 rounding. End to end:
#   1. trains a small model for a few steps with train_char_lm, a sharded checkpoint at the end;
#   2. exports its model tensors with `tools/checkpoint to-safetensors`;
#   3. bench/char_lm_logits loads the checkpoint into a one-stage CharLMStage and writes seeded ids
#      and tandem's f32 logits [B, T, V] (twice: B 4 x T = context, and B 3 x a shorter T, the
#      prefix of the position table that sampling uses);
#   4. libtorch_char_lm (built here with g++ as bench/libtorch_lm.sh builds its anchor) reads the
#      exported weights and the ids, computes the logits in f32 and in f64, and compares.
#
#   bench/libtorch_char_lm.sh            build (bazel -c opt; g++ when stale), train, check
#   WORK=dir                             where the run, the export and the binary go
#                                        (default /tmp/tandem-libtorch-char-lm)
#   CONTEXT=64 DIM=96 HEADS=4 LAYERS=3 ITERATIONS=100   the model and its training
#   TOLERANCE=1e-5                       the largest |tandem - libtorch| over max |logit|
#   SKIP_BAZEL_BUILD=1                   use the bazel-bin binaries as they are
# Needs Debian's libtorch-dev (LibTorch 1.13) and nlohmann-json3-dev:
#   apt-get install -y libtorch-dev nlohmann-json3-dev
#
# The tolerance. Both sides compute in f32 (unit roundoff u = 2^-24 ~ 6e-8) through the same
# operations in different orders (blocked GEMMs, fused softmax and layer norm), so their logits
# differ by rounding alone: LibTorch's own f32 logits differ from its f64 logits of the same weights
# by ~4e-7 of the largest |logit| for the default model (about 7 u: the sums of up to 4 dim terms
# and the layer norms' divisions, over 3 blocks), and tandem's by the same. The check compares the
# larger of |tandem - libtorch f32| and |tandem - libtorch f64| with 1e-5 x max |logit| (~170 u,
# over 20 times the rounding measured), which leaves room for deeper or wider models, yet fails on
# any difference of the model's definition: with the default model, GELU's erf form instead of
# tanh gives ~1.5e-4, a layer-norm eps of 1e-6 instead of 1e-5 ~3e-3, a 1/sqrt(dim) attention
# scale ~0.35, a missing causal mask ~0.6, GPT-2's [q | k | v] packing instead of per head ~1.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
WORK=${WORK:-/tmp/tandem-libtorch-char-lm}
CONTEXT=${CONTEXT:-64}
DIM=${DIM:-96}
HEADS=${HEADS:-4}
LAYERS=${LAYERS:-3}
ITERATIONS=${ITERATIONS:-100}
TOLERANCE=${TOLERANCE:-1e-5}

CXX=${CXX:-g++}
OPT=${OPT:--O2}
CXXFLAGS=${CXXFLAGS:-$OPT -std=c++17 -Wall -Wno-unused-variable}
TORCH_CFLAGS="-I/usr/include/torch/csrc/api/include -D_GLIBCXX_USE_CXX11_ABI=1 -Wno-deprecated-declarations -fopenmp"
TORCH_LIBS="-Wl,--no-as-needed -ltorch -ltorch_cpu -lc10 -Wl,--as-needed -fopenmp"

for header in /usr/include/torch/csrc/api/include/torch/torch.h /usr/include/nlohmann/json.hpp; do
  if [[ ! -f "$header" ]]; then
    echo "libtorch_char_lm.sh: no $header: apt-get install -y libtorch-dev nlohmann-json3-dev" >&2
    exit 1
  fi
done

cd "$ROOT"
if [[ "${SKIP_BAZEL_BUILD:-0}" != 1 ]]; then
  echo "# bazel build -c opt //examples/lm:train_char_lm //tools:checkpoint //bench:char_lm_logits" >&2
  bazel build -c opt //examples/lm:train_char_lm //tools:checkpoint //bench:char_lm_logits >&2
fi
# The opt outputs, whatever configuration the bazel-bin link last pointed at.
BIN="$(bazel info -c opt bazel-bin 2>/dev/null)"

mkdir -p "$WORK"
SRC="$HERE/libtorch_char_lm.cpp"
TORCH_BIN="$WORK/libtorch_char_lm"
if [[ ! -x "$TORCH_BIN" || "$SRC" -nt "$TORCH_BIN" ]]; then
  # shellcheck disable=SC2086
  cmd=($CXX $CXXFLAGS $TORCH_CFLAGS -o "$TORCH_BIN.tmp.$$" "$SRC" $TORCH_LIBS)
  echo "# building: ${cmd[*]}" >&2
  "${cmd[@]}" >&2
  mv -f "$TORCH_BIN.tmp.$$" "$TORCH_BIN"
fi

RUN="$WORK/run"
rm -rf "$RUN"
MODEL=(--context "$CONTEXT" --dim "$DIM" --heads "$HEADS" --layers "$LAYERS")
echo "# training: ${MODEL[*]}, $ITERATIONS iterations" >&2
"$BIN/examples/lm/train_char_lm" "${MODEL[@]}" --batchsize 16 --iterations "$ITERATIONS" \
  --eval-interval "$ITERATIONS" --val-examples 64 --progress 0 --sample-length 0 --final-eval 0 \
  --checkpoint-interval "$ITERATIONS" --seed 3 --out "$RUN" >&2
STEP="$RUN/checkpoints/step_$ITERATIONS"
"$BIN/tools/checkpoint" to-safetensors "$STEP" "$RUN/model.safetensors" >&2

status=0
check() {  # batch length seed
  local out="$RUN/logits_b$1_t$2.safetensors"
  "$BIN/bench/char_lm_logits" --checkpoint "$STEP" "${MODEL[@]}" --batch "$1" --length "$2" --seed "$3" \
    --out "$out" >&2
  "$TORCH_BIN" "$RUN/model.safetensors" "$out" --heads "$HEADS" --tolerance "$TOLERANCE" || status=1
}
check 4 "$CONTEXT" 1
check 3 $(( CONTEXT / 2 + 1 )) 2
exit $status
