// dstrain's GPT in Hugging Face's terms (transformers' GPT2LMHeadModel): tensor names, layouts and
// config.json. Torch-free; export (export.hpp) and import (hf_import.hpp) both go through it.
//
//   dstrain                      Hugging Face                                   layout
//   wte.weight, wpe.weight       transformer.wte.weight, transformer.wpe.weight  same
//   h.N.ln_1.weight, ...         transformer.h.N.ln_1.weight, ...                same
//   h.N.attn.c_attn.weight       transformer.h.N.attn.c_attn.weight              transposed: HF's Conv1D
//   (and c_proj, mlp.c_fc,       (likewise)                                      keeps [in, out], a
//    mlp.c_proj weights)                                                         Linear [out, in]
//   ln_f.weight, ln_f.bias       transformer.ln_f.weight, transformer.ln_f.bias  same
//   (tied to wte.weight)         lm_head.weight: not written, transformers ties it on load
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace ds::ckpt {

struct HfTensor {
  std::string name;
  bool transposed = false;  // the 2-D weight is stored as its transpose
};

// The Hugging Face tensor that holds dstrain GPT parameter `name`; a ds::Error naming it when the
// GPT has no such parameter.
HfTensor to_hf_tensor(const std::string& name);
// The dstrain GPT parameter that Hugging Face tensor `name` holds (with or without the
// "transformer." prefix: GPT2Model and GPT2LMHeadModel files both load); an empty name for what
// dstrain keeps nowhere: the tied lm_head.weight and the attention mask buffers (attn.bias,
// attn.masked_bias) of older files.
HfTensor from_hf_tensor(const std::string& name);

// config.json for a dstrain.model block (GPT2LMHeadModel, float32, GELU with the tanh
// approximation, LayerNorm epsilon 1e-5, as the GPT computes). A GPT without biases
// (dstrain.model.bias false) has no GPT-2 equivalent: a ds::Error naming that key.
nlohmann::json hf_config(const nlohmann::json& model_block);

// The dstrain.model sizes of a GPT-2 config.json read from `path`: n_layer, n_head, n_embd,
// block_size (n_positions) and vocab_size. A config of another architecture, activation, inner
// width or with untied embeddings is a ds::Error naming the path and the field.
nlohmann::json model_sizes_from_hf(const nlohmann::json& config, const std::string& path);

}  // namespace ds::ckpt
