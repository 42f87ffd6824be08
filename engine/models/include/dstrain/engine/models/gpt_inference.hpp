// The GPT's inference path beside its training one: a forward over the new tokens only, each block
// keeping the keys and values of every earlier position (the KV cache), so that generating n tokens
// costs n one-position forwards instead of n forwards over the whole growing sequence. It reads the
// model's parameters with autograd off and never calls the training forward, so training numerics
// are untouched. The model must be whole (loaded from a checkpoint or export; not partitioned by
// ZeRO-3) and complete (not a pipeline slice); dropout is never applied.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/kv_cache.hpp"
#include "dstrain/engine/models/token_sampler.hpp"

namespace ds::models {

// Logits [B, t, vocab_size] of tokens [B, t] (int64) at positions cache.length() .. + t - 1, the
// same as the full forward's last t positions; appends the t positions to `cache`. Throws ds::Error
// naming dstrain.model.block_size when the positions would pass it.
at::Tensor forward_cached(GPTImpl& model, const at::Tensor& tokens, KVCache& cache);

// The prompt (non-empty) through forward_cached once, then one position per new token: returns the
// max_new_tokens tokens chosen by sample_token from a generator seeded with `seed`, each handed to
// on_token as soon as it is chosen. prompt.size() + max_new_tokens - 1 must fit block_size (the
// last token is never fed back).
std::vector<int64_t> generate(GPTImpl& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                              const Sampling& sampling, uint64_t seed,
                              const std::function<void(int64_t)>& on_token = {});

}  // namespace ds::models
