// The small training loops the engine tests share: a few steps of an engine on a synthetic token
// source, each step feeding this rank's share of the global batch as the engine's micro-batches
// (forward, cross-entropy, backward, step), as the trainer does; and the plain LibTorch reference
// they are checked against.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "dstrain/comm/backend.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/loss.hpp"

namespace training_loop {

// The synthetic tokens of the tests' small GPT (vocab 64, block 16).
inline std::unique_ptr<ds::data::TokenSource> synthetic_source(int64_t seed = 3) {
  return ds::data::make_token_source(nlohmann::json{{"type", "synthetic"}, {"seed", seed}}, 64, 16);
}

// Runs `steps` steps from the engine's global step on; returns each step's loss: the mean over its
// micro-batches and over the data-parallel ranks.
template <class Model>
std::vector<double> train(ds::Engine<Model>& engine, int64_t steps, const ds::data::TokenSource& source) {
  ds::comm::Backend& group = engine.dp_group();
  const int accumulation = engine.gradient_accumulation_steps();
  std::vector<double> losses;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t step = engine.global_steps();
    double sum = 0;
    for (int a = 0; a < accumulation; ++a) {
      ds::data::Batch batch =
          source.batch(step, a, group.rank(), group.world_size(), engine.train_micro_batch_size_per_gpu());
      at::Tensor loss = ds::models::cross_entropy_loss(engine.forward(batch.inputs), batch.targets);
      engine.backward(loss);
      engine.step();
      sum += loss.item<double>();
    }
    at::Tensor mean = torch::tensor({sum / accumulation}, torch::kDouble);
    group.all_reduce(mean, ds::comm::ReduceOp::Avg);
    losses.push_back(mean.item<double>());
  }
  return losses;
}

template <class Model>
std::vector<double> train(ds::Engine<Model>& engine, int64_t steps) {
  return train(engine, steps, *synthetic_source());
}

// The independent reference: `steps` steps of torch::optim::AdamW on one process over the whole
// global batch of `source`, the gradient norm clipped to max_norm when it is > 0. Returns each
// step's loss; `model` ends holding the trained weights.
template <class Model>
std::vector<double> train_plain_adamw(Model& model, int64_t steps, int64_t global_batch, double lr,
                                      double weight_decay, double max_norm = 0,
                                      const ds::data::TokenSource& source = *synthetic_source()) {
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(lr).weight_decay(weight_decay));
  std::vector<double> losses;
  for (int64_t step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    ds::data::Batch batch = source.batch(step, 0, 0, 1, global_batch);
    at::Tensor loss = ds::models::cross_entropy_loss(model->forward(batch.inputs), batch.targets);
    loss.backward();
    if (max_norm > 0) torch::nn::utils::clip_grad_norm_(model->parameters(), max_norm);
    optimizer.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

}  // namespace training_loop
