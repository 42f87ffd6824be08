// The GPT pipeline on cuda:0 against the same pipeline on the CPU: 2 stages (-np 2, both on the one
// GPU, over MPI, which stages the CUDA activations and gradients through host memory), the tied
// embedding on the first and last stage, 4 micro-batches per step, clipping by the whole model's
// norm, at ZeRO 0, 2 and 3. Built from one seed on the CPU and moved, both start from the same
// weights, and fp32 differs between the devices only in summation order: every step's loss and
// gradient norm within 1e-5 relative, every weight close after the last step.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/pipeline_engine.hpp"

namespace {

constexpr int kSteps = 3;
constexpr int kGlobalBatch = 16;
constexpr int kMicroBatches = 4;
constexpr double kClip = 0.5;

ds::models::GPTConfig model_config() {
  return ds::models::GPTConfig::from_json(
      {{"n_layer", 2}, {"n_head", 2}, {"n_embd", 32}, {"block_size", 16}, {"vocab_size", 64}, {"dropout", 0.0}});
}

ds::Config make_config(int stage) {
  return ds::Config::from_json({
      {"train_batch_size", kGlobalBatch},
      {"gradient_accumulation_steps", kMicroBatches},
      {"train_micro_batch_size_per_gpu", kGlobalBatch / kMicroBatches},
      {"gradient_clipping", kClip},
      {"seed", 11},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"weight_decay", 0.01}}}}},
      {"zero_optimization", {{"stage", stage}, {"stage3_param_persistence_threshold", 0}}},
      {"pipeline", {{"stages", 2}, {"partition", "parameters"}}},
  });
}

struct Run {
  std::vector<double> losses;
  std::vector<double> norms;
  std::map<std::string, at::Tensor> weights;  // this stage's, on the CPU
};

Run train(int stage, at::Device device, const std::shared_ptr<ds::comm::Backend>& world) {
  ds::PipelineEngine engine(model_config(), make_config(stage), world, device);
  REQUIRE(engine.core().zero_stage() == stage);
  for (const at::Tensor& param : engine.stage_module().ptr()->parameters()) REQUIRE(param.device() == device);
  auto source = ds::data::make_token_source(nlohmann::json{{"type", "synthetic"}, {"seed", 5}}, 64, 16);
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    run.losses.push_back(engine.train_batch(*source));
    run.norms.push_back(engine.last_grad_norm());
  }
  for (const auto& [name, weight] : engine.core().consolidated_weights()) run.weights[name] = weight.cpu();
  return run;
}

bool close(double actual, double expected) { return std::abs(actual - expected) <= 1e-5 * std::abs(expected); }

}  // namespace

TEST_CASE("the GPT pipeline on cuda:0 matches the same pipeline on the CPU", "[mpi][gpu][pipeline]") {
  auto world = ds::comm::init_distributed("mpi");
  REQUIRE(world->world_size() == 2);
  const at::Device gpu(at::kCUDA, 0);
  for (int stage : {0, 2, 3}) {
    const Run cpu = train(stage, at::kCPU, world);
    const Run cuda = train(stage, gpu, world);
    REQUIRE(cpu.norms.front() > kClip);  // clipping acted, by the whole pipeline's norm
    REQUIRE(cpu.losses.back() < cpu.losses.front());
    for (int step = 0; step < kSteps; ++step) {
      INFO("ZeRO " << stage << ", rank " << world->rank() << ", step " << step + 1 << ": loss " << cuda.losses[step]
                   << " (GPU) vs " << cpu.losses[step] << " (CPU), norm " << cuda.norms[step] << " vs "
                   << cpu.norms[step]);
      CHECK(close(cuda.losses[step], cpu.losses[step]));
      CHECK(close(cuda.norms[step], cpu.norms[step]));
    }
    // 1e-5 relative, and 1e-4 absolute: the attention's key bias has no true gradient (softmax
    // ignores a shift of all scores), so Adam steps it by rounding noise, which each device's
    // summation order makes differently.
    REQUIRE(cuda.weights.size() == cpu.weights.size());
    REQUIRE(!cpu.weights.empty());
    for (const auto& [name, weight] : cpu.weights) {
      INFO("ZeRO " << stage << ", rank " << world->rank() << ", " << name);
      REQUIRE(cuda.weights.count(name) == 1);
      CHECK(torch::allclose(cuda.weights.at(name), weight, 1e-5, 1e-4));
    }
  }
}
