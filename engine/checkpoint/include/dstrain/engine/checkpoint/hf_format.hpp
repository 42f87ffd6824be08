// dstrain's models in Hugging Face's terms: tensor names, layouts and config.json. Torch-free;
// export (export.hpp) and import (hf_import.hpp) both go through it. The Llama ("llama") already
// has LlamaForCausalLM's names and layouts (model.embed_tokens.weight, model.layers.N.self_attn.
// q_proj.weight, ..., lm_head.weight unless tied): its tensors map 1:1. The GPT ("gpt") is
// transformers' GPT2LMHeadModel:
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

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ds::ckpt {

struct HfTensor {
  std::string name;
  bool transposed = false;  // the 2-D weight is stored as its transpose
};

// The model type of a dstrain.model block: its "type", "gpt" when absent.
std::string model_type(const nlohmann::json& model_block);

// The Hugging Face tensor that holds parameter `name` of a model of `type`; a ds::Error naming it
// when that model has no such parameter.
HfTensor to_hf_tensor(const std::string& type, const std::string& name);
// The parameter of a model of `type` that Hugging Face tensor `name` holds; an empty name for what
// dstrain keeps nowhere: for the GPT the tied lm_head.weight and the attention mask buffers
// (attn.bias, attn.masked_bias) of older files (names load with or without "transformer."), for the
// Llama the rotary_emb.inv_freq buffers of older files.
HfTensor from_hf_tensor(const std::string& type, const std::string& name);
// How many parameters the model of a dstrain.model block has (each tied weight once).
size_t parameter_count(const nlohmann::json& model_block);

// config.json for a dstrain.model block: GPT2LMHeadModel (float32, GELU's tanh approximation,
// LayerNorm epsilon 1e-5, as the GPT computes; a GPT without biases, dstrain.model.bias false, has
// no GPT-2 equivalent: a ds::Error naming that key), or LlamaForCausalLM (SiLU, no biases).
nlohmann::json hf_config(const nlohmann::json& model_block);

// The dstrain.model block ("type" and sizes) of a config.json read from `path`: GPT-2's n_layer,
// n_head, n_embd, block_size (n_positions) and vocab_size, or a Llama's LlamaConfig keys. A config
// the model does not compute as written (another model_type, activation, inner width, GPT-2 with
// untied embeddings, a Llama with biases or rope_scaling) is a ds::Error naming the path and field.
nlohmann::json model_block_from_hf(const nlohmann::json& config, const std::string& path);

// transformers' default max_shard_size for save_pretrained.
constexpr int64_t kHfMaxShardBytes = 5'000'000'000;

// A size as transformers' max_shard_size reads it: digits and a unit, KB/MB/GB (powers of 1000) or
// KiB/MiB/GiB (of 1024), any case, or bare digits for bytes. "2GB" is 2e9. Anything else, or 0, is a
// ds::Error naming the text.
int64_t parse_shard_size(const std::string& text);

// How transformers' save_pretrained cuts tensors of `bytes` (in their order) into files of at most
// `max_bytes` (its shard_checkpoint): a file ends where the next tensor would take it past the limit,
// so a tensor larger than the limit is alone in its file. Returns the index of each file's first
// tensor (one file: {0}). huggingface_hub's newer split differs only with such a large tensor, which
// it writes in a file of its own ahead of the others; this keeps the order, so the files stream.
std::vector<size_t> shard_starts(const std::vector<int64_t>& bytes, int64_t max_bytes);

// The weights file `shard` (from 0) of `count`: "model.safetensors" alone, else
// "model-00001-of-00003.safetensors", ...
std::string weights_file_name(size_t shard, size_t count);

}  // namespace ds::ckpt
