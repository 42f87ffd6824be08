#include "evaluation.hpp"

#include <torch/torch.h>

#include "dstrain/engine/models/loss.hpp"

namespace ds::app {

double validation_loss(const std::function<at::Tensor(const at::Tensor&)>& forward, torch::nn::Module& model,
                       const data::TokenSource& source, int64_t iters, int rank, int world_size,
                       int64_t micro_batch, at::Device device) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  double sum = 0;
  for (int64_t i = 0; i < iters; ++i) {
    const data::Batch batch = source.batch(i, 0, rank, world_size, micro_batch);
    const at::Tensor logits = forward(batch.inputs.to(device));
    sum += models::cross_entropy_loss(logits, batch.targets.to(device)).item<double>();
  }
  model.train(was_training);
  return sum / static_cast<double>(iters);
}

}  // namespace ds::app
