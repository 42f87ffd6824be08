#include "dstrain/engine/models/llama_blocks.hpp"

#include <torch/torch.h>

#include "dstrain/engine/models/causal_attention.hpp"
#include "dstrain/engine/models/rotary.hpp"
#include "dstrain/zero/module_call.hpp"

namespace ds::models {
namespace {

constexpr double kInitStd = 0.02;  // HF's LlamaConfig.initializer_range

ds::zero::Linear make_linear(int64_t in, int64_t out, at::Generator& init) {
  ds::zero::Linear linear(torch::nn::LinearOptions(in, out).bias(false));
  torch::NoGradGuard no_grad;
  linear->weight.normal_(0.0, kInitStd, init);
  return linear;
}

}  // namespace

at::Tensor repeat_kv(const at::Tensor& x, int64_t kv_heads, int64_t repeats) {
  if (repeats == 1) return x;
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2) / kv_heads;
  return x.view({B, T, kv_heads, 1, D}).expand({B, T, kv_heads, repeats, D}).reshape({B, T, kv_heads * repeats * D});
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& config, at::Generator& init)
    : heads_(config.num_attention_heads), kv_heads_(config.num_key_value_heads) {
  const int64_t C = config.hidden_size, kv_width = config.num_key_value_heads * config.head_dim();
  q_proj = register_module("q_proj", make_linear(C, C, init));
  k_proj = register_module("k_proj", make_linear(C, kv_width, init));
  v_proj = register_module("v_proj", make_linear(C, kv_width, init));
  o_proj = register_module("o_proj", make_linear(C, C, init));
}

at::Tensor LlamaAttentionImpl::forward(const at::Tensor& x, const at::Tensor& rope_cos, const at::Tensor& rope_sin) {
  const RotaryTables rope{rope_cos, rope_sin};
  const at::Tensor q = apply_rotary_(ds::zero::call(q_proj, x), heads_, rope);
  const at::Tensor k = apply_rotary_(ds::zero::call(k_proj, x), kv_heads_, rope);
  const at::Tensor v = ds::zero::call(v_proj, x);
  const int64_t repeats = heads_ / kv_heads_;
  // The attention kernel reads q, k and v side by side, one head each per query head.
  const at::Tensor qkv = torch::cat({q, repeat_kv(k, kv_heads_, repeats), repeat_kv(v, kv_heads_, repeats)}, 2);
  return ds::zero::call(o_proj, causal_attention(qkv, heads_, 0.0, is_training()));
}

LlamaMLPImpl::LlamaMLPImpl(const LlamaConfig& config, at::Generator& init) {
  const int64_t C = config.hidden_size, inner = config.intermediate_size;
  gate_proj = register_module("gate_proj", make_linear(C, inner, init));
  up_proj = register_module("up_proj", make_linear(C, inner, init));
  down_proj = register_module("down_proj", make_linear(inner, C, init));
}

at::Tensor LlamaMLPImpl::forward(const at::Tensor& x) {
  return ds::zero::call(down_proj, torch::silu(ds::zero::call(gate_proj, x)) * ds::zero::call(up_proj, x));
}

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const LlamaConfig& config, at::Generator& init) {
  self_attn = register_module("self_attn", LlamaAttention(config, init));
  mlp = register_module("mlp", LlamaMLP(config, init));
  input_layernorm = register_module("input_layernorm", RMSNorm(config.hidden_size, config.rms_norm_eps));
  post_attention_layernorm =
      register_module("post_attention_layernorm", RMSNorm(config.hidden_size, config.rms_norm_eps));
}

at::Tensor LlamaDecoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& rope_cos,
                                          const at::Tensor& rope_sin) {
  const at::Tensor h = x + ds::zero::call(self_attn, ds::zero::call(input_layernorm, x), rope_cos, rope_sin);
  return h + ds::zero::call(mlp, ds::zero::call(post_attention_layernorm, h));
}

}  // namespace ds::models
