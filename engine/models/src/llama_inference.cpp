#include "dstrain/engine/models/llama_inference.hpp"

#include <torch/torch.h>

#include <string>

#include "dstrain/runtime/error.hpp"

namespace ds::models {
namespace {

// One layer's attention for the new positions (rope: their rows) against the cached ones and
// themselves: x [B, t, C] (after input_layernorm) -> [B, t, C] (after o_proj).
at::Tensor cached_attention(LlamaAttentionImpl& attn, const at::Tensor& x, const RotaryTables& rope, at::Tensor& keys,
                            at::Tensor& values) {
  const int64_t B = x.size(0), t = x.size(1), C = x.size(2), H = attn.heads(), KV = attn.kv_heads(), D = C / H;
  auto heads = [&](const at::Tensor& part, int64_t n) { return part.view({B, t, n, D}).transpose(1, 2); };
  const at::Tensor q = heads(apply_rotary_(attn.q_proj->forward(x), H, rope), H);
  const at::Tensor k = heads(apply_rotary_(attn.k_proj->forward(x), KV, rope), KV);
  const at::Tensor v = heads(attn.v_proj->forward(x), KV);
  return attn.o_proj->forward(attend_cached(q, k, v, keys, values));
}

}  // namespace

at::Tensor forward_cached(LlamaImpl& model, const at::Tensor& tokens, KVCache& cache) {
  const LlamaConfig& config = model.config();
  if (model.first_layer() != 0 || model.last_layer() != config.num_layers())
    throw Error("generation needs the whole Llama, not a pipeline slice");
  const int64_t first = cache.length(), t = tokens.size(1);
  if (first + t > config.max_position_embeddings)
    throw Error("positions up to " + std::to_string(first + t) + " do not fit the model's max_position_embeddings " +
                std::to_string(config.max_position_embeddings))
        .with_key("dstrain.model.max_position_embeddings");
  torch::NoGradGuard no_grad;
  cache.keys.resize(model.layers.size());
  cache.values.resize(model.layers.size());
  const RotaryTables rope = model.rope().rows(first, t);
  at::Tensor x = model.embed_tokens->forward(tokens);
  for (size_t i = 0; i < model.layers.size(); ++i) {
    LlamaDecoderLayerImpl& layer = *model.layers[i];
    x = x + cached_attention(*layer.self_attn, layer.input_layernorm->forward(x), rope, cache.keys[i], cache.values[i]);
    x = x + layer.mlp->forward(layer.post_attention_layernorm->forward(x));
  }
  const at::Tensor normed = model.norm->forward(x);
  return model.lm_head ? model.lm_head->forward(normed) : torch::linear(normed, model.embed_tokens->weight);
}

std::vector<int64_t> generate(LlamaImpl& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                              const Sampling& sampling, uint64_t seed, const std::function<void(int64_t)>& on_token) {
  KVCache cache;
  return sample_sequence([&](const at::Tensor& tokens) { return forward_cached(model, tokens, cache); }, prompt,
                         max_new_tokens, sampling, seed, on_token);
}

}  // namespace ds::models
