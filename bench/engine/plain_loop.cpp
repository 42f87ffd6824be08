// A hand-written LibTorch training loop on dstrain's GPT and data: the engine's overhead peer.
// Prints one JSON line per step: {"step", "loss", "samples_per_sec"}.
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/runtime/config.hpp"

int main(int argc, char** argv) {
  CLI::App app{"plain LibTorch loop on the config's GPT (AdamW, constant lr), one process"};
  std::string config_path;
  int steps = 20;
  app.add_option("--config", config_path, "dstrain config")->required();
  app.add_option("--steps", steps, "steps");
  CLI11_PARSE(app, argc, argv);

  ds::Config config = ds::Config::from_file(config_path);
  config.resolve_batch(1);
  const nlohmann::json& block = config.dstrain_block();
  torch::manual_seed(config.training().seed);
  auto model_config = ds::models::GPTConfig::from_json(block.value("model", nlohmann::json::object()));
  ds::models::GPT model(model_config);
  auto source = ds::data::make_token_source(block.value("data", nlohmann::json()), model_config.vocab_size,
                                            model_config.block_size);
  const auto& opt = config.optimizer();
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(opt.lr)
                                                         .betas({opt.betas[0], opt.betas[1]})
                                                         .eps(opt.eps)
                                                         .weight_decay(opt.weight_decay));
  const int batch = config.train_batch_size();
  for (int step = 0; step < steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    optimizer.zero_grad();
    ds::data::Batch b = source->batch(step, 0, 0, 1, batch);
    at::Tensor loss = ds::models::cross_entropy_loss(model->forward(b.inputs), b.targets);
    loss.backward();
    if (config.training().gradient_clipping > 0)
      torch::nn::utils::clip_grad_norm_(model->parameters(), config.training().gradient_clipping);
    optimizer.step();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("{\"step\": %d, \"loss\": %.6f, \"samples_per_sec\": %.3f}\n", step + 1, loss.item<double>(),
                batch / seconds);
  }
  return 0;
}
