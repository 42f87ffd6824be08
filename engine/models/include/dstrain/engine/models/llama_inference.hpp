// The Llama's inference path beside its training one, as gpt_inference.hpp is the GPT's: a forward
// over the new tokens only, each decoder layer keeping the RoPE-rotated keys and the values of every
// earlier position (num_key_value_heads heads each: grouped-query attention shrinks the cache by
// num_attention_heads / num_key_value_heads). Autograd off, never the training forward; the model
// must be whole (not partitioned by ZeRO-3) and complete (not a pipeline slice).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "dstrain/engine/models/gpt_inference.hpp"
#include "dstrain/engine/models/llama.hpp"
#include "dstrain/engine/models/token_sampler.hpp"

namespace ds::models {

// Logits [B, t, vocab_size] of tokens [B, t] at positions cache.length() .. + t - 1, the same as the
// full forward's last t positions; appends the t positions to `cache` (keys and values
// [B, num_key_value_heads, length, head_dim]). Throws ds::Error naming
// dstrain.model.max_position_embeddings when the positions would pass it.
at::Tensor forward_cached(LlamaImpl& model, const at::Tensor& tokens, KVCache& cache);

// gpt_inference.hpp's generate, for the Llama (both run token_sampler.hpp's sample_sequence).
std::vector<int64_t> generate(LlamaImpl& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                              const Sampling& sampling, uint64_t seed,
                              const std::function<void(int64_t)>& on_token = {});

}  // namespace ds::models
