// The GPT pipeline at ZeRO stages 2 and 3 against a plain LibTorch loop on one process: 2 stages x
// 1 replica (-np 2) and 2 stages x 2 replicas (-np 4), 4 micro-batches per step (so every stage
// accumulates gradients over interleaved forwards and backwards), the tied embedding on the first
// and last stage, clipping by the whole model's norm. Every step's loss and gradient norm, and
// every weight of every stage after the last step, must match the reference's: at stage 2, at
// stage 3 with the stage's parameters held whole through the batch and gathered module by module,
// and with offload_optimizer on the CPU and on NVMe. Then a checkpoint round trip: stopped after 3
// of 6 steps and resumed (at the same ZeRO stage, and at stage 3 from a stage 2 checkpoint), the
// weights equal an uninterrupted run's. The reference runs on every rank. And the memory planner:
// under the pipeline engine it holds a stage's parameters whole when the budget allows.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/engine/memory_plan.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/engine/pipeline_engine.hpp"
#include "dstrain/runtime/remove_tree.hpp"
#include "shared_folder.hpp"

namespace {

constexpr int64_t kSeed = 11;
constexpr double kLr = 3e-3;
constexpr double kWeightDecay = 0.01;
constexpr double kClip = 0.5;
constexpr int kSteps = 6;
constexpr int kGlobalBatch = 16;
constexpr int kMicroBatches = 4;

ds::models::GPTConfig model_config() {
  return ds::models::GPTConfig::from_json(
      {{"n_layer", 2}, {"n_head", 2}, {"n_embd", 32}, {"block_size", 16}, {"vocab_size", 64}, {"dropout", 0.0}});
}

std::unique_ptr<ds::data::TokenSource> make_source() {
  return ds::data::make_token_source(nlohmann::json{{"type", "synthetic"}, {"seed", 5}}, 64, 16);
}

// How a case runs the pipeline's ZeRO stage.
struct Variant {
  const char* name;
  int stage;
  bool per_module = false;        // stage 3: parameters gathered module by module, not held
  const char* offload = nullptr;  // offload_optimizer.device
};

std::string fresh_dir(const std::string& name) { return fresh_shared_folder("dstrain_pipeline_zero_" + name); }

ds::Config make_config(const Variant& variant, int replicas) {
  // Every parameter of this small model partitioned (none persistent); per module, at most two of
  // the largest (the 32 x 128 MLP weights) whole at once, so gathers are per module and prefetched.
  nlohmann::json zero = {{"stage", variant.stage}, {"stage3_param_persistence_threshold", 0}};
  if (variant.per_module) {
    zero["stage3_max_live_parameters"] = 8192;
    zero["stage3_prefetch_bucket_size"] = 4096;
  }
  if (variant.offload) {
    zero["offload_optimizer"] = {{"device", variant.offload}};
    if (std::string(variant.offload) == "nvme") zero["offload_optimizer"]["nvme_path"] = fresh_dir(variant.name);
  }
  return ds::Config::from_json({
      {"train_batch_size", kGlobalBatch},
      {"gradient_accumulation_steps", kMicroBatches},
      {"train_micro_batch_size_per_gpu", kGlobalBatch / (kMicroBatches * replicas)},
      {"gradient_clipping", kClip},
      {"seed", kSeed},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", kLr}, {"weight_decay", kWeightDecay}}}}},
      {"zero_optimization", zero},
      {"pipeline", {{"stages", 2}, {"partition", "parameters"}}},
  });
}

struct Reference {
  std::vector<double> losses;  // per step, on the whole global batch
  std::vector<double> norms;   // the gradient norm before clipping
  std::map<std::string, at::Tensor> weights;
};

// The whole model on one process, one global batch per step.
Reference reference_run(int steps) {
  torch::manual_seed(kSeed);
  ds::models::GPT model(model_config());
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(kLr).weight_decay(kWeightDecay));
  auto source = make_source();
  Reference reference;
  for (int step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    const ds::data::Batch batch = source->batch(step, 0, 0, 1, kGlobalBatch);
    at::Tensor loss = ds::models::cross_entropy_loss(model->forward(batch.inputs), batch.targets);
    loss.backward();
    reference.norms.push_back(torch::nn::utils::clip_grad_norm_(model->parameters(), kClip));
    optimizer.step();
    reference.losses.push_back(loss.item<double>());
  }
  for (const auto& item : model->named_parameters()) reference.weights[item.key()] = item.value().detach().clone();
  return reference;
}

void require_close(double actual, double expected) { REQUIRE(std::abs(actual - expected) <= 1e-5 * std::abs(expected)); }

// Every weight of this stage (the tied embedding on both stages holding it) within 1e-5 of the
// expected, relative, and 1e-5 absolute: the attention's key bias has no true gradient (softmax
// ignores a shift of all scores), so Adam steps it by its rounding noise, which the order of any
// two sums changes (about 2e-6 after 6 steps here).
void require_weights(ds::PipelineEngine& engine, const std::map<std::string, at::Tensor>& expected) {
  const std::map<std::string, at::Tensor> weights = engine.core().consolidated_weights();
  REQUIRE(!weights.empty());
  for (const auto& [name, weight] : weights) {
    INFO(name);
    REQUIRE(expected.count(name) == 1);
    const at::Tensor& want = expected.at(name);
    REQUIRE(weight.sizes() == want.sizes());
    REQUIRE(torch::allclose(weight, want, 1e-5, 1e-5));
  }
}

}  // namespace

TEST_CASE("the GPT pipeline at ZeRO 2 and 3 reproduces a plain LibTorch loop", "[mpi][pipeline]") {
  auto world = ds::comm::init_distributed("mpi");
  const int replicas = world->world_size() / 2;
  const Reference reference = reference_run(kSteps);
  const std::vector<Variant> variants = {{"stage2", 2},
                                         {"stage3_held", 3},
                                         {"stage3_per_module", 3, true},
                                         {"stage2_nvme", 2, false, "nvme"},
                                         {"stage3_nvme", 3, true, "nvme"},
                                         {"stage3_cpu", 3, false, "cpu"}};
  for (const Variant& variant : variants) {
    INFO(variant.name << ", 2 stages x " << replicas << " replicas, rank " << world->rank());
    ds::PipelineEngine engine(model_config(), make_config(variant, replicas), world);
    REQUIRE(engine.core().zero_stage() == variant.stage);
    REQUIRE(engine.core().dp_group().world_size() == replicas);
    auto source = make_source();
    for (int step = 0; step < kSteps; ++step) {
      INFO("step " << step + 1);
      require_close(engine.train_batch(*source), reference.losses[step]);
      require_close(engine.last_grad_norm(), reference.norms[step]);
    }
    REQUIRE(reference.norms.front() > kClip);  // clipping acted, by the whole pipeline's norm
    REQUIRE(engine.global_steps() == kSteps);
    if (variant.stage == 3) {
      // Between batches every parameter is back to this rank's chunk, held or not.
      for (const at::Tensor& param : engine.stage_module().ptr()->parameters())
        REQUIRE(engine.core().param_status(param) == ds::zero::ParamStatus::NotAvailable);
    }
    require_weights(engine, reference.weights);
  }
}

TEST_CASE("a pipeline at ZeRO 2 and 3 resumes from its checkpoints", "[mpi][pipeline]") {
  auto world = ds::comm::init_distributed("mpi");
  const int replicas = world->world_size() / 2;
  const Reference reference = reference_run(kSteps);
  struct Resume {
    Variant saved;
    Variant loaded;
  };
  for (const Resume& resume : {Resume{{"ckpt2", 2}, {"ckpt2", 2}}, Resume{{"ckpt3", 3}, {"ckpt3", 3, true}},
                               Resume{{"ckpt2to3", 2}, {"ckpt2to3", 3}}}) {
    INFO(resume.saved.name << ", ZeRO " << resume.saved.stage << " -> " << resume.loaded.stage << ", rank "
                           << world->rank());
    const std::string dir = fresh_dir(resume.saved.name);
    auto source = make_source();
    {
      ds::PipelineEngine engine(model_config(), make_config(resume.saved, replicas), world);
      for (int step = 0; step < kSteps / 2; ++step) engine.train_batch(*source);
      engine.save_checkpoint(dir);
    }
    ds::PipelineEngine engine(model_config(), make_config(resume.loaded, replicas), world);
    engine.load_checkpoint(dir);
    REQUIRE(engine.global_steps() == kSteps / 2);
    for (int step = kSteps / 2; step < kSteps; ++step) {
      INFO("step " << step + 1);
      require_close(engine.train_batch(*source), reference.losses[step]);
    }
    require_weights(engine, reference.weights);
    world->barrier();
    if (world->rank() == 0) ds::remove_tree(dir);
  }
}

TEST_CASE("under the pipeline the planner keeps a stage's parameters whole when the budget allows", "[pipeline]") {
  // A stage of 3 x 1000 + 10 parameters at ZeRO 3 over 4 replicas: the 10 are persistent; the rest
  // are gathered padded to 4 partitions (1000 is a multiple: 3000 in all).
  ds::ModelShape shape;
  shape.numels = {1000, 10, 1000, 1000};
  auto config = [](bool pipeline) {
    nlohmann::json json = {{"train_batch_size", 8},
                           {"train_micro_batch_size_per_gpu", 1},
                           {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
                           {"zero_optimization",
                            {{"stage", 3}, {"stage3_param_persistence_threshold", 100}, {"stage3_prefetch_bucket_size", 500}}}};
    if (pipeline) json["pipeline"] = {{"stages", 2}};
    return ds::Config::from_json(json);
  };
  auto budget_of = [](int64_t bytes) {
    ds::MemoryBudget budget;
    if (bytes > 0) budget.node = ds::MemoryLimit{bytes, "test", ""};
    return budget;
  };
  // Per module: the two largest in use, the limit adding the prefetch bucket, which no parameter
  // fits, so nothing is counted as prefetched.
  const int64_t held = 3000, in_use = 2000, module_and_prefetch = in_use + 500;

  const ds::MemoryPlan unlimited = ds::plan_memory(config(true), shape, 4, budget_of(0));
  CHECK(unlimited.zero.stage3_max_live_parameters == held);
  CHECK(unlimited.gathered_parameters == 4 * held);

  // A budget below what holding them costs (and above what per-module gathers cost), less margin.
  const int64_t tight = static_cast<int64_t>(static_cast<double>(unlimited.peak() - 4 * 100) / ds::kBudgetShare);
  const ds::MemoryPlan per_module = ds::plan_memory(config(true), shape, 4, budget_of(tight));
  CHECK(per_module.zero.stage3_max_live_parameters == module_and_prefetch);
  CHECK(per_module.gathered_parameters == 4 * in_use);

  // Outside the pipeline the budget plays no part: the module in use and the prefetch.
  const ds::MemoryPlan data_parallel = ds::plan_memory(config(false), shape, 4, budget_of(0));
  CHECK(data_parallel.zero.stage3_max_live_parameters == module_and_prefetch);
}

TEST_CASE("a pipeline stage's planned parameters are those of the GPT slice it builds", "[pipeline]") {
  for (bool bias : {true, false}) {
    nlohmann::json block = {{"n_layer", 3}, {"n_head", 2}, {"n_embd", 16}, {"block_size", 8}, {"vocab_size", 32}, {"bias", bias}};
    const ds::models::GPTConfig gpt = ds::models::GPTConfig::from_json(block);
    const int layers = static_cast<int>(gpt.n_layer) + 2;
    for (const auto& [first, last] : {std::pair{0, 1}, {0, 2}, {1, 4}, {2, layers}, {4, layers}, {0, layers}}) {
      INFO("bias " << bias << ", layers [" << first << ", " << last << ")");
      std::vector<int64_t> planned = ds::gpt_stage_shape(gpt, first, last).numels;
      std::vector<int64_t> built;
      for (const at::Tensor& param : ds::models::GPT(gpt, first, last)->parameters()) built.push_back(param.numel());
      std::sort(planned.begin(), planned.end());
      std::sort(built.begin(), built.end());
      CHECK(planned == built);
    }
  }
}
