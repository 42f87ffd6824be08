#include "dstrain/engine/models/gpt_inference.hpp"

#include <torch/torch.h>

#include <string>

#include "dstrain/engine/models/gelu.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::models {
namespace {

// One block's attention for the new positions against the cached ones and themselves:
// x [B, t, C] (after ln_1) -> [B, t, C] (after c_proj). Appends the new keys and values.
at::Tensor cached_attention(CausalSelfAttentionImpl& attn, const at::Tensor& x, int64_t n_head, at::Tensor& keys,
                            at::Tensor& values) {
  const int64_t B = x.size(0), t = x.size(1), C = x.size(2), D = C / n_head;
  const std::vector<at::Tensor> qkv = attn.c_attn->forward(x).split(C, 2);
  auto heads = [&](const at::Tensor& part) { return part.view({B, t, n_head, D}).transpose(1, 2); };
  return attn.c_proj->forward(attend_cached(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), keys, values));
}

}  // namespace

at::Tensor forward_cached(GPTImpl& model, const at::Tensor& tokens, KVCache& cache) {
  const GPTConfig& config = model.config();
  if (model.first_layer() != 0 || model.last_layer() != config.num_layers())
    throw Error("generation needs the whole GPT, not a pipeline slice");
  const int64_t first = cache.length(), t = tokens.size(1);
  if (first + t > config.block_size)
    throw Error("positions up to " + std::to_string(first + t) + " do not fit the model's block_size " +
                std::to_string(config.block_size))
        .with_key("dstrain.model.block_size");
  torch::NoGradGuard no_grad;
  cache.keys.resize(model.h.size());
  cache.values.resize(model.h.size());
  const at::Tensor positions = torch::arange(first, first + t, tokens.options());
  at::Tensor x = model.wte->forward(tokens) + model.wpe->forward(positions);
  for (size_t b = 0; b < model.h.size(); ++b) {
    BlockImpl& block = *model.h[b];
    x = x + cached_attention(*block.attn, block.ln_1->forward(x), config.n_head, cache.keys[b], cache.values[b]);
    FeedForwardImpl& mlp = *block.mlp;
    x = x + mlp.c_proj->forward(gelu_tanh(mlp.c_fc->forward(block.ln_2->forward(x))));
  }
  return torch::linear(model.ln_f->forward(x), model.wte->weight);
}

std::vector<int64_t> generate(GPTImpl& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                              const Sampling& sampling, uint64_t seed, const std::function<void(int64_t)>& on_token) {
  KVCache cache;
  return sample_sequence([&](const at::Tensor& tokens) { return forward_cached(model, tokens, cache); }, prompt,
                         max_new_tokens, sampling, seed, on_token);
}

}  // namespace ds::models
