// Keys of zero_optimization (stages 0-3, offload) and aio, as DeepSpeed's DeepSpeedZeroConfig,
// DeepSpeedZeroOffload*Config and aio config define them. Sizes are element counts, >= 0.
#include "config_sections.hpp"

namespace ds {
namespace {

const config_detail::EnumNames<OffloadDevice> kOffloadDeviceNames = {
    {OffloadDevice::None, "none"},
    {OffloadDevice::Cpu, "cpu"},
    {OffloadDevice::Nvme, "nvme"},
};

}  // namespace

const char* to_string(OffloadDevice device) {
  for (const auto& entry : kOffloadDeviceNames)
    if (entry.first == device) return entry.second;
  return "none";
}

namespace config_detail {
namespace {

template <class V, class Offload>
void visit_device(V& v, Offload& c) {
  v.field("device", c.device, kOffloadDeviceNames);
  v.field("nvme_path", c.nvme_path);
  if constexpr (V::kReading)
    if (c.device == OffloadDevice::Nvme && c.nvme_path.empty())
      throw v.error("nvme_path", "required when device is \"nvme\"");
}

// Keys DeepSpeed still reads but has replaced; each is one warning naming its replacement.
void read_deprecated_keys(Reader& v, ZeroConfig& c) {
  auto deprecated = [&](const char* key, const char* replacement, bool& value) {
    v.field(key, value);
    if (v.given(key)) v.warn("deprecated key '" + v.path_of(key) + "': use " + replacement);
  };
  bool cpu_offload = false, cpu_offload_param = false, pin_memory = false, gather_fp16 = false;
  deprecated("cpu_offload", "offload_optimizer", cpu_offload);
  deprecated("cpu_offload_param", "offload_param", cpu_offload_param);
  // DeepSpeed ignores it too: pin_memory lives in each offload block now.
  deprecated("cpu_offload_use_pin_memory", "offload_param.pin_memory / offload_optimizer.pin_memory", pin_memory);
  deprecated("stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save", gather_fp16);
  if (cpu_offload && c.offload_optimizer.device == OffloadDevice::None) c.offload_optimizer.device = OffloadDevice::Cpu;
  if (cpu_offload_param && c.offload_param.device == OffloadDevice::None) c.offload_param.device = OffloadDevice::Cpu;
  if (gather_fp16) c.stage3_gather_16bit_weights_on_model_save = true;
}

}  // namespace

template <class V>
void visit(V& v, OffloadParamConfig& c) {
  visit_device(v, c);
  v.field("buffer_count", c.buffer_count, at_least(0));
  v.field("buffer_size", c.buffer_size, at_least(0));
  v.field("max_in_cpu", c.max_in_cpu, at_least(0));
  v.field("pin_memory", c.pin_memory);
}

template <class V>
void visit(V& v, OffloadOptimizerConfig& c) {
  visit_device(v, c);
  v.field("buffer_count", c.buffer_count, at_least(0));
  v.field("pin_memory", c.pin_memory);
  v.field("pipeline_read", c.pipeline_read);
  v.field("pipeline_write", c.pipeline_write);
  v.field("fast_init", c.fast_init);
  v.field("ratio", c.ratio, between(0, 1));
  v.field("super_offload", c.super_offload);
  v.field("convert_grad_on_cpu", c.convert_grad_on_cpu);
  v.field("cpuadam_cores_perc", c.cpuadam_cores_perc, between(0, 1));
}

// The stage3_* keys are also accepted without the prefix, as DeepSpeed's field names.
template <class V>
void visit(V& v, ZeroConfig& c) {
  v.field("stage", c.stage, between(0, 3));
  v.field("contiguous_gradients", c.contiguous_gradients);
  v.field("reduce_scatter", c.reduce_scatter);
  v.field("reduce_bucket_size", c.reduce_bucket_size, at_least(0));
  v.field("use_multi_rank_bucket_allreduce", c.use_multi_rank_bucket_allreduce);
  v.field("allgather_partitions", c.allgather_partitions);
  v.field("allgather_bucket_size", c.allgather_bucket_size, at_least(0));
  if constexpr (V::kReading) c.overlap_comm = c.stage == 3;
  v.field("overlap_comm", c.overlap_comm);
  v.field("load_from_fp32_weights", c.load_from_fp32_weights);
  v.field("elastic_checkpoint", c.elastic_checkpoint);
  v.section("offload_param", c.offload_param);
  v.section("offload_optimizer", c.offload_optimizer);
  v.field("sub_group_size", c.sub_group_size, at_least(0));
  v.field({"stage3_prefetch_bucket_size", "prefetch_bucket_size"}, c.stage3_prefetch_bucket_size, at_least(0));
  v.field({"stage3_param_persistence_threshold", "param_persistence_threshold"},
          c.stage3_param_persistence_threshold, at_least(0));
  v.field({"stage3_model_persistence_threshold", "model_persistence_threshold"},
          c.stage3_model_persistence_threshold, at_least(0));
  v.field({"stage3_max_live_parameters", "max_live_parameters"}, c.stage3_max_live_parameters, at_least(0));
  v.field({"stage3_max_reuse_distance", "max_reuse_distance"}, c.stage3_max_reuse_distance, at_least(0));
  v.field({"stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save"},
          c.stage3_gather_16bit_weights_on_model_save);
  v.field({"stage3_module_granularity_threshold", "module_granularity_threshold"},
          c.stage3_module_granularity_threshold, at_least(0));
  v.field({"stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params"},
          c.stage3_use_all_reduce_for_fetch_params);
  v.field({"stage3_allgather_sequential", "allgather_sequential"}, c.stage3_allgather_sequential);
  v.field({"stage3_partition_stream_chunk_size", "partition_stream_chunk_size"},
          c.stage3_partition_stream_chunk_size, at_least(0));
  v.field("ignore_unused_parameters", c.ignore_unused_parameters);
  v.field("legacy_stage1", c.legacy_stage1);
  v.field("round_robin_gradients", c.round_robin_gradients);
  v.field("compute_grad_norm", c.compute_grad_norm);
  v.field("parameter_alignment", c.parameter_alignment);
  v.field("zero_hpz_partition_size", c.zero_hpz_partition_size, at_least(0));
  v.field("zero_quantized_weights", c.zero_quantized_weights);
  v.field("zero_quantized_nontrainable_weights", c.zero_quantized_nontrainable_weights);
  v.field("zero_quantized_gradients", c.zero_quantized_gradients);
  v.field("mics_shard_size", c.mics_shard_size, at_least(-1));
  v.field("mics_hierarchical_params_gather", c.mics_hierarchical_params_gather);
  v.field("memory_efficient_linear", c.memory_efficient_linear);
  v.field("pipeline_loading_checkpoint", c.pipeline_loading_checkpoint);
  v.field("override_module_apply", c.override_module_apply);
  v.field("log_trace_cache_warnings", c.log_trace_cache_warnings);
  v.field("enable_sanity_checks", c.enable_sanity_checks);
  v.field("save_muon_momentum_buffer_in_memory", c.save_muon_momentum_buffer_in_memory);
  v.field("zeropp_loco_param", c.zeropp_loco_param);
  v.field("zenflow", c.zenflow);
  v.field("leaf_module", c.leaf_module);
  if constexpr (V::kReading) {
    read_deprecated_keys(v, c);
    if (c.offload_optimizer.ratio < 1.0 && c.stage != 3)
      throw v.error("offload_optimizer.ratio", "below 1 (partial offload) needs stage 3, got " +
                                                   std::to_string(c.offload_optimizer.ratio) + " with stage " +
                                                   std::to_string(c.stage));
    if (c.offload_param.device != OffloadDevice::None && c.stage != 3)
      v.warn("'" + v.path_of("offload_param") + "' has effect only with stage 3, got stage " + std::to_string(c.stage));
    if (c.offload_optimizer.device != OffloadDevice::None && c.stage == 0)
      v.warn("'" + v.path_of("offload_optimizer") + "' has effect only with stages 1-3, got stage 0");
  }
}

template <class V>
void visit(V& v, AioConfig& c) {
  v.field("block_size", c.block_size, at_least(1));
  v.field("queue_depth", c.queue_depth, at_least(1));
  v.field({"intra_op_parallelism", "thread_count"}, c.intra_op_parallelism, at_least(1));
  v.field("single_submit", c.single_submit);
  v.field("overlap_events", c.overlap_events);
  v.field("use_gds", c.use_gds);
}

template void visit(Reader&, OffloadParamConfig&);
template void visit(Writer&, OffloadParamConfig&);
template void visit(Reader&, OffloadOptimizerConfig&);
template void visit(Writer&, OffloadOptimizerConfig&);
template void visit(Reader&, ZeroConfig&);
template void visit(Writer&, ZeroConfig&);
template void visit(Reader&, AioConfig&);
template void visit(Writer&, AioConfig&);

}  // namespace config_detail
}  // namespace ds
