// At ZeRO stages 1-3 over several ranks in fp32 the optimizer's master is the model's own storage:
// at stages 1-2 this rank's slices of the one buffer every parameter views, at stage 3 the
// partition itself; stepped in place, the weights end as plain LibTorch AdamW's. In bf16 the master
// is a separate fp32 copy. A checkpoint saved from the slices loads back into them.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/runtime/remove_tree.hpp"
#include "training_loop.hpp"

namespace {

constexpr int64_t kSeed = 17;
constexpr double kLr = 3e-3;
constexpr double kWeightDecay = 0.01;
constexpr int kGlobalBatch = 8;
constexpr int kSteps = 3;

ds::models::GPT make_model() {
  torch::manual_seed(kSeed);
  // Odd sizes (n_embd 33, vocab 65): most parameters' last chunk at 2 ranks ends in padding.
  return ds::models::GPT(ds::models::GPTConfig::from_json(
      {{"n_layer", 2}, {"n_head", 3}, {"n_embd", 33}, {"block_size", 16}, {"vocab_size", 65}, {"dropout", 0.0}}));
}

std::shared_ptr<ds::Engine<ds::models::GPT>> make_engine(int stage, bool bf16) {
  const int world = ds::comm::get_world_size();
  nlohmann::json config = {
      {"train_micro_batch_size_per_gpu", kGlobalBatch / world},
      {"gradient_accumulation_steps", 1},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", kLr}, {"weight_decay", kWeightDecay}}}}},
      {"zero_optimization",
       {{"stage", stage}, {"reduce_bucket_size", 2000}, {"stage3_param_persistence_threshold", 100}}},
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

// Each parameter's element count, by name (stage 3 leaves the engine's parameters empty between uses).
std::map<std::string, int64_t> numels() {
  std::map<std::string, int64_t> counts;
  for (const auto& item : make_model()->named_parameters()) counts[item.key()] = item.value().numel();
  return counts;
}

bool lies_within(const at::Tensor& view, const at::Storage& storage) {
  const auto* begin = static_cast<const char*>(storage.data());
  const auto* first = static_cast<const char*>(view.data_ptr());
  return first >= begin && first + view.nbytes() <= begin + storage.nbytes();
}

}  // namespace

TEST_CASE("fp32 at stages 1-3: the master is the model's own storage", "[mpi][engine]") {
  const int world = ds::comm::get_world_size();
  const int rank = ds::comm::get_rank();
  REQUIRE(world == 2);
  const auto expected = reference_weights();
  const auto numel = numels();
  for (int stage : {1, 2, 3}) {
    DYNAMIC_SECTION("stage " << stage) {
      auto engine = make_engine(stage, /*bf16=*/false);
      training_loop::train(*engine, kSteps);
      const auto named = engine->module()->named_parameters();

      int64_t padded_bytes = 0, shard_offset = 0;
      for (const auto& item : named) {
        INFO(item.key());
        const at::Tensor& param = item.value();
        const int64_t chunk = (numel.at(item.key()) + world - 1) / world;
        const at::Tensor master = engine->master_weights_chunk(param);
        REQUIRE(master.scalar_type() == at::kFloat);
        REQUIRE(master.numel() == chunk);
        if (stage < 3) {
          // This rank's slice of the parameter, where the parameter itself holds it; every
          // parameter padded to world x chunk in one buffer.
          const at::Storage& storage = named.begin()->value().storage();
          REQUIRE(param.storage().is_alias_of(storage));
          REQUIRE(lies_within(master, storage));
          if (rank * chunk < numel.at(item.key()))
            REQUIRE(master.data_ptr<float>() == param.data_ptr<float>() + rank * chunk);
        } else {
          // The partition: the coordinator's chunks, in parameter order.
          const at::Tensor& partition = engine->parameter_coordinator()->shard();
          REQUIRE(master.data_ptr<float>() == partition.data_ptr<float>() + shard_offset);
        }
        padded_bytes += 4 * world * chunk;
        shard_offset += chunk;
      }
      if (stage < 3) {
        REQUIRE(static_cast<int64_t>(named.begin()->value().storage().nbytes()) == padded_bytes);
        REQUIRE(engine->model_state_bytes().parameters == padded_bytes);
      } else {
        REQUIRE(engine->parameter_coordinator()->shard().numel() == shard_offset);
      }

      // Stepped in place, the weights are what plain AdamW makes of the whole batch.
      const auto weights = engine->consolidated_weights();
      for (const auto& item : named) {
        INFO(item.key());
        REQUIRE(torch::allclose(weights.at(item.key()), expected.at(item.key()), 1e-4, 1e-5));
        if (stage < 3) REQUIRE(torch::equal(item.value(), weights.at(item.key())));
      }
    }
  }
}

TEST_CASE("bf16 at stages 1-3 keeps a separate fp32 master", "[mpi][engine]") {
  for (int stage : {1, 2, 3}) {
    DYNAMIC_SECTION("stage " << stage) {
      auto engine = make_engine(stage, /*bf16=*/true);
      training_loop::train(*engine, 1);
      for (const at::Tensor& param : engine->module()->parameters()) {
        REQUIRE(param.scalar_type() == at::kBFloat16);
        const at::Tensor master = engine->master_weights_chunk(param);
        REQUIRE(master.scalar_type() == at::kFloat);
        const at::Storage& model = stage < 3 ? param.storage() : engine->parameter_coordinator()->shard().storage();
        REQUIRE(!master.storage().is_alias_of(model));
        REQUIRE(!lies_within(master, model));
      }
    }
  }
}

TEST_CASE("a checkpoint of the master in the model's slices loads back into them", "[mpi][engine]") {
  const std::string dir = (std::filesystem::temp_directory_path() / "dstrain_master_storage_test").string();
  auto saved = make_engine(2, /*bf16=*/false);
  training_loop::train(*saved, kSteps);
  saved->save_checkpoint(dir, "slices");
  std::map<std::string, at::Tensor> before;
  for (const auto& item : saved->module()->named_parameters()) before[item.key()] = item.value().detach().clone();
  const std::vector<double> next = training_loop::train(*saved, 1);

  auto loaded = make_engine(2, /*bf16=*/false);
  loaded->load_checkpoint(dir, "slices");
  // The whole weights, before any step: the load filled this rank's slices and gathered the others.
  for (const auto& item : loaded->module()->named_parameters()) {
    INFO(item.key());
    REQUIRE(torch::equal(item.value(), before.at(item.key())));
  }
  REQUIRE(training_loop::train(*loaded, 1) == next);
  if (ds::comm::get_rank() == 0) ds::remove_tree(dir);
}
