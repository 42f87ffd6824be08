// The choice of the next token from a model's logits: greedy (top_k 1 or temperature 0), or a draw
// from softmax(logits / temperature) restricted to the top_k largest (0: all), from a generator the
// caller seeds, so that one seed always gives one sequence.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace ds::models {

struct Sampling {
  double temperature = 1.0;  // >= 0
  int64_t top_k = 0;         // >= 0
};

// logits: [vocab_size]. Returns the chosen token id.
int64_t sample_token(const at::Tensor& logits, const Sampling& sampling, at::Generator& generator);

// The decoding loop every model's generate shares: the prompt (non-empty) through `forward` once,
// then one position per new token; returns the max_new_tokens tokens chosen by sample_token from a
// generator seeded with `seed`, each handed to on_token as soon as it is chosen. forward maps
// tokens [1, t] (int64) to logits [1, t, vocab_size] of those positions, continuing a cache.
std::vector<int64_t> sample_sequence(const std::function<at::Tensor(const at::Tensor&)>& forward,
                                     const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                                     const Sampling& sampling, uint64_t seed,
                                     const std::function<void(int64_t)>& on_token);

}  // namespace ds::models
