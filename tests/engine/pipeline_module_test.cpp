// A PipelineModule that is not a GPT, against the same model trained by a plain LibTorch loop on one
// process: an MLP whose input projection is tied to its output projection (a TiedLayerSpec at both
// ends), with parameterless activation layers between the linear ones. At 1 stage, 2 stages (ZeRO 0-3,
// with and without activation checkpointing), and at 4 ranks as 2 stages x 2 replicas (ZeRO 0, 3) and
// as 4 stages (ZeRO 0, 2; the tied layers then on stages 0 and 3 only), every step's loss, an evaluation afterwards
// and every final weight, the tied copy on each stage that holds one included, must match the
// reference's. The reference builds each layer after torch::manual_seed(seed + layer index), the
// rule PipelineModule documents, and runs on every rank.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/pipeline_engine.hpp"
#include "dstrain/engine/pipeline_module.hpp"
#include "dstrain/zero/gathered_parameters.hpp"

namespace {

constexpr int64_t kSeed = 7;
constexpr double kLr = 1e-2;
constexpr double kClip = 0.5;
constexpr int kSteps = 6;
constexpr int64_t kGlobalBatch = 16;
constexpr int64_t kIn = 6;
constexpr int64_t kHidden = 12;
constexpr int kMicroBatches = 4;

// Layers: 0 tied "embed" (x W^T), 1 tanh, 2 Linear, 3 tanh, 4 Linear, 5 tied "embed" (h W).
torch::nn::Linear make_embed() { return torch::nn::Linear(torch::nn::LinearOptions(kIn, kHidden).bias(false)); }
torch::nn::Linear make_hidden() { return torch::nn::Linear(kHidden, kHidden); }

ds::PipelineModule mlp_module(const std::string& partition, int checkpoint_interval) {
  auto embed = [] { return torch::nn::AnyModule(make_embed()); };
  auto hidden = [] { return torch::nn::AnyModule(make_hidden()); };
  auto tanh = [] { return torch::nn::AnyModule(torch::nn::Tanh()); };
  auto project_out = [](torch::nn::AnyModule&, const at::Tensor& h, const at::Tensor& weight) {
    return h.matmul(weight);
  };
  auto mse = [](const at::Tensor& output, const at::Tensor& labels) { return (output - labels).pow(2).mean(); };
  return ds::PipelineModule({ds::TiedLayerSpec{"embed", "Linear", embed, "weight", nullptr}, ds::LayerSpec{"Tanh", tanh},
                             ds::LayerSpec{"Linear", hidden}, ds::LayerSpec{"Tanh", tanh},
                             ds::LayerSpec{"Linear", hidden},
                             ds::TiedLayerSpec{"embed", "Linear", embed, "weight", project_out}},
                            mse, partition, checkpoint_interval);
}

ds::Config make_config(int stages, int replicas, int zero_stage) {
  return ds::Config::from_json({
      {"train_batch_size", kGlobalBatch},
      {"gradient_accumulation_steps", kMicroBatches},
      {"train_micro_batch_size_per_gpu", kGlobalBatch / (kMicroBatches * replicas)},
      {"gradient_clipping", kClip},
      {"seed", kSeed},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", kLr}, {"weight_decay", 0.01}}}}},
      // Every parameter partitioned at ZeRO 3, however small.
      {"zero_optimization", {{"stage", zero_stage}, {"stage3_param_persistence_threshold", 0}}},
      {"pipeline", {{"stages", stages}}},
  });
}

// Step `step`'s global batch, in closed form.
ds::data::Batch global_batch(int64_t step) {
  const at::Tensor index = at::arange(kGlobalBatch * kIn, at::kFloat).view({kGlobalBatch, kIn});
  return {(index * 0.37 + 0.11 * step).sin(), (index * 0.23 - 0.07 * step).cos()};
}

struct Reference {
  std::vector<double> losses;
  double eval_loss;
  std::map<std::string, at::Tensor> weights;  // by the pipeline's parameter names
};

Reference reference_run() {
  torch::manual_seed(kSeed + 0);
  torch::nn::Linear embed = make_embed();
  torch::manual_seed(kSeed + 2);
  torch::nn::Linear first = make_hidden();
  torch::manual_seed(kSeed + 4);
  torch::nn::Linear second = make_hidden();
  auto forward = [&](const at::Tensor& x) {
    return second(first(embed(x).tanh()).tanh()).matmul(embed->weight);
  };
  std::vector<at::Tensor> params{embed->weight, first->weight, first->bias, second->weight, second->bias};
  torch::optim::AdamW optimizer(params, torch::optim::AdamWOptions(kLr).weight_decay(0.01));
  Reference reference;
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    const ds::data::Batch batch = global_batch(step);
    at::Tensor loss = (forward(batch.inputs) - batch.targets).pow(2).mean();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(params, kClip);
    optimizer.step();
    reference.losses.push_back(loss.item<double>());
  }
  torch::NoGradGuard no_grad;
  const ds::data::Batch batch = global_batch(kSteps);
  reference.eval_loss = (forward(batch.inputs) - batch.targets).pow(2).mean().item<double>();
  reference.weights = {{"tied_modules.embed.weight", embed->weight}, {"2.weight", first->weight},
                       {"2.bias", first->bias},                      {"4.weight", second->weight},
                       {"4.bias", second->bias}};
  return reference;
}

void require_close(double actual, double expected) { REQUIRE(std::abs(actual - expected) <= 1e-5 * std::abs(expected)); }

}  // namespace

TEST_CASE("a pipelined MLP with a tied input/output layer matches plain LibTorch", "[mpi][pipeline]") {
  auto world = ds::comm::init_distributed("mpi");
  const int world_size = world->world_size();
  const Reference reference = reference_run();
  struct Shape {
    int stages;
    int zero_stage;
    const char* partition;
    int checkpoint_interval;
    ds::pipe::StageBounds bounds;  // of the 6 layers, by the partition method
  };
  // Layer weights by "parameters": 72 0 156 0 156 72; by "type:linear": 1 0 1 0 1 1. Either way the
  // lightest heaviest stage is half, and the earlier stage takes the weightless layer 3 as well.
  std::vector<Shape> shapes;
  // One stage holds both tied layers over one module.
  if (world_size == 1) shapes = {{1, 0, "parameters", 2, {0, 6}}};
  if (world_size == 2)
    shapes = {{2, 0, "parameters", 0, {0, 4, 6}}, {2, 1, "type:linear", 2, {0, 4, 6}},
              {2, 2, "parameters", 0, {0, 4, 6}}, {2, 3, "parameters", 2, {0, 4, 6}}};
  if (world_size == 4)
    shapes = {{2, 0, "parameters", 0, {0, 4, 6}}, {4, 0, "uniform", 1, {0, 2, 4, 5, 6}},
              {2, 3, "parameters", 0, {0, 4, 6}}, {4, 2, "uniform", 1, {0, 2, 4, 5, 6}}};
  for (const Shape& shape : shapes) {
    const int replicas = world_size / shape.stages;
    INFO(shape.stages << " stages x " << replicas << " replicas, ZeRO " << shape.zero_stage << ", partition "
                      << shape.partition << ", rank " << world->rank());
    ds::PipelineEngine engine(mlp_module(shape.partition, shape.checkpoint_interval),
                              make_config(shape.stages, replicas, shape.zero_stage), world);
    REQUIRE(engine.bounds() == shape.bounds);
    const int64_t micro = kGlobalBatch / (kMicroBatches * replicas);
    auto micro_batches = [&](int64_t step) {
      return [&, step](int k) {
        const ds::data::Batch batch = global_batch(step);
        const int64_t row = (k * replicas + engine.grid().replica()) * micro;
        return ds::data::Batch{batch.inputs.narrow(0, row, micro), batch.targets.narrow(0, row, micro)};
      };
    };
    for (int step = 0; step < kSteps; ++step) {
      INFO("step " << step + 1);
      require_close(engine.train_batch(micro_batches(step)), reference.losses[step]);
    }
    require_close(engine.eval_batch(micro_batches(kSteps)), reference.eval_loss);

    const int stage = engine.grid().stage();
    const bool holds_tied = stage == 0 || stage == shape.stages - 1;
    int compared = 0;
    ds::zero::GatheredParameters whole(engine.core().parameter_coordinator());  // ZeRO 3's, whole to read
    for (const auto& item : engine.stage_module().ptr()->named_parameters()) {
      INFO(item.key());
      REQUIRE(reference.weights.count(item.key()) == 1);
      REQUIRE(torch::allclose(item.value(), reference.weights.at(item.key()), 0, 1e-5));
      ++compared;
    }
    int expected = holds_tied ? 1 : 0;
    for (int layer : {2, 4})
      if (shape.bounds[stage] <= layer && layer < shape.bounds[stage + 1]) expected += 2;
    REQUIRE(compared == expected);
  }
}
