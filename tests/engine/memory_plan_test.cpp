// ds::MemoryPlan and ds::MemoryBudget: the GPT's shapes against a built GPT, the cgroup and
// meminfo readers against fake trees written here, the planner's choices against Hugging Face's
// formulas and against the budget it is given.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "dstrain/engine/memory_budget.hpp"
#include "dstrain/engine/memory_plan.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/zero/buffer_sizes.hpp"
#include "dstrain/zero/optimizer_swapper.hpp"
#include "dstrain/zero/param_swapper.hpp"
#include "dstrain/runtime/remove_tree.hpp"

namespace fs = std::filesystem;

namespace {

// A fresh folder under the temp dir, removed at the end of the test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("dstrain_memory_plan_" + name + "_" + std::to_string(::getpid()))) {
    ds::remove_tree(path.string());
    fs::create_directories(path);
  }
  ~TempDir() { ds::remove_tree(path.string()); }
};

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

nlohmann::json gpt_block(int64_t layers, int64_t width) {
  return {{"type", "gpt"}, {"n_layer", layers}, {"n_head", 4}, {"n_embd", width}, {"block_size", 32}, {"vocab_size", 96}};
}

// bench/offload/bigger_than_box.sh's GPT (16 heads, context 64, vocabulary 4096) and the ZeRO block
// of its config: stage 3, both offloads to NVMe, nothing else.
nlohmann::json box_gpt(int64_t layers, int64_t width) {
  return {{"type", "gpt"}, {"n_layer", layers}, {"n_head", 16}, {"n_embd", width}, {"block_size", 64}, {"vocab_size", 4096}};
}
nlohmann::json box_zero() {
  const nlohmann::json nvme = {{"device", "nvme"}, {"nvme_path", "/nonexistent"}};
  return {{"stage", 3}, {"offload_optimizer", nvme}, {"offload_param", nvme}};
}

ds::Config config_with(const nlohmann::json& zero, int world, nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json json = {{"train_micro_batch_size_per_gpu", 2},
                         {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
                         {"zero_optimization", zero},
                         {"dstrain", {{"model", gpt_block(4, 128)}}}};
  json.update(extra);
  ds::Config config = ds::Config::from_json(json);
  config.resolve_batch(world);
  return config;
}

ds::MemoryBudget budget_of(int64_t bytes) {
  ds::MemoryBudget budget;
  budget.node = ds::MemoryLimit{bytes, "test", ""};
  return budget;
}

const ds::ChosenKnob* chosen(const ds::MemoryPlan& plan, const std::string& key) {
  for (const ds::ChosenKnob& knob : plan.chosen)
    if (knob.key == key) return &knob;
  return nullptr;
}

}  // namespace

TEST_CASE("gpt_shape lists the parameters of the built GPT, in its order", "[memory_plan]") {
  for (bool bias : {true, false}) {
    nlohmann::json block = gpt_block(3, 64);
    block["bias"] = bias;
    const ds::models::GPTConfig config = ds::models::GPTConfig::from_json(block);
    ds::models::GPT model(config);
    std::vector<int64_t> built;
    for (const at::Tensor& param : model->parameters()) built.push_back(param.numel());
    const ds::ModelShape shape = ds::gpt_shape(config);
    REQUIRE(shape.numels == built);
    REQUIRE(shape.hidden == 64);
  }
}

TEST_CASE("cgroup_memory_limit takes the lowest limit up the v1 hierarchy", "[memory_budget]") {
  TempDir dir("v1");
  write(dir.path / "self_cgroup", "12:pids:/job\n4:memory:/job/rank\n0::/job\n");
  const fs::path memory = dir.path / "fs" / "memory";
  write(memory / "memory.limit_in_bytes", "9223372036854771712\n");  // the root: unlimited
  write(memory / "job" / "memory.limit_in_bytes", "3000000000\n");
  write(memory / "job" / "rank" / "memory.limit_in_bytes", "9223372036854771712\n");
  ds::MemorySources sources{(dir.path / "self_cgroup").string(), (dir.path / "fs").string(), ""};
  auto limit = ds::cgroup_memory_limit(sources);
  REQUIRE(limit);
  REQUIRE(limit->bytes == 3000000000);
  REQUIRE(limit->source.find((memory / "job").string()) != std::string::npos);

  // A lower limit deeper down wins.
  write(memory / "job" / "rank" / "memory.limit_in_bytes", "1200000000\n");
  limit = ds::cgroup_memory_limit(sources);
  REQUIRE(limit);
  REQUIRE(limit->bytes == 1200000000);

  // Nothing set anywhere: no limit.
  write(memory / "job" / "memory.limit_in_bytes", "9223372036854771712\n");
  write(memory / "job" / "rank" / "memory.limit_in_bytes", "9223372036854771712\n");
  REQUIRE_FALSE(ds::cgroup_memory_limit(sources));
}

TEST_CASE("cgroup_memory_limit reads v2's memory.max, unified or hybrid, and \"max\" is no limit", "[memory_budget]") {
  TempDir dir("v2");
  write(dir.path / "self_cgroup", "0::/user.slice/job/rank\n");
  const fs::path root = dir.path / "fs";
  write(root / "cgroup.controllers", "cpu memory\n");
  write(root / "user.slice" / "memory.max", "max\n");
  write(root / "user.slice" / "job" / "memory.max", "2147483648\n");
  write(root / "user.slice" / "job" / "rank" / "memory.max", "max\n");
  ds::MemorySources sources{(dir.path / "self_cgroup").string(), root.string(), ""};
  auto limit = ds::cgroup_memory_limit(sources);
  REQUIRE(limit);
  REQUIRE(limit->bytes == 2147483648);
  REQUIRE(limit->source.find("memory.max") != std::string::npos);

  write(root / "user.slice" / "job" / "memory.max", "max\n");
  REQUIRE_FALSE(ds::cgroup_memory_limit(sources));

  // Hybrid: v1 controllers beside the unified hierarchy at unified/ (no cgroup.controllers at the root).
  TempDir hybrid("hybrid");
  write(hybrid.path / "self_cgroup", "4:memory:/a\n0::/b\n");
  write(hybrid.path / "fs" / "memory" / "a" / "memory.limit_in_bytes", "5000000000\n");
  write(hybrid.path / "fs" / "unified" / "b" / "memory.max", "4000000000\n");
  limit = ds::cgroup_memory_limit({(hybrid.path / "self_cgroup").string(), (hybrid.path / "fs").string(), ""});
  REQUIRE(limit);
  REQUIRE(limit->bytes == 4000000000);
}

TEST_CASE("cgroup_memory_limit finds a container's group below a mount that hides the path's start", "[memory_budget]") {
  // No cgroup namespace of its own: /proc/self/cgroup names the group from the host's root, the
  // mount starts at the container's group (/docker/c1), and the test's own group is below that.
  TempDir dir("container");
  const fs::path root = dir.path / "fs";
  write(root / "cgroup.controllers", "cpu memory\n");
  write(root / "memory.max", "8000000000\n");  // the container's own limit, at the mount
  write(root / "job" / "memory.max", "400000000\n");
  write(dir.path / "self_cgroup", "0::/docker/c1/job\n");
  auto limit = ds::cgroup_memory_limit({(dir.path / "self_cgroup").string(), root.string(), ""});
  REQUIRE(limit);
  REQUIRE(limit->bytes == 400000000);
  REQUIRE(limit->path == (root / "job" / "memory.max").string());
  // The process in the container's group itself: the mount's limit.
  write(dir.path / "self_cgroup", "0::/docker/c1\n");
  limit = ds::cgroup_memory_limit({(dir.path / "self_cgroup").string(), root.string(), ""});
  REQUIRE(limit);
  REQUIRE(limit->bytes == 8000000000);

  // v1 alike: memory:/docker/c1/job, the memory controller mounted from /docker/c1.
  TempDir v1("container_v1");
  write(v1.path / "self_cgroup", "4:memory:/docker/c1/job\n");
  write(v1.path / "fs" / "memory" / "memory.limit_in_bytes", "8000000000\n");
  write(v1.path / "fs" / "memory" / "job" / "memory.limit_in_bytes", "300000000\n");
  limit = ds::cgroup_memory_limit({(v1.path / "self_cgroup").string(), (v1.path / "fs").string(), ""});
  REQUIRE(limit);
  REQUIRE(limit->bytes == 300000000);
}

TEST_CASE("memory_budget: the tightest of cgroup, MemAvailable and dstrain.memory_limit, per rank", "[memory_budget]") {
  TempDir dir("budget");
  write(dir.path / "self_cgroup", "4:memory:/job\n");
  write(dir.path / "fs" / "memory" / "job" / "memory.limit_in_bytes", "8000000000\n");
  write(dir.path / "meminfo", "MemTotal:       24000000 kB\nMemFree:        1000 kB\nMemAvailable:    6000000 kB\n");
  const ds::MemorySources sources{(dir.path / "self_cgroup").string(), (dir.path / "fs").string(),
                                  (dir.path / "meminfo").string()};
  REQUIRE(ds::mem_available(sources.meminfo) == int64_t{6000000} * 1024);

  ds::MemoryBudget budget = ds::memory_budget(config_with({{"stage", 0}}, 1), 4, sources);
  REQUIRE(budget.node->source.find("MemAvailable") != std::string::npos);
  REQUIRE(budget.per_rank() == int64_t{6000000} * 1024 / 4);

  const ds::Config limited = config_with({{"stage", 0}}, 1, {{"dstrain", {{"memory_limit", "1.5GB"}}}});
  budget = ds::memory_budget(limited, 2, sources);
  REQUIRE(budget.node->source == "dstrain.memory_limit");
  REQUIRE(budget.per_rank() == 750000000);

  write(dir.path / "fs" / "memory" / "job" / "memory.limit_in_bytes", "1000000000\n");
  budget = ds::memory_budget(limited, 2, sources);
  REQUIRE(budget.node->source.find("cgroup") != std::string::npos);
  REQUIRE(budget.per_rank() == 500000000);
}

TEST_CASE("parse_memory_size reads bytes and unit strings, and names the key when it cannot", "[memory_budget]") {
  REQUIRE(ds::parse_memory_size(123456789, "k") == 123456789);
  REQUIRE(ds::parse_memory_size("1.5GB", "k") == 1500000000);
  REQUIRE(ds::parse_memory_size("512MiB", "k") == int64_t{512} << 20);
  REQUIRE(ds::parse_memory_size("2 GiB", "k") == int64_t{2} << 30);
  REQUIRE(ds::parse_memory_size("4096", "k") == 4096);
  for (const nlohmann::json& bad : {nlohmann::json("lots"), nlohmann::json("1.5XB"), nlohmann::json(-5), nlohmann::json(true)}) {
    INFO(bad.dump());
    try {
      ds::parse_memory_size(bad, "dstrain.memory_limit");
      FAIL("accepted");
    } catch (const ds::Error& e) {
      REQUIRE(e.key() == "dstrain.memory_limit");
    }
  }
}

TEST_CASE("the planner starts stage 3 from Hugging Face's sizes and keeps what the user set", "[memory_plan]") {
  const ds::ModelShape shape = ds::gpt_shape(ds::models::GPTConfig::from_json(gpt_block(4, 128)));
  const int64_t d = 128;
  const ds::MemoryBudget ample = budget_of(int64_t{100} << 30);

  ds::MemoryPlan plan = ds::plan_memory(config_with({{"stage", 3}}, 4), shape, 4, ample);
  REQUIRE(chosen(plan, "zero_optimization.reduce_bucket_size")->value == d * d);
  REQUIRE(chosen(plan, "zero_optimization.stage3_prefetch_bucket_size")->value == d * d * 9 / 10);
  REQUIRE(chosen(plan, "zero_optimization.stage3_param_persistence_threshold")->value == 10 * d);
  REQUIRE(plan.zero.reduce_bucket_size == d * d);

  // "auto" is left to the planner; a value is kept.
  plan = ds::plan_memory(config_with({{"stage", 3}, {"reduce_bucket_size", "auto"}, {"stage3_prefetch_bucket_size", 5000}}, 4),
                         shape, 4, ample);
  REQUIRE(chosen(plan, "zero_optimization.reduce_bucket_size")->value == d * d);
  REQUIRE(chosen(plan, "zero_optimization.stage3_prefetch_bucket_size") == nullptr);
  REQUIRE(plan.zero.stage3_prefetch_bucket_size == 5000);

  // Applied, the config carries the chosen values.
  const ds::Config applied = ds::apply_memory_plan(
      config_with({{"stage", 3}, {"reduce_bucket_size", "auto"}, {"stage3_prefetch_bucket_size", 5000}}, 4), plan);
  REQUIRE(applied.zero_optimization().reduce_bucket_size == d * d);
  REQUIRE(applied.zero_optimization().stage3_prefetch_bucket_size == 5000);
  REQUIRE(applied.train_micro_batch_size_per_gpu() == 2);
}

TEST_CASE("the planner shrinks the knobs left unset until the peak fits the budget", "[memory_plan]") {
  const ds::ModelShape shape = ds::gpt_shape(ds::models::GPTConfig::from_json(gpt_block(4, 512)));
  const ds::Config config = config_with({{"stage", 3}}, 4);
  const ds::MemoryPlan roomy = ds::plan_memory(config, shape, 4, budget_of(int64_t{100} << 30));
  // A budget the Hugging Face sizes overshoot, but the knobs at their least fit.
  const ds::MemoryPlan floor = ds::size_memory(
      config_with({{"stage", 3}, {"reduce_bucket_size", 1 << 16}, {"stage3_prefetch_bucket_size", 0},
                   {"stage3_param_persistence_threshold", 0}}, 4),
      shape, 4);
  const int64_t least = floor.peak();
  const int64_t budget = static_cast<int64_t>((least + (roomy.peak() - least) / 3) / ds::kBudgetShare);
  const ds::MemoryPlan tight = ds::plan_memory(config, shape, 4, budget_of(budget));
  REQUIRE(roomy.peak() > budget * ds::kBudgetShare);
  REQUIRE(tight.peak() <= budget * ds::kBudgetShare);
  REQUIRE(tight.budget == budget);
  bool shrunk = false;
  for (const ds::ChosenKnob& knob : tight.chosen) shrunk |= knob.why == "shrunk to fit the budget";
  REQUIRE(shrunk);
}

TEST_CASE("under NVMe offload and a tight budget the planner turns overlap_comm off for the swap, unless it was set",
          "[memory_plan]") {
  // The 1B GPT, 2 ranks under 2 GiB.
  const nlohmann::json model = box_gpt(20, 2048);
  const ds::ModelShape shape = ds::gpt_shape(ds::models::GPTConfig::from_json(model));
  nlohmann::json zero = box_zero();
  const nlohmann::json extra = {{"train_micro_batch_size_per_gpu", 1}, {"dstrain", {{"model", model}}}};
  const int64_t budget = int64_t{1} << 30;  // per rank

  const ds::MemoryPlan planned = ds::plan_memory(config_with(zero, 2, extra), shape, 2, budget_of(budget));
  const ds::ChosenKnob* overlap = chosen(planned, "zero_optimization.overlap_comm");
  REQUIRE(overlap != nullptr);
  CHECK(overlap->value == 0);
  CHECK(!planned.zero.overlap_comm);
  CHECK(planned.peak() <= budget * ds::kBudgetShare);

  // Set by the user, it stays on: the swap's knobs shrink further to make room for its bucket.
  zero["overlap_comm"] = true;
  const ds::MemoryPlan kept = ds::plan_memory(config_with(zero, 2, extra), shape, 2, budget_of(budget));
  CHECK(chosen(kept, "zero_optimization.overlap_comm") == nullptr);
  CHECK(kept.zero.overlap_comm);
  CHECK(kept.peak() > planned.peak());  // every knob at its least: within the budget, not its margin
  CHECK(planned.zero.sub_group_size > kept.zero.sub_group_size);
  CHECK(planned.zero.offload_param.buffer_count > kept.zero.offload_param.buffer_count);

  // With room, nothing shrinks and stage 3 keeps DeepSpeed's default.
  zero.erase("overlap_comm");
  const ds::MemoryPlan roomy = ds::plan_memory(config_with(zero, 2, extra), shape, 2, budget_of(int64_t{64} << 30));
  CHECK(chosen(roomy, "zero_optimization.overlap_comm") == nullptr);
  CHECK(roomy.zero.overlap_comm);
}

TEST_CASE("for the step begun in backward the planner turns pipelining on, unless it was set or cannot act",
          "[memory_plan]") {
  // The reported 300M GPT, 2 ranks under 1.5 GB, only the offload keys set.
  const nlohmann::json model = box_gpt(24, 1024);
  const ds::ModelShape shape = ds::gpt_shape(ds::models::GPTConfig::from_json(model));
  const nlohmann::json zero = box_zero();
  nlohmann::json extra = {{"train_micro_batch_size_per_gpu", 1},
                          {"dstrain", {{"model", model}, {"step_in_backward", true}}}};
  const int64_t budget = int64_t{768} << 20;  // per rank

  const ds::MemoryPlan planned = ds::plan_memory(config_with(zero, 2, extra), shape, 2, budget_of(budget));
  const ds::ChosenKnob* read_ahead = chosen(planned, "zero_optimization.offload_optimizer.pipeline_read");
  REQUIRE(read_ahead != nullptr);
  CHECK(read_ahead->value == 1);
  CHECK(planned.zero.offload_optimizer.pipeline_read);
  const ds::ChosenKnob* write_behind = chosen(planned, "zero_optimization.offload_optimizer.pipeline_write");
  REQUIRE(write_behind != nullptr);
  CHECK(planned.zero.offload_optimizer.pipeline_write);
  // Three slots of 4 files: the buffer count follows, and the plan still fits.
  CHECK(planned.zero.offload_optimizer.buffer_count == 12);
  CHECK(planned.peak() <= budget * ds::kBudgetShare);
  // The plan applied to the config carries it as a bool.
  const ds::Config applied = ds::apply_memory_plan(config_with(zero, 2, extra), planned);
  CHECK(applied.zero_optimization().offload_optimizer.pipeline_read);
  CHECK(applied.zero_optimization().offload_optimizer.pipeline_write);

  // Not asked for (the C++ API's default), set by the user, or ruled out by the config: left alone.
  nlohmann::json off = extra;
  off["dstrain"].erase("step_in_backward");
  CHECK(chosen(ds::plan_memory(config_with(zero, 2, off), shape, 2, budget_of(budget)),
               "zero_optimization.offload_optimizer.pipeline_read") == nullptr);
  nlohmann::json set = zero;
  set["offload_optimizer"]["pipeline_read"] = false;
  const ds::MemoryPlan user = ds::plan_memory(config_with(set, 2, extra), shape, 2, budget_of(budget));
  CHECK(chosen(user, "zero_optimization.offload_optimizer.pipeline_read") == nullptr);
  CHECK(chosen(user, "zero_optimization.offload_optimizer.pipeline_write") == nullptr);
  CHECK(!user.zero.offload_optimizer.pipeline_read);
  nlohmann::json clipped = extra;
  clipped["gradient_clipping"] = 1.0;
  CHECK(chosen(ds::plan_memory(config_with(zero, 2, clipped), shape, 2, budget_of(budget)),
               "zero_optimization.offload_optimizer.pipeline_read") == nullptr);
  ds::ModelShape on_gpu = shape;
  on_gpu.on_gpu = true;
  CHECK(chosen(ds::plan_memory(config_with(zero, 2, extra), on_gpu, 2, budget_of(budget)),
               "zero_optimization.offload_optimizer.pipeline_read") == nullptr);
}

TEST_CASE("a value the user set that cannot fit the budget is an error naming the key", "[memory_plan]") {
  const ds::ModelShape shape = ds::gpt_shape(ds::models::GPTConfig::from_json(gpt_block(4, 512)));
  const ds::Config config = config_with({{"stage", 2}, {"reduce_bucket_size", 500000000}}, 4);
  const ds::MemoryPlan sized = ds::size_memory(config, shape, 4);
  // Room for everything but a bucket the size of the whole model.
  const int64_t budget = sized.peak() - sized.reduce_buckets / 2;
  try {
    ds::plan_memory(config, shape, 4, budget_of(budget));
    FAIL("accepted");
  } catch (const ds::Error& e) {
    REQUIRE(e.key() == "zero_optimization.reduce_bucket_size");
    REQUIRE(std::string(e.what()).find("budget") != std::string::npos);
  }
}

TEST_CASE("the plan's swap buffers are what the swappers allocate", "[memory_plan]") {
  TempDir nvme("swap");
  const ds::ModelShape shape = ds::gpt_shape(ds::models::GPTConfig::from_json(gpt_block(2, 256)));
  const int world = 2;
  const ds::Config config = config_with(
      {{"stage", 3},
       {"offload_optimizer", {{"device", "nvme"}, {"nvme_path", nvme.path.string()}, {"pipeline_read", true}}},
       {"offload_param", {{"device", "nvme"}, {"nvme_path", nvme.path.string()}}}},
      world);
  const ds::MemoryPlan plan = ds::plan_memory(config, shape, world, budget_of(int64_t{100} << 30));
  const ds::ZeroConfig& zero = plan.zero;
  // Master, exp_avg, exp_avg_sq and the gradient, two sub-groups in memory (pipeline_read).
  REQUIRE(zero.offload_optimizer.buffer_count == 8);

  std::vector<ds::zero::ParamSwapper::Chunk> chunks;
  int64_t shard = 0;
  for (int64_t numel : shape.numels) {
    chunks.push_back({shard, (numel + world - 1) / world});
    shard += chunks.back().numel;
  }
  ds::zero::OptimizerSwapper::Options options;
  options.nvme_path = nvme.path.string();
  options.names = {"master", "exp_avg", "exp_avg_sq"};
  options.shard_numel = shard;
  options.sub_group_size = zero.sub_group_size;
  options.buffer_count = zero.offload_optimizer.buffer_count;
  options.pipeline_read = true;
  options.gradients = true;
  const ds::zero::OptimizerSwapper optimizer(options);
  REQUIRE(plan.optimizer_swap_buffers == optimizer.buffer_bytes());
  REQUIRE(plan.gradient_swap_buffers == optimizer.gradient_buffer_bytes());

  ds::zero::ParamSwapper::Options param_options;
  param_options.nvme_path = nvme.path.string();
  param_options.chunks = chunks;
  param_options.buffer_count = zero.offload_param.buffer_count;
  param_options.buffer_size = zero.offload_param.buffer_size;
  param_options.max_in_cpu = zero.offload_param.max_in_cpu;
  const ds::zero::ParamSwapper params(param_options);
  REQUIRE(plan.param_swap_memory == params.memory_bytes());
  REQUIRE(plan.model_state.optimizer == 0);
}

TEST_CASE("stage 0 counts the all-reduce's temporary, as large as the buckets in flight", "[memory_plan]") {
  const ds::ModelShape shape = ds::gpt_shape(ds::models::GPTConfig::from_json(gpt_block(4, 128)));
  int64_t whole = 0, largest = 0;
  for (int64_t numel : shape.numels) whole += numel, largest = std::max(largest, numel);
  // DeepSpeed's default bucket (5e8) holds the whole model: one all-reduce of all of it.
  REQUIRE(ds::size_memory(config_with({{"stage", 0}}, 2), shape, 2).reduce_buckets == 4 * whole);
  // One rank reduces nothing; the buckets are the gradient shard's own slices.
  REQUIRE(ds::size_memory(config_with({{"stage", 0}}, 1), shape, 1).reduce_buckets == 0);
  // Buckets of at least the largest parameter each: one in flight, or two with overlap_comm, each
  // with its temporary; a bucket passes its size by less than one parameter.
  for (bool overlap : {false, true}) {
    const ds::MemoryPlan small = ds::size_memory(
        config_with({{"stage", 0}, {"reduce_bucket_size", largest}, {"overlap_comm", overlap}}, 2), shape, 2);
    const int64_t in_flight = overlap ? 2 : 1;
    REQUIRE(small.reduce_buckets >= in_flight * 4 * largest);
    REQUIRE(small.reduce_buckets < in_flight * 4 * 2 * largest);
  }
}

TEST_CASE("the reducer's bucket buffers: the one packing, those in flight, and the spares kept", "[memory_plan]") {
  // Equal buckets: with two in flight the third buffer is taken before the first is done, and from
  // then on a spare always fits.
  REQUIRE(ds::zero::reduce_buffer_numel({100, 100, 100, 100, 100, 100}, 2) == 300);
  // Waited for at launch: one buffer, reused throughout.
  REQUIRE(ds::zero::reduce_buffer_numel({100, 100, 100, 100}, 0) == 100);
  // Each bucket larger than the last: no spare ever fits, and every one is kept until backward ends.
  REQUIRE(ds::zero::reduce_buffer_numel({100, 200, 300, 400}, 0) == 1000);
  // A small spare is skipped for a large bucket but taken by the next small one.
  REQUIRE(ds::zero::reduce_buffer_numel({100, 400, 100}, 0) == 500);
}
