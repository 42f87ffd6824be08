// The one table of the DeepSpeed keys that dstrain reads, checks and keeps, but does not act on
// yet. A change that makes a key act removes its row here (and its "not acted on" mark in
// docs/config.md); the engine warns about each row that a config sets (Config::keys_not_acted_on).
#include <algorithm>
#include <iterator>

#include <nlohmann/json.hpp>

#include "dstrain/runtime/config.hpp"

namespace ds {
namespace {

using nlohmann::json;

enum class When {
  Changed,  // the value differs from DeepSpeed's default
  True,     // the value is true (DeepSpeed acts on its default)
  Enabled,  // a kept block that is present and not {"enabled": false}, {} or null
};

// Another key having this (string) value.
struct Condition {
  const char* path = nullptr;  // null: no condition
  const char* value = nullptr;
};

struct Row {
  const char* path;  // dotted, as written in a config
  When when;
  // Acted on, so silent, when any of these holds.
  Condition unless[2] = {};
};

// The keys that act only when the optimizer state is swapped to NVMe.
constexpr const char* kOptimizerDevice = "zero_optimization.offload_optimizer.device";
// The keys that act only when the parameters are swapped to NVMe (stage 3; the engine refuses
// "nvme" at other stages).
constexpr const char* kParamDevice = "zero_optimization.offload_param.device";

const Row kNotActedOn[] = {
    // Top level.
    {"memory_breakdown", When::Changed},
    {"dump_state", When::Changed},
    {"prescale_gradients", When::Changed},
    {"gradient_predivide_factor", When::Changed},
    {"sparse_gradients", When::Changed},
    {"communication_data_type", When::Changed},
    {"disable_allgather", When::Changed},
    {"fp32_allreduce", When::Changed},
    {"zero_allow_untested_optimizer", When::Changed},
    {"zero_force_ds_cpu_optimizer", When::Changed},
    // Precision.
    {"fp16.auto_cast", When::Changed},
    {"fp16.fp16_master_weights_and_grads", When::Changed},
    {"bf16.immediate_grad_update", When::Changed},
    {"bf16.check_grad_overflow", When::Changed},
    {"bf16.bf16_master_weights_and_grads", When::Changed},
    {"bf16.bf16_optimizer_states", When::Changed},
    // Optimizer and scheduler params.
    {"optimizer.params.torch_adam", When::Changed},
    {"optimizer.params.cuda_aware", When::Changed},
    {"scheduler.params.cycle_momentum", When::True},  // OneCycle cycles the learning rate only
    {"scheduler.params.cycle_min_mom", When::Changed},
    {"scheduler.params.cycle_max_mom", When::Changed},
    {"scheduler.params.decay_mom_rate", When::Changed},
    // ZeRO.
    {"zero_optimization.contiguous_gradients", When::Changed},
    {"zero_optimization.reduce_scatter", When::Changed},
    {"zero_optimization.use_multi_rank_bucket_allreduce", When::Changed},
    {"zero_optimization.allgather_partitions", When::Changed},
    {"zero_optimization.load_from_fp32_weights", When::Changed},
    {"zero_optimization.elastic_checkpoint", When::Changed},
    // offload_param.device acts for "cpu" (the engine says the parameters are in host memory) and
    // "nvme"; its other keys with "nvme" only.
    {"zero_optimization.offload_param.nvme_path", When::Changed, {{kParamDevice, "nvme"}}},
    {"zero_optimization.offload_param.buffer_count", When::Changed, {{kParamDevice, "nvme"}}},
    {"zero_optimization.offload_param.buffer_size", When::Changed, {{kParamDevice, "nvme"}}},
    {"zero_optimization.offload_param.max_in_cpu", When::Changed, {{kParamDevice, "nvme"}}},
    {"zero_optimization.offload_param.pin_memory", When::Changed},  // swap buffers are always locked
    {"zero_optimization.offload_optimizer.nvme_path", When::Changed, {{kOptimizerDevice, "nvme"}}},
    {"zero_optimization.offload_optimizer.buffer_count", When::Changed, {{kOptimizerDevice, "nvme"}}},
    {"zero_optimization.offload_optimizer.pipeline_read", When::Changed, {{kOptimizerDevice, "nvme"}}},
    {"zero_optimization.offload_optimizer.pipeline_write", When::Changed, {{kOptimizerDevice, "nvme"}}},
    // Swap buffers are always locked; on a GPU it pins ZeRO-Offload's host buffers, and the engine,
    // which knows the device, leaves it out of its warning there.
    {"zero_optimization.offload_optimizer.pin_memory", When::Changed},
    {"zero_optimization.offload_optimizer.fast_init", When::Changed},
    {"zero_optimization.offload_optimizer.ratio", When::Changed},
    {"zero_optimization.offload_optimizer.super_offload", When::Changed},
    {"zero_optimization.offload_optimizer.convert_grad_on_cpu", When::Changed},
    {"zero_optimization.offload_optimizer.cpuadam_cores_perc", When::Changed},
    {"zero_optimization.sub_group_size", When::Changed, {{kOptimizerDevice, "nvme"}}},
    {"zero_optimization.stage3_model_persistence_threshold", When::Changed},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save", When::Changed},
    {"zero_optimization.stage3_module_granularity_threshold", When::Changed},
    {"zero_optimization.stage3_use_all_reduce_for_fetch_params", When::Changed},
    {"zero_optimization.stage3_allgather_sequential", When::Changed},
    {"zero_optimization.stage3_partition_stream_chunk_size", When::Changed},
    {"zero_optimization.ignore_unused_parameters", When::Changed},
    {"zero_optimization.legacy_stage1", When::Changed},
    {"zero_optimization.round_robin_gradients", When::Changed},
    {"zero_optimization.compute_grad_norm", When::Changed},
    {"zero_optimization.parameter_alignment", When::Changed},
    {"zero_optimization.zero_quantized_nontrainable_weights", When::Changed},
    {"zero_optimization.mics_shard_size", When::Changed},
    {"zero_optimization.mics_hierarchical_params_gather", When::Changed},
    {"zero_optimization.memory_efficient_linear", When::Changed},
    {"zero_optimization.pipeline_loading_checkpoint", When::Changed},
    {"zero_optimization.override_module_apply", When::Changed},
    {"zero_optimization.log_trace_cache_warnings", When::Changed},
    {"zero_optimization.enable_sanity_checks", When::Changed},
    {"zero_optimization.save_muon_momentum_buffer_in_memory", When::Changed},
    {"zero_optimization.zeropp_loco_param", When::Changed},
    {"zero_optimization.zenflow", When::Changed},
    {"zero_optimization.leaf_module", When::Changed},
    // The swap handles of offload_optimizer and offload_param take the aio block.
    {"aio", When::Changed, {{kOptimizerDevice, "nvme"}, {kParamDevice, "nvme"}}},
    {"aio.use_gds", When::Changed},
    // Checkpoints: use_node_local_storage acts.
    {"checkpoint.tag_validation", When::Changed},
    {"checkpoint.load_universal", When::Changed},
    {"checkpoint.parallel_write", When::Changed},
    {"checkpoint.writer", When::Changed},
    // Pipeline.
    {"pipeline.seed_layers", When::Changed},
    {"pipeline.pipe_partitioned", When::Changed},
    {"pipeline.grad_partitioned", When::Changed},
    // comms_logger and flops_profiler act (the trainer); DeepSpeed's caller names do not.
    {"comms_logger.debug", When::True},
    // Blocks kept as written (Config::untyped()).
    {"amp", When::Enabled},
    {"autotuning", When::Enabled},
    {"comet", When::Enabled},
    {"compile", When::Enabled},
    {"compression_training", When::Enabled},
    {"curriculum_learning", When::Enabled},
    {"data_efficiency", When::Enabled},
    {"data_types", When::Enabled},
    {"dataloader_drop_last", When::Enabled},
    {"disable_python_gc", When::Enabled},
    {"elasticity", When::Enabled},
    {"expert_parallel", When::Enabled},
    {"gradient_allreduce_op", When::Enabled},
    {"graph_harvesting", When::Enabled},
    {"hybrid_engine", When::Enabled},
    {"log_level", When::Enabled},
    {"managed_gradient_accumulation", When::Enabled},
    {"nebula", When::Enabled},
    {"progressive_layer_drop", When::Enabled},
    {"quantize_training", When::Enabled},
    {"seq_parallel_comm_data_type", When::Enabled},
    {"sequence_parallel_size", When::Enabled},
    {"sparse_attention", When::Enabled},
    {"tensor_parallel", When::Enabled},
    {"timers", When::Enabled},
    {"torch_autocast", When::Enabled},
    {"use_data_before_expert_parallelism", When::Enabled},
    {"vocabulary_size", When::Enabled},
    {"wandb", When::Enabled},
    {"weight_quantization", When::Enabled},
};

json::json_pointer pointer_of(const std::string& dotted) {
  std::string pointer = "/" + dotted;
  for (char& c : pointer)
    if (c == '.') c = '/';
  return json::json_pointer(pointer);
}

bool enabled_block(const json& value) {
  if (value.is_null() || value == false || (value.is_object() && value.empty())) return false;
  return !(value.is_object() && value.contains("enabled") && value["enabled"] == false);
}

}  // namespace

std::vector<std::string> Config::keys_not_acted_on() const {
  // DeepSpeed's defaults for this config's choices (the optimizer's and scheduler's params and
  // some ZeRO defaults depend on them).
  Config defaults;
  defaults.optimizer_.type = optimizer_.type;
  defaults.scheduler_.type = scheduler_.type;
  defaults.zero_.stage = zero_.stage;
  defaults.zero_.overlap_comm = zero_.stage == 3;
  const json effective = to_json();
  const json reference = defaults.to_json();
  std::vector<std::string> keys;
  for (const Row& row : kNotActedOn) {
    const auto pointer = pointer_of(row.path);
    if (!effective.contains(pointer)) continue;
    const bool acted_on = std::any_of(std::begin(row.unless), std::end(row.unless), [&](const Condition& c) {
      return c.path && effective.contains(pointer_of(c.path)) && effective.at(pointer_of(c.path)) == c.value;
    });
    if (acted_on) continue;
    const json& value = effective.at(pointer);
    bool set = false;
    switch (row.when) {
      case When::Changed: set = !reference.contains(pointer) || reference.at(pointer) != value; break;
      case When::True: set = value == true; break;
      case When::Enabled: set = enabled_block(value); break;
    }
    if (set) keys.emplace_back(row.path);
  }
  return keys;
}

}  // namespace ds
