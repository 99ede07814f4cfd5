#!/usr/bin/env bash
# tandem's GPT-2 against the independent LibTorch reference at the CI size (2 layers, 64 wide,
# 4 heads, context 64, GPT-2's 50,257 tokens padded to 50,304 on tandem's side): logits, loss,
# every gradient and 10 AdamW losses, in f64 (within 1e-10: only the order of sums may differ)
# and in f32 (logits 1e-5, gradients 1e-4, losses 1e-5). examples/gpt2/gpt2_reference_compare.cc
# says how; the 124M comparison is scripts/gpt2_reference_124m.sh.
set -euo pipefail
compare="$1"
reference="$2"
work="${TEST_TMPDIR:-$(mktemp -d)}"
for dtype in f64 f32; do
  echo "== $dtype"
  "$compare" --reference "$reference" --work "$work" --dtype "$dtype" --threads 1
done
