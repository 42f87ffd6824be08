// The choice of the next token from a model's logits: greedy (top_k 1 or temperature 0), or a draw
// from softmax(logits / temperature) restricted to the top_k largest (0: all), from a generator the
// caller seeds, so that one seed always gives one sequence.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ds::models {

struct Sampling {
  double temperature = 1.0;  // >= 0
  int64_t top_k = 0;         // >= 0
};

// logits: [vocab_size]. Returns the chosen token id.
int64_t sample_token(const at::Tensor& logits, const Sampling& sampling, at::Generator& generator);

}  // namespace ds::models
