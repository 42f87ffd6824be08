// The memory planner's multi-node defaults: on several nodes overlap_comm and a link-sized
// reduce_bucket_size where the user left them unset, counted in the plan; nothing on one node, and
// never over a value the user gave.
#include <catch2/catch.hpp>

#include "dstrain/engine/memory_budget.hpp"
#include "dstrain/engine/memory_plan.hpp"

namespace {

ds::Config config_with(const nlohmann::json& zero, int world) {
  nlohmann::json json = {{"train_micro_batch_size_per_gpu", 2},
                         {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
                         {"zero_optimization", zero}};
  ds::Config config = ds::Config::from_json(json);
  config.resolve_batch(world);
  return config;
}

const ds::ChosenKnob* chosen(const ds::MemoryPlan& plan, const std::string& key) {
  for (const ds::ChosenKnob& knob : plan.chosen)
    if (knob.key == key) return &knob;
  return nullptr;
}

// 24M elements in 12 parameters of 2M: five buckets of 5e6.
ds::ModelShape model() {
  ds::ModelShape shape;
  shape.numels.assign(12, 2'000'000);
  return shape;
}

const ds::MemoryBudget kUnlimited;

}  // namespace

TEST_CASE("link_bucket_numel: 5e6, a quarter of a smaller model, at least 2^16", "[memory_plan]") {
  CHECK(ds::link_bucket_numel(24'000'000) == 5'000'000);
  CHECK(ds::link_bucket_numel(400'000) == 100'000);
  CHECK(ds::link_bucket_numel(1000) == 65536);
}

TEST_CASE("on several nodes the planner turns overlap_comm on with link-sized buckets", "[memory_plan]") {
  for (int stage : {0, 1, 2}) {
    CAPTURE(stage);
    const ds::Config config = config_with({{"stage", stage}}, 4);
    REQUIRE_FALSE(config.zero_optimization().overlap_comm);  // DeepSpeed's default below stage 3

    const ds::MemoryPlan one_node = ds::plan_memory(config, model(), 4, kUnlimited, false);
    CHECK_FALSE(one_node.zero.overlap_comm);
    CHECK(one_node.zero.reduce_bucket_size == config.zero_optimization().reduce_bucket_size);
    CHECK(chosen(one_node, "zero_optimization.overlap_comm") == nullptr);

    const ds::MemoryPlan nodes = ds::plan_memory(config, model(), 4, kUnlimited, true);
    CHECK(nodes.zero.overlap_comm);
    CHECK(nodes.zero.reduce_bucket_size == 5'000'000);
    REQUIRE(chosen(nodes, "zero_optimization.overlap_comm") != nullptr);
    REQUIRE(chosen(nodes, "zero_optimization.reduce_bucket_size") != nullptr);
    // The plan is the one the engine runs: the same sizes as the config with both keys given.
    const ds::Config applied = ds::apply_memory_plan(config, nodes);
    CHECK(applied.zero_optimization().overlap_comm);
    CHECK(applied.zero_optimization().reduce_bucket_size == 5'000'000);
    const ds::MemoryPlan given =
        ds::size_memory(config_with({{"stage", stage}, {"overlap_comm", true}, {"reduce_bucket_size", 5'000'000}}, 4),
                        model(), 4);
    CHECK(nodes.reduce_buckets == given.reduce_buckets);
    CHECK(nodes.peak() == given.peak());
  }
}

TEST_CASE("the multi-node defaults never override a value the user gave", "[memory_plan]") {
  SECTION("overlap_comm false: kept, and the bucket stays as configured") {
    const ds::MemoryPlan plan = ds::plan_memory(config_with({{"stage", 0}, {"overlap_comm", false}}, 4), model(), 4,
                                                kUnlimited, true);
    CHECK_FALSE(plan.zero.overlap_comm);
    CHECK(plan.zero.reduce_bucket_size == 500'000'000);
    CHECK(plan.chosen.empty());
  }
  SECTION("a bucket size given: kept, overlap_comm still turned on") {
    const ds::MemoryPlan plan = ds::plan_memory(config_with({{"stage", 2}, {"reduce_bucket_size", 123456}}, 4), model(),
                                                4, kUnlimited, true);
    CHECK(plan.zero.overlap_comm);
    CHECK(plan.zero.reduce_bucket_size == 123456);
    CHECK(chosen(plan, "zero_optimization.reduce_bucket_size") == nullptr);
  }
  SECTION("overlap_comm true given: the bucket is chosen for the link, overlap_comm not listed") {
    const ds::MemoryPlan plan = ds::plan_memory(config_with({{"stage", 0}, {"overlap_comm", true}}, 4), model(), 4,
                                                kUnlimited, true);
    CHECK(plan.zero.reduce_bucket_size == 5'000'000);
    CHECK(chosen(plan, "zero_optimization.overlap_comm") == nullptr);
  }
  SECTION("one rank: nothing to reduce, nothing chosen") {
    const ds::MemoryPlan plan = ds::plan_memory(config_with({{"stage", 0}}, 1), model(), 1, kUnlimited, true);
    CHECK_FALSE(plan.zero.overlap_comm);
    CHECK(plan.chosen.empty());
  }
}
