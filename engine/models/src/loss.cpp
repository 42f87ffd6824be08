#include "dstrain/engine/models/loss.hpp"

#include <torch/torch.h>

namespace ds::models {

at::Tensor cross_entropy_loss(const at::Tensor& logits, const at::Tensor& targets) {
  const at::Tensor flat_logits = logits.reshape({-1, logits.size(-1)}).to(torch::kFloat);
  return torch::nn::functional::cross_entropy(flat_logits, targets.reshape({-1}));
}

}  // namespace ds::models
