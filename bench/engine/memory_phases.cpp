// Peak RSS per phase of a training step against the memory plan's terms: where a step's memory goes.
// Builds the trainer's GPT (partitioned at stage 3, as the trainer does) under a config like
// configs/default.json, then for each phase (building the engine, and per step forward, backward,
// step) resets VmHWM (clear_refs 5) and prints the largest rank's RSS before, its peak during and
// its RSS after; last, the plan's terms as the engine logged them.
//   mpirun -np 2 build/bench/engine/memory_phases --n-embd 512 --stage 0 [--bf16] [--checkpoint 1]
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/memory_plan.hpp"
#include "dstrain/engine/models/activation_checkpointing.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/zero/init.hpp"

namespace {

int64_t status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  return -1;
}

// Prints the largest rank's RSS before `body`, its peak during it and its RSS after, in MB.
template <class Fn>
void phase(ds::comm::Backend& world, const std::string& name, Fn body) {
  world.barrier();
  std::ofstream("/proc/self/clear_refs") << "5";
  const double before = status_kib("VmRSS") / 1024.0 * 1.048576;
  body();
  at::Tensor figures = at::tensor({before, status_kib("VmHWM") / 1024.0 * 1.048576,
                                   status_kib("VmRSS") / 1024.0 * 1.048576}, at::kDouble);
  world.all_reduce(figures, ds::comm::ReduceOp::Max);
  if (world.rank() == 0)
    std::printf("%-22s before %7.1f  peak %7.1f (+%6.1f)  after %7.1f MB\n", name.c_str(), figures[0].item<double>(),
                figures[1].item<double>(), figures[1].item<double>() - figures[0].item<double>(),
                figures[2].item<double>());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"peak RSS per phase of a training step"};
  int n_embd = 512, n_layer = 8, stage = 0, steps = 2, checkpoint = 0;
  int64_t bucket = 0;
  bool bf16 = false;
  app.add_option("--n-embd", n_embd);
  app.add_option("--n-layer", n_layer);
  app.add_option("--stage", stage);
  app.add_option("--steps", steps);
  app.add_option("--bucket", bucket, "reduce_bucket_size (elements); 0: left to the planner");
  app.add_option("--checkpoint", checkpoint, "activation checkpointing every k blocks; 0: none");
  app.add_flag("--bf16", bf16);
  CLI11_PARSE(app, argc, argv);
  auto world = ds::comm::init_distributed("mpi");
  const nlohmann::json model = {{"type", "gpt"}, {"n_layer", n_layer}, {"n_head", 8},        {"n_embd", n_embd},
                                {"block_size", 64}, {"vocab_size", 256}, {"dropout", 0.0}};
  nlohmann::json json = {{"train_micro_batch_size_per_gpu", 2},
                         {"gradient_accumulation_steps", 1},
                         {"gradient_clipping", 1.0},
                         {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}, {"weight_decay", 0.01}}}}},
                         {"zero_optimization", {{"stage", stage}}},
                         {"bf16", {{"enabled", bf16}}},
                         {"dstrain", {{"model", model}}}};
  if (bucket > 0) json["zero_optimization"]["reduce_bucket_size"] = bucket;
  if (checkpoint > 0) json["pipeline"] = {{"activation_checkpoint_interval", checkpoint}};
  const ds::Config config = ds::Config::from_json(json);
  ds::models::GPTConfig gpt_config = ds::models::GPTConfig::from_json(model);
  gpt_config.activation_checkpoint_interval = ds::activation_checkpoint_interval(config);
  torch::manual_seed(1);
  ds::models::GPT gpt{nullptr};
  phase(*world, "build the model",
        [&] { gpt = ds::zero::build(config, [&] { return ds::models::GPT(gpt_config); }, world); });
  std::shared_ptr<ds::Engine<ds::models::GPT>> engine;
  phase(*world, "build the engine", [&] { engine = ds::initialize(gpt, config, world); });
  for (int s = 1; s <= steps; ++s) {
    at::Tensor x = torch::randint(256, {2, 64}, torch::kLong);
    at::Tensor loss;
    const std::string step = "step " + std::to_string(s) + ": ";
    phase(*world, step + "forward", [&] { loss = ds::models::cross_entropy_loss(engine->forward(x), x); });
    phase(*world, step + "backward", [&] {
      engine->backward(loss);
      loss = at::Tensor();
    });
    phase(*world, step + "optimizer", [&] { engine->step(); });
  }
  const ds::ModelStateBytes bytes = engine->model_state_bytes();
  if (world->rank() == 0)
    std::printf("model state (rank 0): parameters %.1f gradients %.1f optimizer %.1f MB\n", bytes.parameters / 1e6,
                bytes.gradients / 1e6, bytes.optimizer / 1e6);
  ds::comm::finalize();
  return 0;
}
