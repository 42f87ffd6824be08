#include "dstrain/engine/models/token_sampler.hpp"

#include <torch/torch.h>

#include <algorithm>

namespace ds::models {

int64_t sample_token(const at::Tensor& logits, const Sampling& sampling, at::Generator& generator) {
  const at::Tensor scores = logits.to(torch::kFloat);
  if (sampling.top_k == 1 || sampling.temperature == 0.0) return scores.argmax().item<int64_t>();
  const int64_t k = sampling.top_k > 0 ? std::min(sampling.top_k, scores.size(0)) : scores.size(0);
  const auto [top, ids] = scores.topk(k);
  const at::Tensor probs = (top / sampling.temperature).softmax(0);
  return ids[at::multinomial(probs, 1, false, generator).item<int64_t>()].item<int64_t>();
}

}  // namespace ds::models
