// Llama: the built-in Llama decoder, Hugging Face's LlamaForCausalLM, with its parameter names:
//   model.embed_tokens -> model.layers.0 .. model.layers.{L-1} (LlamaDecoderLayer, llama_blocks.hpp)
//   -> model.norm (RMSNorm) -> lm_head (no bias; with tie_word_embeddings, model.embed_tokens.weight)
// Positions enter through RoPE in every attention, not through an embedding.
//
// Pipeline parallelism sees the same model as an ordered list of layers (LlamaConfig::num_layers):
//   layer 0        embedding   tokens [B, T] int64 -> hidden [B, T, C]   model.embed_tokens
//   layers 1..L    model.layers.{i-1}
//   layer L + 1    head        hidden -> logits [B, T, V]              model.norm, lm_head
// Llama(config, first, last) builds the slice [first, last) alone, with the GPT's seeding: one base
// seed drawn from torch's default generator, layer i initialized from a generator seeded base + i,
// so a slice holds the same names and values as those layers have in the whole model built after
// the same torch::manual_seed. With tied embeddings a stage holding the head keeps a copy of
// model.embed_tokens.weight drawn from layer 0's generator (tied_weight()), as the GPT's wte.
// Built while a ds::zero::Init is active (ZeRO stage 3), each piece is partitioned as soon as it
// is built. With config.activation_checkpoint_interval = k > 0, training recomputes each run of k
// consecutive decoder layers in backward (ds::checkpoint).
#pragma once

#include <torch/nn/modules/embedding.h>

#include <vector>

#include "dstrain/engine/models/llama_blocks.hpp"
#include "dstrain/engine/models/llama_config.hpp"
#include "dstrain/engine/models/rms_norm.hpp"
#include "dstrain/engine/models/rotary.hpp"
#include "dstrain/zero/linear.hpp"
#include "dstrain/zero/module.hpp"

namespace ds::models {

class LlamaImpl : public ds::zero::Module {
 public:
  explicit LlamaImpl(const LlamaConfig& config);
  LlamaImpl(const LlamaConfig& config, int64_t first_layer, int64_t last_layer);

  // The whole model: tokens [B, T] int64 (T <= max_position_embeddings) -> logits [B, T, vocab_size].
  // A slice maps its first layer's input to its last layer's output.
  at::Tensor forward(const at::Tensor& input);

  // With tie_word_embeddings: model.embed_tokens.weight if this slice holds layer 0 or the head.
  // Otherwise undefined.
  at::Tensor tied_weight() const;

  const LlamaConfig& config() const { return config_; }
  int64_t first_layer() const { return first_layer_; }
  int64_t last_layer() const { return last_layer_; }  // one past the slice's last layer
  // cos and sin of every position up to max_position_embeddings (not parameters: never saved).
  const RotaryTables& rope() const { return rope_; }

  // Registered under "model" as HF's LlamaModel holds them; null where the slice lacks them.
  torch::nn::Embedding embed_tokens{nullptr};
  std::vector<LlamaDecoderLayer> layers;  // "model.layers.<layer index>"
  RMSNorm norm{nullptr};
  ds::zero::Linear lm_head{nullptr};  // null with tie_word_embeddings

 private:
  at::Tensor embed(const at::Tensor& tokens);
  at::Tensor head(const at::Tensor& hidden);

  LlamaConfig config_;
  int64_t first_layer_;
  int64_t last_layer_;
  RotaryTables rope_;
};
TORCH_MODULE(Llama);

}  // namespace ds::models
