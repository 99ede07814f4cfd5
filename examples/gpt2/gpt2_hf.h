// GPT-2's tensors between tandem's model (gpt2_model.h) and Hugging Face's GPT-2 checkpoints
// (transformers' GPT2Model state dict, as model.safetensors holds it), so that a real GPT-2
// checkpoint loads into tandem and tandem's weights and gradients open where GPT-2's do.
//
//   tandem (whole, global name)        Hugging Face                    layout
//   wte/W [rows, C]                    wte.weight [V, C]               the first V rows
//   wpe/W [P, C]                       wpe.weight [P, C]               the same
//   h.<i>/ln1/gamma, beta [C]          h.<i>.ln_1.weight, bias         the same
//   h.<i>/attention/qkv/W [3C, C]      h.<i>.attn.c_attn.weight [C, 3C]  transposed, and regrouped:
//                                      tandem packs each head's q, k, v together (head h at rows
//                                      [3dh, 3dh + 3d)), GPT-2 puts all heads' q, then k, then v
//   h.<i>/attention/qkv/b [3C]         h.<i>.attn.c_attn.bias [3C]     regrouped alike
//   h.<i>/attention/proj/W [C, C]      h.<i>.attn.c_proj.weight        transposed (GPT-2's Conv1D
//                                                                      is x W + b, W [in, out])
//   h.<i>/ln2/gamma, beta              h.<i>.ln_2.weight, bias
//   h.<i>/mlp/fc1/W [4C, C], b         h.<i>.mlp.c_fc.weight [C, 4C], bias      transposed
//   h.<i>/mlp/fc2/W [C, 4C], b         h.<i>.mlp.c_proj.weight [4C, C], bias    transposed
//   ln_f/gamma, beta                   ln_f.weight, bias
// Hugging Face's files may also hold h.<i>.attn.bias and h.<i>.attn.masked_bias (its causal mask
// buffers, not parameters) and lm_head.weight (the tied head, equal to wte.weight): importing
// skips the buffers and checks lm_head.weight against wte.weight.
#pragma once

#include <string>

#include "examples/gpt2/gpt2_model.h"
#include "layers/serializers/npz.h"

namespace tandem::examples {

// tandem's whole tensors (by global name; a leading '/' is ignored) -> Hugging Face's, in
// Hugging Face's order; the padded rows of wte are dropped. Missing or mis-shaped tensors are
// errors naming them.
NamedTensors gpt2_to_hf(const NamedTensors& tandem, const GPT2Config& config);

// Hugging Face's -> tandem's whole tensors (global names, no leading '/'); the padded rows of wte
// are zeros, as the model keeps them. `config` gives the sizes to check and the heads.
NamedTensors gpt2_from_hf(const NamedTensors& hf, const GPT2Config& config);

// The GPT-2 config of a Hugging Face tensor set: vocabulary (wte.weight's rows), context, dim and
// layers from the shapes; heads must be given (the files do not hold it).
GPT2Config gpt2_config_of_hf(const NamedTensors& hf, std::int64_t heads);

}  // namespace tandem::examples
