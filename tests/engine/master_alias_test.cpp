// At ZeRO stage 0 in fp32 the optimizer's master is the model's own storage: one fp32 buffer that
// every parameter views, stepped in place. In bf16 the master stays a separate fp32 copy.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "training_loop.hpp"

namespace {

constexpr int64_t kSeed = 13;
constexpr double kLr = 3e-3;
constexpr double kWeightDecay = 0.01;
constexpr int kGlobalBatch = 8;  // divisible by the world sizes tested (1, 2)
constexpr int kSteps = 4;

ds::models::GPT make_model() {
  torch::manual_seed(kSeed);
  return ds::models::GPT(ds::models::GPTConfig::from_json(
      {{"n_layer", 2}, {"n_head", 2}, {"n_embd", 32}, {"block_size", 16}, {"vocab_size", 64}, {"dropout", 0.0}}));
}

std::shared_ptr<ds::Engine<ds::models::GPT>> make_engine(bool bf16) {
  const int world = ds::comm::get_world_size();
  nlohmann::json config = {
      {"train_micro_batch_size_per_gpu", kGlobalBatch / world},
      {"gradient_accumulation_steps", 1},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", kLr}, {"weight_decay", kWeightDecay}}}}},
      {"zero_optimization", {{"stage", 0}}},
  };
  if (bf16) config["bf16"] = {{"enabled", true}};
  return ds::initialize(make_model(), ds::Config::from_json(config), ds::comm::init_distributed("mpi"));
}

// The same model trained by plain LibTorch AdamW on one process over the whole global batch.
std::map<std::string, at::Tensor> reference_weights() {
  ds::models::GPT model = make_model();
  training_loop::train_plain_adamw(model, kSteps, kGlobalBatch, kLr, kWeightDecay);
  std::map<std::string, at::Tensor> weights;
  for (const auto& item : model->named_parameters()) weights[item.key()] = item.value().detach().clone();
  return weights;
}

}  // namespace

TEST_CASE("stage 0 in fp32: the parameters are views of the one master buffer", "[mpi][engine]") {
  auto engine = make_engine(/*bf16=*/false);
  training_loop::train(*engine, kSteps);

  const auto params = engine->module()->parameters();
  const at::Storage& storage = params.front().storage();
  const auto* begin = static_cast<const char*>(storage.data());
  const auto* end = begin + storage.nbytes();
  int64_t param_bytes = 0;
  for (const at::Tensor& param : params) {
    const auto* first = static_cast<const char*>(param.data_ptr());
    INFO("parameter at offset " << first - begin << " of " << end - begin);
    REQUIRE(first >= begin);
    REQUIRE(first + param.nbytes() <= end);
    param_bytes += static_cast<int64_t>(param.nbytes());
  }
  // One fp32 copy of the weights, and nothing else counted as parameters.
  REQUIRE(static_cast<int64_t>(storage.nbytes()) == param_bytes);
  REQUIRE(engine->model_state_bytes().parameters == param_bytes);

  // The model trained as plain AdamW would have.
  const auto expected = reference_weights();
  for (const auto& item : engine->module()->named_parameters()) {
    INFO(item.key());
    REQUIRE(torch::allclose(item.value(), expected.at(item.key()), 1e-4, 1e-5));
  }

  // That buffer is the master: a write to a parameter is what the checkpointed weights read.
  {
    at::NoGradGuard no_grad;
    params.front().fill_(0.25);
  }
  const std::string first_name = engine->module()->named_parameters().begin()->key();
  REQUIRE(torch::equal(engine->consolidated_weights().at(first_name), torch::full_like(params.front(), 0.25)));
}

TEST_CASE("stage 0 in bf16 keeps a separate fp32 master", "[mpi][engine]") {
  auto engine = make_engine(/*bf16=*/true);
  training_loop::train(*engine, 1);

  int64_t numel = 0;
  const at::Tensor first = engine->module()->parameters().front();
  for (const at::Tensor& param : engine->module()->parameters()) {
    REQUIRE(param.scalar_type() == at::kBFloat16);
    numel += param.numel();
  }
  // The bf16 weights (2 bytes each) beside an fp32 master (4 bytes each).
  REQUIRE(engine->model_state_bytes().parameters == 6 * numel);
  // The weights the master holds are not the model's: a write to a parameter does not reach them.
  const std::string first_name = engine->module()->named_parameters().begin()->key();
  const at::Tensor before = engine->consolidated_weights().at(first_name);
  {
    at::NoGradGuard no_grad;
    first.fill_(0.25);
  }
  REQUIRE(torch::equal(engine->consolidated_weights().at(first_name), before));
}
