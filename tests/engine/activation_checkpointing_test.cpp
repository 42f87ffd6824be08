// Activation checkpointing: ds::checkpoint gives the outputs and gradients of calling the function
// directly (dropout included: the recomputation replays the random draws), and the GPT trained with
// checkpointed blocks follows the same losses at ZeRO stages 0 and 3 while its forward keeps less
// than half the activation bytes on a long context.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/models/activation_checkpointing.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/runtime/memory.hpp"
#include "dstrain/zero/init.hpp"

TEST_CASE("ds::checkpoint gives the outputs and gradients of a direct call", "[engine]") {
  torch::manual_seed(11);
  torch::nn::Sequential net(torch::nn::Linear(6, 16), torch::nn::GELU(), torch::nn::Dropout(0.3), torch::nn::Linear(16, 3));
  net->train();
  const at::Tensor input = torch::randn({4, 6});
  auto run = [&](bool checkpointed) {
    net->zero_grad();
    const at::Tensor x = input.clone().requires_grad_(true);
    torch::manual_seed(5);
    at::Tensor y = checkpointed ? ds::checkpoint([&](const at::Tensor& in) { return net->forward(in); }, x)
                                : net->forward(x);
    (y * y).sum().backward();
    std::vector<at::Tensor> results{y.detach(), x.grad()};
    for (const at::Tensor& p : net->parameters()) results.push_back(p.grad().clone());
    return results;
  };
  const auto direct = run(false);
  const auto checkpointed = run(true);
  REQUIRE(direct.size() == checkpointed.size());
  for (size_t i = 0; i < direct.size(); ++i) REQUIRE(torch::equal(direct[i], checkpointed[i]));
}

namespace {

struct Run {
  std::vector<double> losses;
  int64_t activation_bytes = 0;  // the most a forward kept allocated for backward
};

Run train_gpt(int stage, int interval) {
  ds::models::GPTConfig model;
  model.n_layer = 4;
  model.n_head = 2;
  model.n_embd = 64;
  model.block_size = 256;  // a long context: attention scores dominate the activations
  model.vocab_size = 64;
  model.activation_checkpoint_interval = interval;
  const ds::Config config = ds::Config::from_json(
      {{"train_micro_batch_size_per_gpu", 2},
       {"gradient_clipping", 1.0},
       {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
       {"zero_optimization", {{"stage", stage}, {"stage3_param_persistence_threshold", 100}}}});
  torch::manual_seed(1);
  ds::models::GPT gpt = ds::zero::build(config, [&] { return ds::models::GPT(model); });
  auto engine = ds::initialize(gpt, config);
  Run run;
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(100 + step);
    const at::Tensor tokens = torch::randint(model.vocab_size, {2, model.block_size + 1}, torch::kLong);
    const int64_t before = ds::allocated_bytes();
    const at::Tensor logits = engine->forward(tokens.narrow(1, 0, model.block_size));
    const at::Tensor loss = ds::models::cross_entropy_loss(logits, tokens.narrow(1, 1, model.block_size));
    run.activation_bytes = std::max(run.activation_bytes, ds::allocated_bytes() - before);
    engine->backward(loss);
    engine->step();
    run.losses.push_back(loss.item<double>());
  }
  return run;
}

}  // namespace

TEST_CASE("GPT with checkpointed blocks: same losses, under half the activation bytes", "[mpi][engine]") {
  for (int stage : {0, 3}) {
    CAPTURE(stage);
    const Run plain = train_gpt(stage, 0);
    const Run checkpointed = train_gpt(stage, 1);
    REQUIRE(checkpointed.losses == plain.losses);
    REQUIRE(checkpointed.activation_bytes * 2 <= plain.activation_bytes);
  }
}
