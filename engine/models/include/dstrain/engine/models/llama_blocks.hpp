// The pieces of a Llama decoder layer, as Hugging Face's modeling_llama names them:
//   LlamaDecoderLayer: x + self_attn(input_layernorm(x)), then x + mlp(post_attention_layernorm(x))
//   LlamaAttention: q_proj, k_proj, v_proj (no biases), RoPE on q and k (rotary.hpp), grouped-query
//     attention (each key/value head serves num_attention_heads / num_key_value_heads consecutive
//     query heads, HF's repeat_kv), causal softmax attention (causal_attention.hpp), o_proj
//   LlamaMLP: down_proj(silu(gate_proj(x)) * up_proj(x)) (SwiGLU)
// Each initializes its weights normal(0, 0.02) from the generator it is given (HF's
// initializer_range), RMSNorm weights 1, so a layer is the same built in the whole model or alone on
// a pipeline stage. For ZeRO stage 3, as the GPT's blocks: the layer, the attention and the MLP are
// ds::zero::Modules and the projections ds::zero::Linear.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/nn/pimpl.h>

#include "dstrain/engine/models/llama_config.hpp"
#include "dstrain/engine/models/rms_norm.hpp"
#include "dstrain/zero/linear.hpp"
#include "dstrain/zero/module.hpp"

namespace ds::models {

class LlamaAttentionImpl : public ds::zero::Module {
 public:
  LlamaAttentionImpl(const LlamaConfig& config, at::Generator& init);
  // x [B, T, hidden] at positions 0 .. T - 1 (rope: their T rows) -> [B, T, hidden].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& rope_cos, const at::Tensor& rope_sin);

  ds::zero::Linear q_proj{nullptr};
  ds::zero::Linear k_proj{nullptr};
  ds::zero::Linear v_proj{nullptr};
  ds::zero::Linear o_proj{nullptr};

  int64_t heads() const { return heads_; }
  int64_t kv_heads() const { return kv_heads_; }

 private:
  int64_t heads_;
  int64_t kv_heads_;
};
TORCH_MODULE(LlamaAttention);

class LlamaMLPImpl : public ds::zero::Module {
 public:
  LlamaMLPImpl(const LlamaConfig& config, at::Generator& init);
  at::Tensor forward(const at::Tensor& x);

  ds::zero::Linear gate_proj{nullptr};
  ds::zero::Linear up_proj{nullptr};
  ds::zero::Linear down_proj{nullptr};
};
TORCH_MODULE(LlamaMLP);

class LlamaDecoderLayerImpl : public ds::zero::Module {
 public:
  LlamaDecoderLayerImpl(const LlamaConfig& config, at::Generator& init);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& rope_cos, const at::Tensor& rope_sin);

  LlamaAttention self_attn{nullptr};
  LlamaMLP mlp{nullptr};
  RMSNorm input_layernorm{nullptr};
  RMSNorm post_attention_layernorm{nullptr};
};
TORCH_MODULE(LlamaDecoderLayer);

// Key/value heads [B, T, kv_heads * D] repeated for the query heads that share them:
// [B, T, kv_heads * repeats * D], head h reading kv head h / repeats.
at::Tensor repeat_kv(const at::Tensor& x, int64_t kv_heads, int64_t repeats);

}  // namespace ds::models
