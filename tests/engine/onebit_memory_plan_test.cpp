// The memory plan's count of the 1-bit optimizers' state at ZeRO stages 0-2 against the engine's own
// model_state_bytes() after the freeze, and the optimizer's part against the closed form of
// docs/optimizers.md ("ZeRO-1 and ZeRO-2"): 4(2Psi/N + P + P/N) at stages 1-2, 4(2Psi + P + P/N) at
// stage 0 (OneBitAdam; OneBitLamb and ZeroOneAdam hold a third shard tensor and a few doubles).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "dstrain/engine/memory_plan.hpp"
#include "optimizer_reference.hpp"

namespace {

constexpr int kFreeze = 3;

nlohmann::json onebit(const std::string& type) {
  nlohmann::json params = {{"lr", 1e-3}, {"freeze_step", kFreeze}, {"comm_backend_name", "mpi"}};
  if (type == "ZeroOneAdam")
    params = {{"lr", 1e-3}, {"var_freeze_step", 1000}, {"var_update_scaler", 2}, {"comm_backend_name", "mpi"}};
  return {{"type", type}, {"params", params}};
}

ds::Config config_for(const nlohmann::json& optimizer, int stage) {
  ds::Config config = ds::Config::from_json({
      {"train_micro_batch_size_per_gpu", 2},
      {"gradient_accumulation_steps", 1},
      {"optimizer", optimizer},
      {"zero_optimization", {{"stage", stage}, {"reduce_bucket_size", 1 << 30}}},
  });
  config.resolve_batch(ds::comm::get_world_size());
  return config;
}

}  // namespace

TEST_CASE("the memory plan counts the 1-bit optimizers' state as the engine holds it after the freeze",
          "[mpi][onebit][memory_plan]") {
  const int world = ds::comm::get_world_size();
  ds::ModelShape shape;
  for (const at::Tensor& p : optimizer_reference::make_model()->parameters()) shape.numels.push_back(p.numel());
  int64_t psi = 0;
  for (int64_t n : shape.numels) psi += n;
  const int64_t unit = 8 * world;
  const int64_t padded = (psi + unit - 1) / unit * unit;
  for (const std::string type : {"OneBitAdam", "OneBitLamb", "ZeroOneAdam"}) {
    for (int stage : {0, 1, 2}) {
      INFO(type << " at stage " << stage << ", " << world << " ranks");
      const ds::Config config = config_for(onebit(type), stage);
      auto engine = ds::initialize(optimizer_reference::make_model(), config, ds::comm::init_distributed("mpi"));
      // 7 steps: past the freeze, and ZeroOneAdam's next step (8) is a compressed one, whose local
      // gradients the reducer then holds (its variance steps are 1, 2, 4, 6, 10, ...).
      optimizer_reference::train(*engine, 7);
      const ds::ModelStateBytes held = engine->model_state_bytes();
      const ds::MemoryPlan plan = ds::size_memory(config, shape, world);
      CHECK(plan.model_state.parameters == held.parameters);
      CHECK(plan.model_state.gradients == held.gradients);
      CHECK(plan.model_state.optimizer == held.optimizer);
      if (type == "OneBitAdam") {
        int64_t shard = 0;
        for (int64_t n : shape.numels) shard += stage == 0 ? n : (n + world - 1) / world;
        CHECK(plan.model_state.optimizer == 4 * (2 * shard + padded + padded / world));
        // After the freeze the rank holds its whole local gradients, the warm-up's shard freed.
        CHECK(plan.model_state.gradients == (stage == 0 ? 4 * shard : 4 * padded));
      }
    }
  }
}
