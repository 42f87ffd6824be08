// The keys and values generation keeps per layer, and the attention of new positions over them:
// what every model's forward_cached (gpt_inference.hpp, llama_inference.hpp) shares.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace ds::models {

struct KVCache {
  std::vector<at::Tensor> keys;    // per layer: [B, kv_heads, length, head_size]
  std::vector<at::Tensor> values;  // the same
  int64_t length() const { return keys.empty() ? 0 : keys.front().size(2); }
};

// Causal attention of t new positions over the cached ones and themselves. q [B, H, t, D]; the new
// keys and values k, v [B, KV, t, D] are appended to `keys` and `values` (undefined when empty;
// [B, KV, length, D] after). KV divides H: with grouped-query attention each key/value head
// serves H / KV query heads, as Hugging Face's repeat_kv. New position first + i (first = length
// - t) sees keys 0 .. first + i. Returns [B, t, H * D], the heads side by side (before the output
// projection).
at::Tensor attend_cached(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& keys,
                         at::Tensor& values);

}  // namespace ds::models
