// The GPT pipeline against a plain LibTorch loop on one process: at 2 and 4 stages, and at 2
// stages x 2 replicas, the per-step losses of 20 steps must match the single process's on the same
// global batch; so must an evaluation afterwards. The reference runs on every rank.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/engine/pipeline_engine.hpp"
#include "dstrain/runtime/error.hpp"

namespace {

constexpr int64_t kSeed = 11;
constexpr double kLr = 3e-3;
constexpr double kClip = 0.5;
constexpr int kSteps = 20;
constexpr int kGlobalBatch = 24;

nlohmann::json model_block(int n_layer = 2) {
  return {{"n_layer", n_layer}, {"n_head", 2},      {"n_embd", 32},
          {"block_size", 16},   {"vocab_size", 64}, {"dropout", 0.0}};
}

ds::models::GPTConfig model_config(int n_layer = 2) { return ds::models::GPTConfig::from_json(model_block(n_layer)); }

ds::Config make_config(int stages, int micro_batches, int replicas, int zero_stage, const std::string& partition) {
  return ds::Config::from_json({
      {"train_batch_size", kGlobalBatch},
      {"gradient_accumulation_steps", micro_batches},
      {"train_micro_batch_size_per_gpu", kGlobalBatch / (micro_batches * replicas)},
      {"gradient_clipping", kClip},
      {"seed", kSeed},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", kLr}, {"weight_decay", 0.01}}}}},
      {"zero_optimization", {{"stage", zero_stage}}},
      {"pipeline", {{"stages", stages}, {"partition", partition}}},
  });
}

std::unique_ptr<ds::data::TokenSource> make_source() {
  return ds::data::make_token_source(nlohmann::json{{"type", "synthetic"}, {"seed", 5}}, 64, 16);
}

struct Reference {
  std::vector<double> losses;  // per step, on the whole global batch
  double eval_loss;            // of step kSteps's global batch, after training
};

// The whole model on one process, one global batch per step.
Reference reference_run() {
  torch::manual_seed(kSeed);
  ds::models::GPT model(model_config());
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(kLr).weight_decay(0.01));
  auto source = make_source();
  Reference reference;
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    ds::data::Batch batch = source->batch(step, 0, 0, 1, kGlobalBatch);
    at::Tensor loss = ds::models::cross_entropy_loss(model->forward(batch.inputs), batch.targets);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), kClip);
    optimizer.step();
    reference.losses.push_back(loss.item<double>());
  }
  torch::NoGradGuard no_grad;
  ds::data::Batch batch = source->batch(kSteps, 0, 0, 1, kGlobalBatch);
  reference.eval_loss = ds::models::cross_entropy_loss(model->forward(batch.inputs), batch.targets).item<double>();
  return reference;
}

void require_close(double actual, double expected) {
  REQUIRE(std::abs(actual - expected) <= 1e-5 * std::abs(expected));
}

}  // namespace

TEST_CASE("the GPT pipeline reproduces a plain LibTorch loop", "[mpi][pipeline]") {
  auto world = ds::comm::init_distributed("mpi");
  const int world_size = world->world_size();
  const Reference reference = reference_run();
  struct Shape {
    int stages;
    int zero_stage;
    const char* partition;
  };
  // 2 ranks: 2 stages under ZeRO 0 and 1; 4 ranks: 4 stages, and 2 stages x 2 replicas under ZeRO 0
  // and 1 (each replica then holds half of every gradient, the tied one included).
  std::vector<Shape> shapes;
  if (world_size == 2) shapes = {{2, 0, "parameters"}, {2, 1, "uniform"}};
  if (world_size == 4) shapes = {{4, 0, "uniform"}, {2, 0, "parameters"}, {2, 1, "parameters"}};
  for (const Shape& shape : shapes) {
    const int replicas = world_size / shape.stages;
    const int micro_batches = 4;
    INFO(shape.stages << " stages x " << replicas << " replicas, ZeRO " << shape.zero_stage << ", partition "
                      << shape.partition << ", rank " << world->rank());
    ds::PipelineEngine engine(
        model_config(), make_config(shape.stages, micro_batches, replicas, shape.zero_stage, shape.partition), world);
    REQUIRE(engine.core().gradient_accumulation_steps() == micro_batches);
    REQUIRE(engine.core().dp_group().world_size() == replicas);
    auto source = make_source();
    for (int step = 0; step < kSteps; ++step) {
      INFO("step " << step + 1);
      require_close(engine.train_batch(*source), reference.losses[step]);
    }
    REQUIRE(engine.global_steps() == kSteps);
    require_close(engine.eval_batch(*source, kSteps), reference.eval_loss);
  }
}

TEST_CASE("the stages hold the GPT's layers, cut by pipeline.partition", "[mpi][pipeline]") {
  auto world = ds::comm::init_distributed("mpi");
  const int stages = world->world_size();
  ds::PipelineEngine engine(model_config(), make_config(stages, 2, 1, 0, "uniform"), world);
  const ds::pipe::StageBounds expected = ds::pipe::partition_uniform(model_config().num_layers(), stages);
  REQUIRE(engine.bounds() == expected);
  // The slice's parameters are the whole model's, by name: embedding on the first stage, head on
  // the last, blocks in between.
  torch::manual_seed(kSeed);
  ds::models::GPT whole(model_config());
  const auto whole_params = whole->named_parameters();
  const int stage = engine.grid().stage();
  for (const auto& item : engine.module()->named_parameters()) {
    INFO(item.key());
    const at::Tensor* same = whole_params.find(item.key());
    REQUIRE(same != nullptr);
    CHECK(torch::equal(item.value(), *same));
  }
  CHECK(static_cast<bool>(engine.module()->wpe) == (stage == 0));
  CHECK(static_cast<bool>(engine.module()->ln_f) == (stage == stages - 1));
}

TEST_CASE("pipeline.partition type:<regex> balances the layers of that type", "[mpi][pipeline]") {
  auto world = ds::comm::init_distributed("mpi");
  const int stages = world->world_size();
  // Embedding, four blocks, head; "type:block" weighs the blocks only (ignoring case).
  ds::PipelineEngine engine(model_config(4), make_config(stages, 2, 1, 0, "type:block"), world);
  const ds::pipe::StageBounds expected =
      stages == 2 ? ds::pipe::StageBounds{0, 3, 6} : ds::pipe::StageBounds{0, 2, 3, 4, 6};
  REQUIRE(engine.bounds() == expected);
}

TEST_CASE("unsupported pipeline configs are rejected by name", "[mpi][pipeline]") {
  auto world = ds::comm::init_distributed("mpi");
  const int world_size = world->world_size();
  auto key_of = [&](const ds::Config& config, int n_layer) -> std::string {
    try {
      ds::PipelineEngine engine(model_config(n_layer), config, world);
    } catch (const ds::Error& e) {
      return e.key().value_or("(no key)");
    }
    return "(accepted)";
  };
  CHECK(key_of(make_config(world_size + 1, 1, 1, 0, "uniform"), 2) == "pipeline.stages");
  CHECK(key_of(make_config(2, 2, world_size / 2, 0, "type:transformer"), 2) == "pipeline.partition");
  if (world_size == 4) {
    CHECK(key_of(make_config(4, 2, 1, 0, "parameters"), 1) == "pipeline.stages");  // 3 layers, 4 stages
  }
}
