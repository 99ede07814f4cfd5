#!/usr/bin/env bash
# GPT-2 weights through Hugging Face's format and back: a small train_gpt2 run (pp 2, so the tied
# embedding is held twice) saves a checkpoint; gpt2_checkpoint to-hf writes Hugging Face's
# tensors, which the LibTorch reference loads as a GPT-2; from-hf makes a checkpoint again, whose
# model tensors equal the run's bit for bit; train_gpt2 --init-checkpoint starts from it under
# tp 2.
set -uo pipefail
train="$1" convert="$2" checkpoint="$3" reference="$4"
export OMP_NUM_THREADS=1 TANDEM_COMM_TIMEOUT=60
t="$TEST_TMPDIR"
export TANDEM_CACHE_DIR="$t/cache"
command -v bible >/dev/null || { echo "SKIPPED: the King James Bible is not installed (apt-get install bible-kjv bible-kjv-text)"; exit 0; }
fail() { echo "FAIL: $*"; exit 1; }
small=(--layers 2 --dim 64 --heads 4 --context 32 --seq-len 32 --batchsize 4 --eval-interval 100 --val-batches 1
       --progress 0 --sample 0)

timeout 180 /usr/bin/mpiexec.mpich -n 2 "$train" "${small[@]}" --steps 3 --pp 2 --microbatches 2 \
  --checkpoint-interval 3 --checkpoint-dir "$t/run" --out "$t/out" > "$t/train.txt" 2>&1 || { cat "$t/train.txt"; fail "train"; }
"$convert" to-hf "$t/run/step_3" "$t/hf.safetensors" --heads 4 || fail "to-hf"
# The reference reads it as a GPT-2 (and its loss on a batch is finite).
/usr/bin/python3 - "$t" <<'PY' || fail "batch"
import struct, json, sys
t = sys.argv[1]
ids = list(range(0, 32 * 2))
data = b"".join(struct.pack("<i", (i * 7919) % 50257) for i in ids)
header = {"ids": {"dtype": "I32", "shape": [2, 32], "data_offsets": [0, len(data)]},
          "targets": {"dtype": "I32", "shape": [2, 32], "data_offsets": [len(data), 2 * len(data)]}}
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
open(f"{t}/batch.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + data + data)
PY
"$reference" --weights "$t/hf.safetensors" --batch "$t/batch.safetensors" --out "$t/ref.safetensors" --heads 4 \
  --steps 1 > "$t/ref.txt" 2>&1 || { cat "$t/ref.txt"; fail "the reference cannot read the exported GPT-2"; }
grep -q "^loss=" "$t/ref.txt" || { cat "$t/ref.txt"; fail "no loss from the reference"; }
"$convert" from-hf "$t/hf.safetensors" "$t/imported" 0 --heads 4 > "$t/import.txt" || { cat "$t/import.txt"; fail "from-hf"; }
grep -q "2 layers, 64 wide, 4 heads, context 32, vocabulary 50257 (50304 rows)" "$t/import.txt" \
  || { cat "$t/import.txt"; fail "from-hf's sizes"; }
"$checkpoint" compare "$t/run/step_3" "$t/imported/step_0" --prefix model/ || fail "the round trip changed the model"
timeout 180 /usr/bin/mpiexec.mpich -n 2 "$train" "${small[@]}" --steps 1 --tp 2 --init-checkpoint "$t/imported/step_0" \
  --out "$t/init" > "$t/init.txt" 2>&1 || { cat "$t/init.txt"; fail "--init-checkpoint under tp 2"; }
# Errors name the problem.
out="$("$convert" from-hf "$t/batch.safetensors" "$t/bad" 0 2>&1)" && fail "a batch file was taken for a GPT-2"
echo "$out" | grep -q "wte.weight" || { echo "$out"; fail "the error does not name wte.weight"; }
echo PASS
