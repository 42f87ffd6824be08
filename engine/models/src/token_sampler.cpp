#include "dstrain/engine/models/token_sampler.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>

#include "dstrain/runtime/error.hpp"

namespace ds::models {

int64_t sample_token(const at::Tensor& logits, const Sampling& sampling, at::Generator& generator) {
  const at::Tensor scores = logits.to(torch::kFloat);
  if (sampling.top_k == 1 || sampling.temperature == 0.0) return scores.argmax().item<int64_t>();
  const int64_t k = sampling.top_k > 0 ? std::min(sampling.top_k, scores.size(0)) : scores.size(0);
  const auto [top, ids] = scores.topk(k);
  const at::Tensor probs = (top / sampling.temperature).softmax(0);
  return ids[at::multinomial(probs, 1, false, generator).item<int64_t>()].item<int64_t>();
}

std::vector<int64_t> sample_sequence(const std::function<at::Tensor(const at::Tensor&)>& forward,
                                     const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                                     const Sampling& sampling, uint64_t seed,
                                     const std::function<void(int64_t)>& on_token) {
  if (prompt.empty()) throw Error("generation needs a prompt of at least one token");
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor input = torch::tensor(prompt, torch::kLong).unsqueeze(0);
  std::vector<int64_t> generated;
  for (int64_t n = 0; n < max_new_tokens; ++n) {
    const at::Tensor logits = forward(input);
    const int64_t token = sample_token(logits[0][-1], sampling, generator);
    generated.push_back(token);
    if (on_token) on_token(token);
    input = torch::tensor({token}, torch::kLong).unsqueeze(0);
  }
  return generated;
}

}  // namespace ds::models
