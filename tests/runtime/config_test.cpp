// ds::Config against DeepSpeed's documented keys, defaults and batch rule. Expected values come
// from DeepSpeed's config docs and source (docs/_pages/config-json.md, runtime/zero/config.py,
// runtime/config.py) or from the JSON files read independently, never from the parser's output.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/error.hpp"

using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

const std::string kConfigs = DSTRAIN_SOURCE_DIR "/configs/";

// The smallest valid config, plus `extra` merged on top.
json with(const json& extra) {
  json config = {{"train_batch_size", 8}};
  config.merge_patch(extra);
  return config;
}

// The message of the ds::Error that reading `config` throws.
std::string error_message(const json& config) {
  try {
    ds::Config::from_json(config);
  } catch (const ds::Error& e) {
    return e.what();
  }
  return "(no ds::Error thrown)";
}

// The ds::Error that `action` throws; a test failure when it throws none.
template <class F>
ds::Error thrown_by(F&& action) {
  try {
    action();
  } catch (const ds::Error& e) {
    return e;
  }
  FAIL("no ds::Error thrown");
  return ds::Error("unreachable");
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  return json::parse(in);
}

std::string write_temp_file(const std::string& name, const std::string& text) {
  std::string path = "/tmp/dstrain_config_test_" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("A config without optional keys has DeepSpeed's defaults", "[config]") {
  ds::Config config = ds::Config::from_json(with(json::object()));
  CHECK(config.warnings().empty());
  CHECK(config.training().steps_per_print == 10);
  CHECK(config.training().gradient_clipping == 0.0);
  CHECK_FALSE(config.training().wall_clock_breakdown);
  CHECK(config.training().gradient_predivide_factor == 1.0);
  CHECK(config.optimizer().type == ds::OptimizerType::None);
  CHECK(config.scheduler().type == ds::SchedulerType::None);

  const ds::Fp16Config& fp16 = config.fp16();
  CHECK_FALSE(fp16.enabled);
  CHECK(fp16.loss_scale == 0.0);
  CHECK(fp16.initial_scale_power == 16);
  CHECK(fp16.loss_scale_window == 1000);
  CHECK(fp16.hysteresis == 2);
  CHECK_FALSE(fp16.consecutive_hysteresis);
  CHECK(fp16.min_loss_scale == 1.0);
  CHECK_FALSE(config.bf16().enabled);

  const ds::ZeroConfig& zero = config.zero_optimization();
  CHECK(zero.stage == 0);
  CHECK(zero.contiguous_gradients);
  CHECK(zero.reduce_scatter);
  CHECK(zero.reduce_bucket_size == 500000000);
  CHECK(zero.allgather_partitions);
  CHECK(zero.allgather_bucket_size == 500000000);
  CHECK_FALSE(zero.overlap_comm);
  CHECK(zero.load_from_fp32_weights);
  CHECK(zero.sub_group_size == 1000000000);
  CHECK(zero.stage3_prefetch_bucket_size == 50000000);
  CHECK(zero.stage3_param_persistence_threshold == 100000);
  CHECK(zero.stage3_model_persistence_threshold == std::numeric_limits<int64_t>::max());
  CHECK(zero.stage3_max_live_parameters == 1000000000);
  CHECK(zero.stage3_max_reuse_distance == 1000000000);
  CHECK_FALSE(zero.stage3_gather_16bit_weights_on_model_save);
  CHECK(zero.ignore_unused_parameters);
  CHECK(zero.zero_hpz_partition_size == 1);
  CHECK(zero.mics_shard_size == -1);
  CHECK(zero.offload_param.device == ds::OffloadDevice::None);
  CHECK(zero.offload_param.buffer_count == 5);
  CHECK(zero.offload_param.buffer_size == 100000000);
  CHECK(zero.offload_param.max_in_cpu == 1000000000);
  CHECK(zero.offload_optimizer.device == ds::OffloadDevice::None);
  CHECK(zero.offload_optimizer.buffer_count == 4);
  CHECK(zero.offload_optimizer.ratio == 1.0);

  const ds::AioConfig& aio = config.aio();
  CHECK(aio.block_size == 1048576);
  CHECK(aio.queue_depth == 8);
  CHECK(aio.intra_op_parallelism == 1);
  CHECK_FALSE(aio.single_submit);
  CHECK(aio.overlap_events);
  CHECK_FALSE(aio.use_gds);

  const ds::PipelineConfig& pipeline = config.pipeline();
  CHECK_FALSE(pipeline.stages.has_value());
  CHECK(pipeline.partition == "best");
  CHECK_FALSE(pipeline.seed_layers);
  CHECK(pipeline.activation_checkpoint_interval == 0);
  CHECK(pipeline.pipe_partitioned);
  CHECK(pipeline.grad_partitioned);

  CHECK(config.dstrain_block() == json::object());
}

TEST_CASE("A full DeepSpeed ZeRO-3 offload config loads unchanged and without warnings", "[config]") {
  const std::string path = kConfigs + "deepspeed_reference.json";
  json file = read_json(path);
  ds::Config config = ds::Config::from_file(path);
  CHECK(config.warnings().empty());

  config.resolve_batch(8);  // 64 == 4 * 2 * 8
  CHECK(config.train_batch_size() == file["train_batch_size"].get<int>());
  CHECK(config.train_micro_batch_size_per_gpu() == file["train_micro_batch_size_per_gpu"].get<int>());
  CHECK(config.gradient_accumulation_steps() == file["gradient_accumulation_steps"].get<int>());
  CHECK(config.training().gradient_clipping == file["gradient_clipping"].get<double>());

  const json& optimizer = file["optimizer"]["params"];
  CHECK(config.optimizer().type == ds::OptimizerType::AdamW);
  CHECK(config.optimizer().lr == optimizer["lr"].get<double>());
  CHECK(config.optimizer().betas[1] == optimizer["betas"][1].get<double>());
  CHECK(config.optimizer().weight_decay == optimizer["weight_decay"].get<double>());

  const json& scheduler = file["scheduler"]["params"];
  CHECK(config.scheduler().type == ds::SchedulerType::WarmupDecayLR);
  CHECK(config.scheduler().warmup_max_lr == scheduler["warmup_max_lr"].get<double>());
  CHECK(config.scheduler().total_num_steps == scheduler["total_num_steps"].get<int64_t>());
  CHECK(config.scheduler().warmup_type == scheduler["warmup_type"].get<std::string>());

  CHECK(config.fp16().enabled);
  const json& zero = file["zero_optimization"];
  CHECK(config.zero_optimization().stage == 3);
  CHECK(config.zero_optimization().reduce_bucket_size == static_cast<int64_t>(zero["reduce_bucket_size"].get<double>()));
  CHECK(config.zero_optimization().offload_param.device == ds::OffloadDevice::Nvme);
  CHECK(config.zero_optimization().offload_param.nvme_path == zero["offload_param"]["nvme_path"].get<std::string>());
  CHECK(config.zero_optimization().offload_optimizer.device == ds::OffloadDevice::Nvme);
  CHECK(config.zero_optimization().offload_optimizer.pin_memory);
  CHECK(config.aio().intra_op_parallelism == file["aio"]["thread_count"].get<int>());
  CHECK(config.untyped()["activation_checkpointing"] == file["activation_checkpointing"]);
  CHECK(config.untyped()["tensorboard"] == file["tensorboard"]);
}

TEST_CASE("The quick-start config loads with its dstrain block", "[config]") {
  const std::string path = kConfigs + "default.json";
  json file = read_json(path);
  ds::Config config = ds::Config::from_file(path);
  CHECK(config.warnings().empty());
  config.resolve_batch(1);
  CHECK(config.train_batch_size() == 8);
  CHECK(config.optimizer().type == ds::OptimizerType::AdamW);
  CHECK(config.scheduler().type == ds::SchedulerType::WarmupDecayLR);
  CHECK(config.training().seed == 1234);
  CHECK(config.dstrain_block() == file["dstrain"]);
}

TEST_CASE("An unknown key is one warning naming it, at every level", "[config]") {
  ds::Config top = ds::Config::from_json(with({{"train_batch_sise", 8}}));
  REQUIRE(top.warnings().size() == 1);
  CHECK_THAT(top.warnings()[0], Contains("unknown key 'train_batch_sise'"));

  ds::Config aio = ds::Config::from_json(with({{"aio", {{"block_size", 4096}, {"io_backend", "x"}}}}));
  REQUIRE(aio.warnings().size() == 1);
  CHECK_THAT(aio.warnings()[0], Contains("unknown key 'aio.io_backend'"));
}

TEST_CASE("An unknown key is an error in the blocks DeepSpeed refuses extra keys in", "[config]") {
  // DeepSpeed v0.19.5: pydantic models with extra="forbid" (zero, its offload blocks, fp16, bf16),
  // and constructors without **kwargs (the optimizer's and the scheduler's params).
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"zero_optimization", {{"stage", 3}, {"stage3_foo", 1}}}}, "zero_optimization.stage3_foo"},
      {{{"zero_optimization", {{"offload_param", {{"device", "cpu"}, {"pin_memroy", true}}}, {"stage", 3}}}},
       "zero_optimization.offload_param.pin_memroy"},
      {{{"zero_optimization", {{"offload_optimizer", {{"devise", "cpu"}}}, {"stage", 2}}}},
       "zero_optimization.offload_optimizer.devise"},
      {{{"fp16", {{"enabled", false}, {"fused_mode", true}}}}, "fp16.fused_mode"},
      {{{"bf16", {{"enabled", true}, {"loss_scal", 0}}}}, "bf16.loss_scal"},
      {{{"bfloat16", {{"enabled", true}, {"loss_scal", 0}}}}, "bfloat16.loss_scal"},
      {{{"optimizer", {{"type", "Adam"}, {"params", {{"lrr", 1}}}}}}, "optimizer.params.lrr"},
      {{{"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_max", 1}}}}}}, "scheduler.params.warmup_max"},
  };
  for (const auto& [extra, key] : cases) {
    INFO(key);
    CHECK(thrown_by([&] { ds::Config::from_json(with(extra)); }).key() == key);
  }
}

TEST_CASE("A wrong JSON type is an error naming the key and the value", "[config]") {
  CHECK_THAT(error_message({{"train_batch_size", "8"}}),
             Contains("config key 'train_batch_size'") && Contains("\"8\""));
  CHECK_THAT(error_message(with({{"fp16", {{"enabled", "yes"}}}})),
             Contains("config key 'fp16.enabled'") && Contains("\"yes\""));
  CHECK_THAT(error_message(with({{"zero_optimization", 3}})), Contains("config key 'zero_optimization'") && Contains("3"));
  CHECK_THAT(error_message(with({{"steps_per_print", 2.5}})), Contains("config key 'steps_per_print'") && Contains("2.5"));
  CHECK_THAT(error_message(with({{"dstrain", "gpt"}})), Contains("config key 'dstrain'") && Contains("\"gpt\""));
  CHECK_THAT(error_message(json::array()), Contains("JSON object"));
}

TEST_CASE("A negative size is an error naming the key and the value", "[config]") {
  CHECK_THAT(error_message(with({{"zero_optimization", {{"reduce_bucket_size", -1}}}})),
             Contains("config key 'zero_optimization.reduce_bucket_size'") && Contains("-1"));
  CHECK_THAT(error_message(with({{"zero_optimization", {{"offload_param", {{"buffer_size", -5e8}}}}}})),
             Contains("config key 'zero_optimization.offload_param.buffer_size'") && Contains("-5"));
  CHECK_THAT(error_message({{"train_micro_batch_size_per_gpu", -4}}),
             Contains("config key 'train_micro_batch_size_per_gpu'") && Contains("-4"));
  CHECK_THAT(error_message({{"train_batch_size", 0}}), Contains("config key 'train_batch_size'"));
}

TEST_CASE("Sizes written as 5e8 are integers; fractions are not", "[config]") {
  ds::Config config = ds::Config::from_json(with({{"zero_optimization", {{"allgather_bucket_size", 2e8}}}}));
  CHECK(config.zero_optimization().allgather_bucket_size == 200000000);
  CHECK_THAT(error_message(with({{"zero_optimization", {{"allgather_bucket_size", 1.5}}}})),
             Contains("zero_optimization.allgather_bucket_size") && Contains("1.5"));
}

TEST_CASE("fp16 and bf16 both enabled is an error", "[config]") {
  CHECK_THAT(error_message(with({{"fp16", {{"enabled", true}}}, {"bf16", {{"enabled", true}}}})),
             Contains("bf16.enabled") && Contains("fp16"));
  CHECK(ds::Config::from_json(with({{"bf16", {{"enabled", true}}}})).bf16().enabled);
}

TEST_CASE("ZeRO stage outside 0-3 is an error", "[config]") {
  CHECK_THAT(error_message(with({{"zero_optimization", {{"stage", 4}}}})),
             Contains("config key 'zero_optimization.stage'") && Contains("4"));
  CHECK_THAT(error_message(with({{"zero_optimization", {{"stage", -1}}}})), Contains("zero_optimization.stage"));
}

TEST_CASE("An offload device other than none, cpu or nvme is an error", "[config]") {
  CHECK_THAT(error_message(with({{"zero_optimization", {{"stage", 3}, {"offload_param", {{"device", "gpu"}}}}}})),
             Contains("config key 'zero_optimization.offload_param.device'") && Contains("\"gpu\""));
}

TEST_CASE("NVMe offload without nvme_path is an error", "[config]") {
  CHECK_THAT(error_message(with({{"zero_optimization", {{"stage", 3}, {"offload_optimizer", {{"device", "nvme"}}}}}})),
             Contains("config key 'zero_optimization.offload_optimizer.nvme_path'"));
}

TEST_CASE("Partial optimizer offload needs stage 3", "[config]") {
  CHECK_THAT(
      error_message(with({{"zero_optimization", {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}, {"ratio", 0.3}}}}}})),
      Contains("zero_optimization.offload_optimizer.ratio") && Contains("0.3"));
}

TEST_CASE("betas must be two numbers in [0, 1)", "[config]") {
  auto adam = [](const json& betas) { return with({{"optimizer", {{"type", "Adam"}, {"params", {{"betas", betas}}}}}}); };
  CHECK_THAT(error_message(adam({0.9})), Contains("config key 'optimizer.params.betas'") && Contains("[0.9]"));
  CHECK_THAT(error_message(adam({0.9, 1.0})), Contains("optimizer.params.betas") && Contains("[0.9,1.0]"));
  CHECK_THAT(error_message(adam({0.9, "0.999"})), Contains("optimizer.params.betas"));
  CHECK(ds::Config::from_json(adam({0.8, 0.95})).optimizer().betas == std::array<double, 2>{0.8, 0.95});
}

TEST_CASE("An unknown optimizer or scheduler type is an error listing the supported ones", "[config]") {
  CHECK_THAT(error_message(with({{"optimizer", {{"type", "Lion"}}}})),
             Contains("config key 'optimizer.type'") && Contains("\"Lion\"") &&
                 Contains("Adam, AdamW, SGD, OneBitAdam, Lamb, OneBitLamb, ZeroOneAdam"));
  CHECK_THAT(error_message(with({{"scheduler", {{"type", "Cosine"}}}})),
             Contains("config key 'scheduler.type'") && Contains("\"Cosine\"") &&
                 Contains("WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest"));
  CHECK_THAT(error_message(with({{"optimizer", {{"params", {{"lr", 1e-3}}}}}})),
             Contains("config key 'optimizer.type'"));
}

TEST_CASE("Optimizer type names match case-insensitively, as DeepSpeed's", "[config]") {
  ds::Config config = ds::Config::from_json(with({{"optimizer", {{"type", "adamw"}}}}));
  CHECK(config.optimizer().type == ds::OptimizerType::AdamW);
  CHECK(std::string(ds::to_string(config.optimizer().type)) == "AdamW");
}

TEST_CASE("Optimizer params follow the type", "[config]") {
  ds::Config adam = ds::Config::from_json(with({{"optimizer", {{"type", "Adam"}, {"params", {{"lr", 0.01}}}}}}));
  CHECK(adam.optimizer().lr == 0.01);
  CHECK(adam.optimizer().eps == 1e-8);
  CHECK(adam.optimizer().adam_w_mode);  // DeepSpeed's Adam decouples weight decay by default

  ds::Config onebit = ds::Config::from_json(
      with({{"optimizer", {{"type", "OneBitAdam"}, {"params", {{"freeze_step", 400}, {"comm_backend_name", "mpi"}}}}}}));
  CHECK(onebit.optimizer().freeze_step == 400);
  CHECK(onebit.optimizer().comm_backend_name == "mpi");
  CHECK_FALSE(onebit.optimizer().cuda_aware);
  CHECK(ds::Config::from_json(with({{"optimizer", {{"type", "OneBitAdam"}}}})).optimizer().freeze_step == 100000);

  // DeepSpeed's defaults (FusedLamb, OnebitLamb, ZeroOneAdam constructors) and the values as written.
  const ds::OptimizerConfig lamb = ds::Config::from_json(with({{"optimizer", {{"type", "Lamb"}}}})).optimizer();
  CHECK(lamb.max_coeff == 10.0);
  CHECK(lamb.min_coeff == 0.01);
  CHECK_FALSE(lamb.eps_inside_sqrt);
  const ds::OptimizerConfig onebit_lamb =
      ds::Config::from_json(with({{"optimizer", {{"type", "onebitlamb"}, {"params", {{"max_coeff", 0.3}, {"factor_threshold", 0.2}}}}}}))
          .optimizer();
  CHECK(onebit_lamb.type == ds::OptimizerType::OneBitLamb);
  CHECK(onebit_lamb.max_coeff == 0.3);
  CHECK(onebit_lamb.freeze_step == 100000);
  CHECK(onebit_lamb.coeff_beta == 0.9);
  CHECK(onebit_lamb.factor_max == 4.0);
  CHECK(onebit_lamb.factor_min == 0.5);
  CHECK(onebit_lamb.factor_threshold == 0.2);
  const ds::OptimizerConfig zero_one =
      ds::Config::from_json(with({{"optimizer", {{"type", "ZeroOneAdam"}, {"params", {{"var_freeze_step", 300}}}}}}))
          .optimizer();
  CHECK(zero_one.var_freeze_step == 300);
  CHECK(zero_one.var_update_scaler == 16);
  CHECK(zero_one.local_step_scaler == 32678);
  CHECK(zero_one.local_step_clipper == 16);
  CHECK_THAT(error_message(with({{"optimizer", {{"type", "Lamb"}, {"params", {{"min_coeff", 2.0}, {"max_coeff", 1.0}}}}}})),
             Contains("config key 'optimizer.params.min_coeff'"));
  // Keys of one type are unknown to another: ZeroOneAdam has no freeze_step (DeepSpeed's
  // constructor refuses it too).
  CHECK(thrown_by([] {
          ds::Config::from_json(with({{"optimizer", {{"type", "ZeroOneAdam"}, {"params", {{"freeze_step", 5}}}}}}));
        }).key() == std::string("optimizer.params.freeze_step"));

  ds::Config sgd =
      ds::Config::from_json(with({{"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}, {"momentum", 0.9}}}}}}));
  CHECK(sgd.optimizer().momentum == 0.9);
  CHECK_THAT(error_message(with({{"optimizer", {{"type", "SGD"}}}})), Contains("config key 'optimizer.params.lr'"));
  CHECK_THAT(error_message(with({{"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}, {"nesterov", true}}}}}})),
             Contains("optimizer.params.nesterov"));
  // A momentum is not an Adam parameter (FusedAdam would refuse the keyword).
  CHECK_THAT(error_message(with({{"optimizer", {{"type", "Adam"}, {"params", {{"momentum", 0.9}}}}}})),
             Contains("config key 'optimizer.params.momentum'"));
  // max_grad_norm is the engine's gradient_clipping, refused here as DeepSpeed's engine refuses it;
  // 0 (no clipping, what the run does) stays accepted.
  CHECK_THAT(error_message(with({{"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}, {"max_grad_norm", 1.0}}}}}})),
             Contains("config key 'optimizer.params.max_grad_norm'") && Contains("gradient_clipping"));
  CHECK_NOTHROW(ds::Config::from_json(with({{"optimizer", {{"type", "Lamb"}, {"params", {{"max_grad_norm", 0.0}}}}}})));
  // FusedAdam's set_grad_none and DeepSpeedCPUAdam's fp32_optimizer_states are DeepSpeed's keys too.
  CHECK_NOTHROW(ds::Config::from_json(
      with({{"optimizer", {{"type", "AdamW"}, {"params", {{"set_grad_none", false}, {"fp32_optimizer_states", true}}}}}})));
  CHECK_THAT(error_message(with({{"optimizer", {{"type", "AdamW"}, {"params", {{"fp32_optimizer_states", false}}}}}})),
             Contains("config key 'optimizer.params.fp32_optimizer_states'"));
  CHECK_THAT(error_message(with({{"optimizer", {{"type", "Adam"}, {"params", {{"amsgrad", true}}}}}})),
             Contains("optimizer.params.amsgrad"));
}

TEST_CASE("Scheduler params use DeepSpeed's names and defaults", "[config]") {
  auto scheduler = [](const char* type, const json& params) {
    return ds::Config::from_json(with({{"scheduler", {{"type", type}, {"params", params}}}})).scheduler();
  };
  ds::SchedulerConfig warmup = scheduler("WarmupLR", json::object());
  CHECK(warmup.warmup_min_lr == 0.0);
  CHECK_FALSE(warmup.warmup_max_lr.has_value());  // the optimizer's lr
  CHECK(warmup.warmup_num_steps == 1000);
  CHECK(warmup.warmup_type == "log");

  ds::SchedulerConfig decay = scheduler("WarmupDecayLR", {{"total_num_steps", 500}});
  CHECK(decay.warmup_max_lr == 0.001);
  CHECK(decay.total_num_steps == 500);

  ds::SchedulerConfig cycle = scheduler("OneCycle", {{"cycle_min_lr", 1e-4}, {"cycle_max_lr", 1e-3},
                                                     {"cycle_first_step_size", 300}, {"cycle_first_stair_count", 3}});
  CHECK(cycle.cycle_second_step_size == 300);
  CHECK(cycle.cycle_second_stair_count == 3);
  CHECK(cycle.decay_step_size == 0);
  CHECK(cycle.cycle_momentum);
  CHECK(cycle.cycle_min_mom == 0.8);
  CHECK(cycle.cycle_max_mom == 0.9);

  CHECK_THAT(error_message(with({{"scheduler", {{"type", "WarmupDecayLR"}}}})),
             Contains("config key 'scheduler.params.total_num_steps'"));
  CHECK_THAT(error_message(with({{"scheduler", {{"type", "OneCycle"}, {"params", {{"cycle_max_lr", 1e-3}}}}}})),
             Contains("config key 'scheduler.params.cycle_min_lr'"));
  CHECK_THAT(error_message(with({{"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_type", "cosine"}}}}}})),
             Contains("scheduler.params.warmup_type") && Contains("\"cosine\""));
}

// The dotted paths of every "auto" value in `value`, found by plain recursion (test configs are shallow).
void auto_paths(const json& value, const std::string& path, std::vector<std::string>& out) {
  if (value == "auto") out.push_back(path);
  if (value.is_object())
    for (auto it = value.begin(); it != value.end(); ++it) auto_paths(*it, path.empty() ? it.key() : path + "." + it.key(), out);
}

TEST_CASE("\"auto\" where the HF Trainer fills none is refused with one error naming each such key", "[config]") {
  json hf = {
      {"train_batch_size", "auto"},
      {"train_micro_batch_size_per_gpu", 4},
      {"steps_per_print", "auto"},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", "auto"}, {"amsgrad", "auto"}}}}},
      {"zero_optimization", {{"stage", "auto"}, {"stage3_prefetch_bucket_size", "auto"}}},
  };
  std::optional<ds::Error> error;
  try {
    ds::Config::from_json(hf);
  } catch (const ds::Error& e) {
    error = e;
  }
  REQUIRE(error);
  CHECK_THAT(error->message(), Contains("Hugging Face Trainer"));
  CHECK(error->key() == std::string("optimizer.params.amsgrad"));  // the first, sorted
  CHECK_THAT(error->message(), Contains("optimizer.params.amsgrad, steps_per_print, zero_optimization.stage"));
  for (const char* accepted : {"train_batch_size", "optimizer.params.lr", "stage3_prefetch_bucket_size"})
    CHECK_THAT(error->message(), !Contains(accepted));
}

TEST_CASE("real-world configs load; HF ones with \"auto\" given the dstrain settings HF takes from its arguments",
          "[config]") {
  const std::string folder = DSTRAIN_SOURCE_DIR "/tests/runtime/configs";
  const std::vector<std::string> hidden_size_keys = {"zero_optimization.reduce_bucket_size",
                                                     "zero_optimization.stage3_prefetch_bucket_size",
                                                     "zero_optimization.stage3_param_persistence_threshold"};
  int plain = 0, with_auto = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    INFO(entry.path().string());
    json raw = read_json(entry.path().string());
    std::vector<std::string> placeholders;
    auto_paths(raw, "", placeholders);
    // HF's Trainer would take these from TrainingArguments.
    if (!placeholders.empty() && !raw.contains("dstrain")) raw["dstrain"] = {{"per_device_train_batch_size", 2}, {"steps", 10}};
    ds::Config config = ds::Config::from_json(raw);
    for (const auto& warning : config.warnings()) CHECK_THAT(warning, !Contains("unknown key"));
    if (placeholders.empty()) {
      ++plain;
      continue;
    }
    config.resolve_batch(2);
    const json effective = config.to_json();
    for (const std::string& key : placeholders) {
      INFO(key);
      CHECK(config.is_auto(key));
      CHECK_FALSE(config.given(key));
      std::string pointer = "/" + key;
      std::replace(pointer.begin(), pointer.end(), '.', '/');
      const bool hidden_size = std::find(hidden_size_keys.begin(), hidden_size_keys.end(), key) != hidden_size_keys.end();
      CHECK((effective.at(json::json_pointer(pointer)) == "auto") == hidden_size);
    }
    ++with_auto;
  }
  CHECK(plain >= 6);
  CHECK(with_auto >= 4);
}

TEST_CASE("DeepSpeed's other spellings: bfp16, boolean zero_optimization, fp16 keys inside bf16", "[config]") {
  CHECK(ds::Config::from_json(with({{"communication_data_type", "bfp16"}})).training().communication_data_type == "bf16");
  CHECK(thrown_by([] { ds::Config::from_json(with({{"communication_data_type", "bf32"}})); }).key() ==
        std::string("communication_data_type"));
  for (bool enabled : {false, true}) {
    ds::Config config = ds::Config::from_json(with({{"zero_optimization", enabled}}));
    CHECK(config.zero_optimization().stage == (enabled ? 1 : 0));
    REQUIRE(config.warnings().size() == 1);
    CHECK_THAT(config.warnings()[0], Contains("deprecated") && Contains("\"stage\": " + std::to_string(enabled)));
  }
  // Megatron-DeepSpeed's bf16 block: DeepSpeed reads past the loss-scale keys without a word.
  ds::Config megatron = ds::Config::from_json(
      with({{"bf16",
             {{"enabled", true}, {"loss_scale", 0}, {"loss_scale_window", 500}, {"hysteresis", 2},
              {"consecutive_hysteresis", false}, {"min_loss_scale", 1}, {"initial_scale_power", 12}}}}));
  CHECK(megatron.warnings().empty());
  CHECK(megatron.bf16().enabled);
}

TEST_CASE("a value nested 100,000 deep or 50 MB long gives a short error, no crash", "[config]") {
  const int depth = 100000;
  // Parsed, never copied: copying a JSON value recurses.
  for (const std::string key : {"train_batch_size", "wandb", "dstrain"}) {
    const json config = json::parse("{\"train_batch_size\": 8, \"" + key + "\": " + std::string(depth, '[') +
                                    std::string(depth, ']') + "}");
    const std::string message = error_message(config);
    CHECK_THAT(message, Contains("nested more than") && Contains(key));
    CHECK(message.size() < 2000);
  }
  const std::string huge(50 << 20, 'x');
  for (const json& bad : {json(huge), json::array({huge}), json{{huge, 1}}}) {
    const std::string message = error_message(with({{"train_batch_size", bad}}));
    CHECK_THAT(message, Contains("train_batch_size") && Contains("xxxx"));
    CHECK(message.size() < 1000);
  }
}

TEST_CASE("keys accepted but not acted on: listed when set away from the default, silent at it", "[config]") {
  CHECK(ds::Config::from_json(with(json::object())).keys_not_acted_on().empty());
  // Every key at DeepSpeed's documented default (config-json.md), and kept blocks switched off.
  const json at_defaults = with({{"prescale_gradients", false},
                                 {"zero_optimization",
                                  {{"stage", 2}, {"contiguous_gradients", true}, {"reduce_scatter", true},
                                   {"allgather_bucket_size", 5e8}, {"offload_optimizer", {{"device", "none"}}}}},
                                 {"tensorboard", {{"enabled", false}, {"output_path", "x"}}},
                                 {"wandb", json::object()}});
  CHECK(ds::Config::from_json(at_defaults).keys_not_acted_on().empty());
  const json config = with({{"prescale_gradients", true},
                         {"zero_optimization",
                          {{"stage", 3},
                           {"contiguous_gradients", false},
                           {"stage3_max_live_parameters", 1000},  // acted on
                           {"offload_optimizer", {{"device", "cpu"}}}}},
                         {"aio", {{"block_size", 4096}}},
                         {"activation_checkpointing", {{"partition_activations", true}}},  // acted on
                         {"wandb", {{"enabled", true}}},
                         {"tensorboard", {{"enabled", false}}}});
  // offload_optimizer.device "cpu" acts (the engine says the state is already in host memory); the
  // aio block acts only for NVMe.
  const std::vector<std::string> expected = {"prescale_gradients", "zero_optimization.contiguous_gradients", "aio",
                                             "wandb"};
  CHECK(ds::Config::from_json(config).keys_not_acted_on() == expected);

  // Every param of Lamb and the 1-bit family set away from its default acts, but cuda_aware (the
  // engine's group carries the compressed traffic).
  const json optimizers[] = {
      {{"type", "Lamb"},
       {"params", {{"lr", 0.01}, {"betas", {0.8, 0.99}}, {"eps", 1e-6}, {"weight_decay", 0.1}, {"bias_correction", false},
                   {"max_coeff", 0.5}, {"min_coeff", 0.1}, {"eps_inside_sqrt", true}}}},
      {{"type", "OneBitLamb"},
       {"params", {{"lr", 0.01}, {"betas", {0.8, 0.99}}, {"eps", 1e-6}, {"weight_decay", 0.1}, {"max_coeff", 0.5},
                   {"min_coeff", 0.1}, {"freeze_step", 7}, {"coeff_beta", 0.5}, {"factor_max", 2.0},
                   {"factor_min", 0.8}, {"factor_threshold", 0.2}, {"comm_backend_name", "mpi"},
                   {"cuda_aware", true}}}},
      {{"type", "ZeroOneAdam"},
       {"params", {{"lr", 0.01}, {"betas", {0.8, 0.99}}, {"eps", 1e-6}, {"weight_decay", 0.1},
                   {"var_freeze_step", 7}, {"var_update_scaler", 4}, {"local_step_scaler", 8},
                   {"local_step_clipper", 4}, {"comm_backend_name", "mpi"}, {"cuda_aware", true}}}}};
  for (const json& optimizer : optimizers) {
    INFO(optimizer["type"]);
    const std::vector<std::string> keys = ds::Config::from_json(with({{"optimizer", optimizer}})).keys_not_acted_on();
    if (optimizer["params"].contains("cuda_aware"))
      CHECK(keys == std::vector<std::string>{"optimizer.params.cuda_aware"});
    else
      CHECK(keys.empty());
  }
}

TEST_CASE("keys not acted on: the NVMe optimizer offload makes its keys, sub_group_size and aio act", "[config]") {
  const json offload = {{"device", "nvme"}, {"nvme_path", "/nvme"}, {"buffer_count", 9}, {"pipeline_read", true},
                        {"pipeline_write", true}, {"pin_memory", true}, {"fast_init", true}};
  const json config = with({{"zero_optimization", {{"stage", 2}, {"sub_group_size", 1000}, {"offload_optimizer", offload}}},
                            {"aio", {{"block_size", 4096}, {"queue_depth", 4}, {"use_gds", true}}}});
  const std::vector<std::string> expected = {"zero_optimization.offload_optimizer.pin_memory",
                                             "zero_optimization.offload_optimizer.fast_init", "aio.use_gds"};
  CHECK(ds::Config::from_json(config).keys_not_acted_on() == expected);
  // The same keys without NVMe do nothing and say so; parameter offload to NVMe at stage 3 acts.
  json cpu = offload;
  cpu["device"] = "cpu";
  const json off = with({{"zero_optimization", {{"stage", 3}, {"sub_group_size", 1000}, {"offload_optimizer", cpu},
                                                {"offload_param", {{"device", "nvme"}, {"nvme_path", "/nvme"}}}}},
                         {"aio", {{"block_size", 4096}}}});
  const std::vector<std::string> expected_off = {
      "zero_optimization.offload_optimizer.nvme_path",
      "zero_optimization.offload_optimizer.buffer_count",
      "zero_optimization.offload_optimizer.pipeline_read",
      "zero_optimization.offload_optimizer.pipeline_write",
      "zero_optimization.offload_optimizer.pin_memory",
      "zero_optimization.offload_optimizer.fast_init",
      "zero_optimization.sub_group_size"};
  CHECK(ds::Config::from_json(off).keys_not_acted_on() == expected_off);
}

TEST_CASE("keys not acted on: offload_param's keys and aio act with device nvme, not with cpu", "[config]") {
  const json param = {{"device", "nvme"}, {"nvme_path", "/nvme"}, {"buffer_count", 3}, {"buffer_size", 5000},
                      {"max_in_cpu", 0}, {"pin_memory", true}};
  const json nvme = with({{"zero_optimization", {{"stage", 3}, {"offload_param", param}}}, {"aio", {{"queue_depth", 4}}}});
  CHECK(ds::Config::from_json(nvme).keys_not_acted_on() ==
        std::vector<std::string>{"zero_optimization.offload_param.pin_memory"});
  json cpu = param;
  cpu["device"] = "cpu";
  const json on_cpu = with({{"zero_optimization", {{"stage", 3}, {"offload_param", cpu}}}, {"aio", {{"queue_depth", 4}}}});
  const std::vector<std::string> expected = {
      "zero_optimization.offload_param.nvme_path", "zero_optimization.offload_param.buffer_count",
      "zero_optimization.offload_param.buffer_size", "zero_optimization.offload_param.max_in_cpu",
      "zero_optimization.offload_param.pin_memory", "aio"};
  CHECK(ds::Config::from_json(on_cpu).keys_not_acted_on() == expected);
}

TEST_CASE("Batch sizes: any two derive the third; one alone uses DeepSpeed's rule", "[config]") {
  const int micro = 2;
  for (int world : {1, 2, 4}) {
    const int train = 24;
    const int accumulation = train / (micro * world);
    // Every subset of the three keys that names train_batch_size or the micro batch size.
    for (int mask = 1; mask < 8; ++mask) {
      bool has_train = mask & 1, has_micro = mask & 2, has_accumulation = mask & 4;
      if (!has_train && !has_micro) continue;
      json keys = json::object();
      if (has_train) keys["train_batch_size"] = train;
      if (has_micro) keys["train_micro_batch_size_per_gpu"] = micro;
      if (has_accumulation) keys["gradient_accumulation_steps"] = accumulation;
      int expected_train = train, expected_micro = micro, expected_accumulation = accumulation;
      if (mask == 1) {  // train only: one micro step, the batch split over the world
        expected_accumulation = 1;
        expected_micro = train / world;
      } else if (mask == 2) {  // micro only: one micro step
        expected_accumulation = 1;
        expected_train = micro * world;
      }
      INFO("world " << world << ", keys " << keys.dump());
      ds::Config config = ds::Config::from_json(keys);
      config.resolve_batch(world);
      CHECK(config.dp_world_size() == world);
      CHECK(config.train_batch_size() == expected_train);
      CHECK(config.train_micro_batch_size_per_gpu() == expected_micro);
      CHECK(config.gradient_accumulation_steps() == expected_accumulation);
      CHECK(config.train_batch_size() ==
            config.train_micro_batch_size_per_gpu() * config.gradient_accumulation_steps() * world);
    }
  }
}

TEST_CASE("Three batch keys inconsistent with the world size are an error naming the values", "[config]") {
  ds::Config config = ds::Config::from_json(
      {{"train_batch_size", 32}, {"train_micro_batch_size_per_gpu", 4}, {"gradient_accumulation_steps", 2}});
  config.resolve_batch(4);  // 32 == 4 * 2 * 4
  CHECK_THROWS_WITH(config.resolve_batch(2), Contains("train_batch_size 32") &&
                                                 Contains("train_micro_batch_size_per_gpu 4") &&
                                                 Contains("gradient_accumulation_steps 2") && Contains("world size 2"));
}

TEST_CASE("A batch size that does not divide is an error", "[config]") {
  // Known before the world size.
  CHECK_THAT(error_message({{"train_batch_size", 30},
                            {"train_micro_batch_size_per_gpu", 4},
                            {"gradient_accumulation_steps", 2}}),
             Contains("train_batch_size 30") && Contains("train_micro_batch_size_per_gpu 4") &&
                 Contains("gradient_accumulation_steps 2"));
  CHECK_THAT(error_message({{"train_batch_size", 30}, {"train_micro_batch_size_per_gpu", 4}}),
             Contains("train_batch_size 30"));
  // Known only with it: gas = 24 / (2 * 5) does not divide; DeepSpeed would floor it.
  ds::Config config = ds::Config::from_json({{"train_batch_size", 24}, {"train_micro_batch_size_per_gpu", 2}});
  CHECK_THROWS_AS(config.resolve_batch(5), ds::Error);
  CHECK_THROWS_WITH(config.resolve_batch(5), Contains("train_batch_size 24") && Contains("world size 5"));
  ds::Config train_only = ds::Config::from_json({{"train_batch_size", 6}});
  CHECK_THROWS_WITH(train_only.resolve_batch(4), Contains("train_batch_size 6"));
}

TEST_CASE("Neither train_batch_size nor the micro batch size is an error", "[config]") {
  CHECK_THAT(error_message(json::object()),
             Contains("train_batch_size") && Contains("train_micro_batch_size_per_gpu"));
  CHECK_THAT(error_message({{"gradient_accumulation_steps", 4}}), Contains("train_batch_size"));
}

TEST_CASE("Batch sizes are unknown until the world size is", "[config]") {
  ds::Config config = ds::Config::from_json({{"train_batch_size", 16}});
  CHECK_FALSE(config.batch_resolved());
  CHECK_THROWS_WITH(config.train_micro_batch_size_per_gpu(), Contains("train_micro_batch_size_per_gpu"));
  CHECK_THROWS_AS(config.train_batch_size(), ds::Error);
  CHECK_THROWS_AS(config.resolve_batch(0), ds::Error);
  config.resolve_batch(4);
  CHECK(config.train_micro_batch_size_per_gpu() == 4);
  config.resolve_batch(2);  // starts again from the keys as given
  CHECK(config.train_micro_batch_size_per_gpu() == 8);
}

TEST_CASE("overlap_comm defaults to true for stage 3 only", "[config]") {
  auto zero = [](const json& block) { return ds::Config::from_json(with({{"zero_optimization", block}})).zero_optimization(); };
  CHECK(zero({{"stage", 3}}).overlap_comm);
  CHECK_FALSE(zero({{"stage", 2}}).overlap_comm);
  CHECK_FALSE(zero({{"stage", 3}, {"overlap_comm", false}}).overlap_comm);
  CHECK(zero({{"stage", 1}, {"overlap_comm", true}}).overlap_comm);
}

TEST_CASE("DeepSpeed's second spellings are accepted; two different values are an error", "[config]") {
  ds::Config config = ds::Config::from_json(with({{"zero_optimization", {{"prefetch_bucket_size", 1000}}},
                                                  {"bfloat16", {{"enabled", true}}},
                                                  {"aio", {{"thread_count", 4}}}}));
  CHECK(config.warnings().empty());
  CHECK(config.zero_optimization().stage3_prefetch_bucket_size == 1000);
  CHECK(config.bf16().enabled);
  CHECK(config.aio().intra_op_parallelism == 4);
  CHECK(ds::Config::from_json(with({{"aio", {{"thread_count", 2}, {"intra_op_parallelism", 2}}}})).aio().intra_op_parallelism == 2);
  CHECK_THAT(error_message(with({{"aio", {{"thread_count", 2}, {"intra_op_parallelism", 4}}}})),
             Contains("aio.intra_op_parallelism") && Contains("thread_count"));
}

TEST_CASE("A deprecated ZeRO key is one warning naming its replacement, and still applies", "[config]") {
  ds::Config config = ds::Config::from_json(with({{"zero_optimization", {{"stage", 2}, {"cpu_offload", true}}}}));
  REQUIRE(config.warnings().size() == 1);
  CHECK_THAT(config.warnings()[0], Contains("zero_optimization.cpu_offload") && Contains("offload_optimizer"));
  CHECK(config.zero_optimization().offload_optimizer.device == ds::OffloadDevice::Cpu);

  ds::Config gather = ds::Config::from_json(
      with({{"zero_optimization", {{"stage", 3}, {"stage3_gather_fp16_weights_on_model_save", true}}}}));
  CHECK(gather.zero_optimization().stage3_gather_16bit_weights_on_model_save);
}

TEST_CASE("bf16 master weights and optimizer states need ZeRO and each other", "[config]") {
  CHECK_THAT(error_message(with({{"bf16", {{"enabled", true}, {"bf16_master_weights_and_grads", true}}}})),
             Contains("bf16.bf16_master_weights_and_grads") && Contains("stage 0"));
  CHECK_THAT(error_message(with({{"bf16", {{"enabled", true}, {"bf16_optimizer_states", true}}},
                                 {"zero_optimization", {{"stage", 2}}}})),
             Contains("bf16.bf16_optimizer_states"));
}

TEST_CASE("The pipeline block takes a stage count or \"auto\" and a partition method", "[config]") {
  ds::Config config =
      ds::Config::from_json(with({{"pipeline", {{"stages", 4}, {"partition", "uniform"}, {"seed_layers", true}}}}));
  CHECK(config.pipeline().stages == 4);
  CHECK(config.pipeline().partition == "uniform");
  CHECK(config.pipeline().seed_layers);
  CHECK_FALSE(ds::Config::from_json(with({{"pipeline", {{"stages", "auto"}}}})).pipeline().stages.has_value());
  CHECK(ds::Config::from_json(with({{"pipeline", {{"partition", "type:Block"}}}})).pipeline().partition == "type:Block");
  CHECK_THAT(error_message(with({{"pipeline", {{"partition", "random"}}}})),
             Contains("config key 'pipeline.partition'") && Contains("\"random\""));
  CHECK_THAT(error_message(with({{"pipeline", {{"stages", 0}}}})), Contains("pipeline.stages"));
}

TEST_CASE("Other DeepSpeed blocks are kept as written without warnings", "[config]") {
  json wandb = {{"enabled", true}, {"project", "dstrain"}};
  ds::Config config = ds::Config::from_json(with({{"wandb", wandb}, {"elasticity", {{"enabled", false}}}}));
  CHECK(config.warnings().empty());
  CHECK(config.untyped()["wandb"] == wandb);
  CHECK(config.untyped().contains("elasticity"));
}

TEST_CASE("to_json is the effective config and reads back to itself", "[config]") {
  for (const char* name :
       {"deepspeed_reference.json", "default.json", "lamb.json", "onebit_lamb.json", "zero_one_adam.json"}) {
    INFO(name);
    ds::Config config = ds::Config::from_file(kConfigs + name);
    json effective = config.to_json();
    ds::Config again = ds::Config::from_json(effective);
    CHECK(again.warnings().empty());
    CHECK(again.to_json() == effective);
  }
  ds::Config config = ds::Config::from_json(with({{"scheduler", {{"type", "WarmupLR"}}}}));
  json effective = config.to_json();
  CHECK(effective["zero_optimization"]["stage3_max_live_parameters"] == 1000000000);
  CHECK(effective["fp16"]["initial_scale_power"] == 16);
  CHECK(effective["scheduler"]["params"]["warmup_num_steps"] == 1000);
  CHECK_FALSE(effective.contains("optimizer"));
  CHECK_FALSE(ds::Config::from_json(effective).scheduler().warmup_max_lr.has_value());
  config.resolve_batch(2);
  CHECK(config.to_json()["train_micro_batch_size_per_gpu"] == 4);
}

TEST_CASE("from_file errors carry the path", "[config]") {
  try {
    ds::Config::from_file("/nonexistent/ds_config.json");
    FAIL("no error");
  } catch (const ds::Error& e) {
    CHECK(e.path() == std::string("/nonexistent/ds_config.json"));
    CHECK(e.errnum() == ENOENT);
  }

  const std::string text = "{\n  \"train_batch_size\": 8,\n  \"fp16\": {\"enabled\": tru}\n}\n";
  std::string bad = write_temp_file("bad.json", text);
  try {
    ds::Config::from_file(bad);
    FAIL("no error");
  } catch (const ds::Error& e) {
    CHECK(e.path() == bad);
    // The offset points into the broken literal "tru}".
    REQUIRE(e.offset().has_value());
    CHECK(*e.offset() >= static_cast<int64_t>(text.find("tru")));
    CHECK(*e.offset() <= static_cast<int64_t>(text.find("tru") + 4));
    CHECK_THAT(e.what(), Contains("invalid JSON"));
  }

  std::string duplicate = write_temp_file("duplicate.json", R"({"train_batch_size": 8, "train_batch_size": 16})");
  CHECK_THROWS_WITH(ds::Config::from_file(duplicate), Contains("duplicate key") && Contains("train_batch_size"));

  std::string invalid = write_temp_file("invalid.json", R"({"train_batch_size": "8"})");
  try {
    ds::Config::from_file(invalid);
    FAIL("no error");
  } catch (const ds::Error& e) {
    CHECK(e.path() == invalid);
    CHECK(e.key() == std::string("train_batch_size"));
  }
}

TEST_CASE("from_file skips comments, as DeepSpeed's hjson loader does", "[config]") {
  std::string path = write_temp_file("comments.json", "{\n  // global batch\n  \"train_batch_size\": 8 /* x */\n}\n");
  CHECK(ds::Config::from_file(path).warnings().empty());
}

namespace {

// The ds::Error that reading `config` throws; a test failure when it throws none.
ds::Error config_error(const json& config) {
  std::optional<ds::Error> error;
  try {
    ds::Config::from_json(config);
  } catch (const ds::Error& e) {
    error = e;
  }
  REQUIRE(error.has_value());
  return *error;
}

json zero(int stage, const json& extra = json::object()) {
  json block = {{"stage", stage}};
  block.merge_patch(extra);
  return {{"zero_optimization", block}};
}

}  // namespace

TEST_CASE("The 1-bit family under ZeRO stage 3 is an error naming zero_optimization.stage", "[config]") {
  for (const char* type : {"OneBitAdam", "OneBitLamb", "ZeroOneAdam"}) {
    json optimizer = {{"optimizer", {{"type", type}}}};
    CHECK_NOTHROW(ds::Config::from_json(with(optimizer)));
    for (int stage : {1, 2}) {
      json config = with(optimizer);
      config.merge_patch(zero(stage));
      CHECK_NOTHROW(ds::Config::from_json(config));
    }
    json config = with(optimizer);
    config.merge_patch(zero(3));
    const ds::Error error = config_error(config);
    CHECK(error.key() == std::string("zero_optimization.stage"));
    CHECK_THAT(error.message(), Contains(std::string(type) + " is not supported with ZeRO stage 3"));
  }
}

TEST_CASE("offload_param to NVMe below stage 3 loads, but is not trainable", "[config]") {
  const json adam = {{"optimizer", {{"type", "Adam"}}}};
  const json nvme = {{"offload_param", {{"device", "nvme"}, {"nvme_path", "/nvme"}}}};
  auto config = [&](int stage, const json& offload) {
    json result = with(adam);
    result.merge_patch(zero(stage, offload));
    return ds::Config::from_json(result);
  };
  CHECK_NOTHROW(config(3, nvme).check_trainable());
  for (int stage : {0, 1, 2}) {
    INFO("stage " << stage);
    const ds::Config below = config(stage, nvme);  // DeepSpeed ignores it there, with a warning
    try {
      below.check_trainable();
      FAIL("no ds::Error thrown");
    } catch (const ds::Error& e) {
      CHECK(e.key() == std::string("zero_optimization.offload_param.device"));
      CHECK_THAT(e.message(), Contains("this is stage " + std::to_string(stage)));
    }
  }
  json cpu = nvme;
  cpu["offload_param"]["device"] = "cpu";
  CHECK_NOTHROW(config(2, cpu).check_trainable());
}

TEST_CASE("Lamb with the optimizer on NVMe is an error naming the device key", "[config]") {
  const json nvme = {{"offload_optimizer", {{"device", "nvme"}, {"nvme_path", "/nvme"}}}};
  auto config = [&](const char* type, int stage) {
    json result = with({{"optimizer", {{"type", type}, {"params", {{"lr", 0.1}}}}}});
    result.merge_patch(zero(stage, nvme));
    return result;
  };
  for (int stage : {1, 2, 3}) {
    INFO("stage " << stage);
    const ds::Error error = config_error(config("Lamb", stage));
    CHECK(error.key() == std::string("zero_optimization.offload_optimizer.device"));
    CHECK_THAT(error.message(), Contains("Lamb's trust ratio needs each parameter whole"));
    for (const char* type : {"Adam", "AdamW", "SGD"}) CHECK_NOTHROW(ds::Config::from_json(config(type, stage)));
  }
  // At stage 0 offload_optimizer does not act, so Lamb steps in memory.
  CHECK_NOTHROW(ds::Config::from_json(config("Lamb", 0)));
}

TEST_CASE("A config without an optimizer loads, but is not trainable", "[config]") {
  const ds::Config none = ds::Config::from_json(with(json::object()));
  try {
    none.check_trainable();
    FAIL("no ds::Error thrown");
  } catch (const ds::Error& e) {
    CHECK(e.key() == std::string("optimizer"));
    CHECK_THAT(e.message(), Contains("no optimizer configured"));
  }
  CHECK_NOTHROW(ds::Config::from_json(with({{"optimizer", {{"type", "Adam"}}}})).check_trainable());
}

namespace {


}  // namespace

TEST_CASE("HF \"auto\": each key resolves from the dstrain settings as the HF Trainer resolves it", "[config][auto]") {
  const std::string path = DSTRAIN_SOURCE_DIR "/tests/runtime/configs/hf_auto_zero3_warmup_decay.json";
  const json settings = read_json(path).at("dstrain");
  ds::Config config = ds::Config::from_file(path);
  const int world = 2;
  config.resolve_batch(world);

  const int micro = settings.at("per_device_train_batch_size"), gas = settings.at("gradient_accumulation_steps");
  CHECK(config.train_micro_batch_size_per_gpu() == micro);
  CHECK(config.gradient_accumulation_steps() == gas);
  CHECK(config.train_batch_size() == micro * gas * world);
  CHECK(config.training().gradient_clipping == settings.at("max_grad_norm").get<double>());
  const double lr = settings.at("learning_rate");
  CHECK(config.optimizer().lr == lr);
  CHECK(config.optimizer().betas[0] == settings.at("adam_beta1").get<double>());
  CHECK(config.optimizer().betas[1] == settings.at("adam_beta2").get<double>());
  CHECK(config.optimizer().eps == settings.at("adam_epsilon").get<double>());
  CHECK(config.optimizer().weight_decay == settings.at("weight_decay").get<double>());
  const int64_t steps = settings.at("steps");
  CHECK(config.scheduler().total_num_steps == steps);
  // transformers' TrainingArguments.get_warmup_steps: math.ceil(num_training_steps * warmup_ratio).
  CHECK(config.scheduler().warmup_num_steps == static_cast<int64_t>(std::ceil(steps * settings.at("warmup_ratio").get<double>())));
  CHECK(config.scheduler().warmup_min_lr == 0.0);
  CHECK(config.scheduler().warmup_max_lr == lr);
  CHECK(config.bf16().enabled == settings.at("bf16").get<bool>());
  CHECK_FALSE(config.fp16().enabled);
  CHECK(config.untyped().at("amp") == json({{"enabled", false}, {"opt_level", "O1"}}));

  // The hidden-size keys stay "auto" with DeepSpeed's defaults in the struct.
  const ds::ZeroConfig& zero = config.zero_optimization();
  CHECK(zero.reduce_bucket_size == 500000000);
  CHECK(zero.stage3_prefetch_bucket_size == 50000000);
  CHECK(zero.stage3_param_persistence_threshold == 100000);
  for (const char* key : {"zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
                          "zero_optimization.stage3_param_persistence_threshold", "optimizer.params.lr", "bf16.enabled",
                          "train_batch_size", "amp.opt_level"}) {
    INFO(key);
    CHECK(config.is_auto(key));
    CHECK_FALSE(config.given(key));
  }
  for (const char* key : {"zero_optimization.stage", "zero_optimization.stage3_max_live_parameters", "steps_per_print",
                          "optimizer.type"}) {
    INFO(key);
    CHECK(config.given(key));
    CHECK_FALSE(config.is_auto(key));
  }
  CHECK_FALSE(config.given("zero_optimization.allgather_bucket_size"));  // absent
  CHECK_FALSE(config.is_auto("zero_optimization.allgather_bucket_size"));

  // The recorded config holds the resolved values; read back, only the hidden-size keys are "auto".
  const json recorded = config.to_json();
  CHECK(recorded.at("optimizer").at("params").at("lr") == lr);
  CHECK(recorded.at("train_batch_size") == micro * gas * world);
  CHECK(recorded.at("zero_optimization").at("reduce_bucket_size") == "auto");
  const ds::Config again = ds::Config::from_json(recorded);
  CHECK(again.is_auto("zero_optimization.stage3_prefetch_bucket_size"));
  CHECK_FALSE(again.is_auto("optimizer.params.lr"));
  CHECK(again.given("optimizer.params.lr"));
  CHECK(again.scheduler().warmup_num_steps == config.scheduler().warmup_num_steps);
}

TEST_CASE("A number that overflows a double is an error naming the file and the key", "[config]") {
  const std::string top = write_temp_file("overflow_top.json", R"({"train_batch_size": 8, "gradient_clipping": 1e999})");
  ds::Error error = thrown_by([&] { ds::Config::from_file(top); });
  CHECK(error.path() == top);
  CHECK(error.key() == std::string("gradient_clipping"));
  CHECK_THAT(error.message(), Contains("1e999"));

  const std::string nested = write_temp_file(
      "overflow_nested.json",
      R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"betas": [0.9, -1e400], "lr": 1}}})");
  error = thrown_by([&] { ds::Config::from_file(nested); });
  CHECK(error.path() == nested);
  CHECK(error.key() == std::string("optimizer.params.betas[1]"));
}

TEST_CASE("--set: a path through a non-object, or a value of the wrong type, is an error naming the key", "[config]") {
  json config = with({{"zero_optimization", {{"stage", 2}}}});
  ds::Error error = thrown_by([&] { ds::Config::apply_override(config, "zero_optimization.stage.x=1"); });
  CHECK(error.key() == std::string("zero_optimization.stage.x"));
  CHECK_THAT(error.message(), Contains("'zero_optimization.stage'") && Contains("not an object"));

  ds::Config::apply_override(config, "zero_optimization.stage=two");
  error = thrown_by([&] { ds::Config::from_json(config); });
  CHECK(error.key() == std::string("zero_optimization.stage"));
  CHECK_THAT(error.message(), Contains("\"two\"") && Contains("expected an integer"));

  error = thrown_by([&] { ds::Config::apply_override(config, "gradient_clipping=1e999"); });
  CHECK(error.key() == std::string("gradient_clipping"));

  // Objects on the way are created; a value that is not JSON is a string.
  ds::Config::apply_override(config, "dstrain.model.n_layer=4");
  ds::Config::apply_override(config, "dstrain.data.type=synthetic");
  CHECK(config.at("dstrain") == json({{"model", {{"n_layer", 4}}}, {"data", {{"type", "synthetic"}}}}));
}

// Found by tests/fuzz (regressions/override): a --set value that is not JSON becomes a string, and
// one with bytes that are not UTF-8 used to escape later as nlohmann's bare type_error 316.
TEST_CASE("--set: bytes that are not UTF-8 are an error naming --set, before anything stores them", "[config]") {
  json config = with({});
  const json before = config;
  ds::Error error = thrown_by([&] { ds::Config::apply_override(config, "optimizer.params.lr=2\xA9" "63"); });
  CHECK(error.key() == std::string("--set"));
  CHECK_THAT(error.message(), Contains("UTF-8"));
  CHECK(config == before);
  error = thrown_by([&] { ds::Config::apply_override(config, "dstrain.\xFFkey=1"); });
  CHECK(error.key() == std::string("--set"));
}

TEST_CASE("Values DeepSpeed v0.19.5 refuses are errors naming the key", "[config]") {
  // DeepSpeedFP16Config: min_loss_scale is an int (a whole float is read as one).
  CHECK(thrown_by([] { ds::Config::from_json(with({{"fp16", {{"min_loss_scale", 0.5}}}})); }).key() ==
        std::string("fp16.min_loss_scale"));
  CHECK(ds::Config::from_json(with({{"fp16", {{"min_loss_scale", 2.0}}}})).fp16().min_loss_scale == 2.0);
  // The blocks kept as written are objects in DeepSpeed's models.
  for (const json& extra : {json{{"checkpoint", {{"writer", "fast"}}}}, json{{"zero_optimization", {{"zenflow", 1}}}}}) {
    INFO(extra.dump());
    CHECK_THAT(error_message(with(extra)), Contains("expected an object"));
  }
}
