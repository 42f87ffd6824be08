// ds::Config: a DeepSpeed ds_config.json read into plain structs that carry DeepSpeed's defaults.
//
// from_json/from_file check types, ranges and contradictions and throw ds::Error naming the key and
// the value; an unknown key is one warning naming it (logged, and kept in warnings()). null means
// "not given": the default applies, or the value is derived. "auto" (Hugging Face configs) is
// resolved as the HF Trainer does, from the "dstrain" block's settings (is_auto() tells which keys).
// Batch sizes depend on the data-parallel world size: resolve_batch() completes them.
// docs/config.md lists every key, its default and range, and what is accepted but not acted on.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ds {
namespace config_detail {
class AutoValues;
}

enum class OptimizerType { None, Adam, AdamW, SGD, OneBitAdam, Lamb, OneBitLamb, ZeroOneAdam };
enum class SchedulerType { None, WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest };
enum class OffloadDevice { None, Cpu, Nvme };

// DeepSpeed's spellings: "Adam", "WarmupDecayLR", "cpu"; "none" for None.
const char* to_string(OptimizerType type);
// The 1-bit family (OneBitAdam, OneBitLamb, ZeroOneAdam): each exchanges its own compressed state.
bool is_onebit(OptimizerType type);
const char* to_string(SchedulerType type);
const char* to_string(OffloadDevice device);

// The top-level scalar keys.
struct TrainingConfig {
  int steps_per_print = 10;
  double gradient_clipping = 0.0;  // max global gradient norm; 0 disables clipping
  int64_t seed = 1234;             // dstrain's key: seeds model init and data order
  bool wall_clock_breakdown = false;
  bool memory_breakdown = false;
  bool dump_state = false;
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  bool sparse_gradients = false;
  std::optional<std::string> communication_data_type;  // "fp16", "bf16", "fp32"; unset: the precision
  bool disable_allgather = false;
  bool fp32_allreduce = false;
  bool zero_allow_untested_optimizer = false;
  bool zero_force_ds_cpu_optimizer = true;
};

// "optimizer": {"type": ..., "params": {...}}. Which params apply depends on the type.
struct OptimizerConfig {
  OptimizerType type = OptimizerType::None;  // None: no "optimizer" block, the caller brings one
  double lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  // Adam, AdamW, the 1-bit family, Lamb.
  bool bias_correction = true;
  // Adam only: DeepSpeed's Adam decouples weight decay (AdamW) unless this is false. AdamW: always.
  bool adam_w_mode = true;
  bool torch_adam = false;
  // SGD (torch.optim.SGD semantics; lr is required).
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  // OneBitAdam, OneBitLamb (freeze_step); those and ZeroOneAdam (cuda_aware, comm_backend_name).
  int64_t freeze_step = 100000;
  bool cuda_aware = false;
  std::string comm_backend_name = "nccl";  // "nccl" or "mpi"
  // Lamb (FusedLamb), OneBitLamb: the trust ratio ||p|| / ||update|| is clamped to [min_coeff, max_coeff].
  double max_coeff = 10.0;
  double min_coeff = 0.01;
  bool eps_inside_sqrt = false;  // Lamb: sqrt(v + eps) rather than sqrt(v) + eps
  // OneBitLamb's compression stage: the running lamb coefficient and the bounds of its scaling factor.
  double coeff_beta = 0.9;
  double factor_max = 4.0;
  double factor_min = 0.5;
  double factor_threshold = 0.1;
  // ZeroOneAdam (0/1 Adam).
  int64_t var_freeze_step = 100000;
  int64_t var_update_scaler = 16;
  int64_t local_step_scaler = 32678;  // DeepSpeed's default, as written there
  int64_t local_step_clipper = 16;
};

// "scheduler": {"type": ..., "params": {...}}, DeepSpeed's parameter names.
struct SchedulerConfig {
  SchedulerType type = SchedulerType::None;
  // WarmupLR, WarmupDecayLR (warmup_num_steps and warmup_type also WarmupCosineLR).
  double warmup_min_lr = 0.0;
  // WarmupDecayLR: 0.001 when not given. WarmupLR: not given means the optimizer's lr.
  std::optional<double> warmup_max_lr;
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // "log" or "linear"
  // WarmupDecayLR, WarmupCosineLR: required; "auto" is dstrain.steps (docs/config.md, "auto" values).
  std::optional<int64_t> total_num_steps;
  // WarmupCosineLR.
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 0.0001;
  // OneCycle (cycle_min_lr and cycle_max_lr are required).
  double cycle_min_lr = 0.0;
  double cycle_max_lr = 0.0;
  double decay_lr_rate = 0.0;
  int64_t cycle_first_step_size = 2000;
  int64_t cycle_second_step_size = 2000;  // not given: cycle_first_step_size
  int64_t cycle_first_stair_count = 0;
  int64_t cycle_second_stair_count = 0;   // not given: cycle_first_stair_count
  int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
  // LRRangeTest.
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

struct Fp16Config {
  bool enabled = false;
  bool auto_cast = false;
  double loss_scale = 0.0;  // 0: dynamic loss scaling; otherwise this static scale
  int initial_scale_power = 16;  // dynamic scaling starts at 2^initial_scale_power
  int loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
  bool fp16_master_weights_and_grads = false;
};

struct Bf16Config {
  bool enabled = false;
  bool immediate_grad_update = false;
  bool check_grad_overflow = false;
  bool bf16_master_weights_and_grads = false;
  bool bf16_optimizer_states = false;
};

// zero_optimization.offload_param (ZeRO stage 3 only).
struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::None;
  std::string nvme_path;  // required when device is Nvme
  int buffer_count = 5;
  int64_t buffer_size = 100000000;
  int64_t max_in_cpu = 1000000000;
  bool pin_memory = false;
};

// zero_optimization.offload_optimizer (ZeRO stages 1-3).
struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::None;
  std::string nvme_path;  // required when device is Nvme
  int buffer_count = 4;
  bool pin_memory = false;
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool fast_init = false;
  double ratio = 1.0;  // share of the optimizer step done on the CPU; below 1 needs stage 3
  bool super_offload = false;
  bool convert_grad_on_cpu = true;
  double cpuadam_cores_perc = 0.8;
};

// zero_optimization. Element counts are int64. Members are named as the JSON keys.
struct ZeroConfig {
  int stage = 0;  // 0 disabled, 1 optimizer states, 2 + gradients, 3 + parameters
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500000000;
  bool use_multi_rank_bucket_allreduce = true;
  bool allgather_partitions = true;
  int64_t allgather_bucket_size = 500000000;
  bool overlap_comm = false;  // not given: true for stage 3, false otherwise (DeepSpeed's rule)
  bool load_from_fp32_weights = true;
  bool elastic_checkpoint = false;
  OffloadParamConfig offload_param;
  OffloadOptimizerConfig offload_optimizer;
  int64_t sub_group_size = 1000000000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_model_persistence_threshold = std::numeric_limits<int64_t>::max();
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  bool stage3_gather_16bit_weights_on_model_save = false;
  int64_t stage3_module_granularity_threshold = 0;
  bool stage3_use_all_reduce_for_fetch_params = false;
  bool stage3_allgather_sequential = false;
  int64_t stage3_partition_stream_chunk_size = 0;
  bool ignore_unused_parameters = true;
  bool legacy_stage1 = false;
  bool round_robin_gradients = false;
  bool compute_grad_norm = true;
  bool parameter_alignment = false;
  int zero_hpz_partition_size = 1;
  bool zero_quantized_weights = false;
  bool zero_quantized_nontrainable_weights = false;
  bool zero_quantized_gradients = false;
  int mics_shard_size = -1;  // -1: MiCS off
  bool mics_hierarchical_params_gather = false;
  bool memory_efficient_linear = true;
  bool pipeline_loading_checkpoint = false;
  bool override_module_apply = true;
  bool log_trace_cache_warnings = false;
  bool enable_sanity_checks = false;
  bool save_muon_momentum_buffer_in_memory = false;
  // Kept as written; null when absent.
  nlohmann::json zeropp_loco_param;
  nlohmann::json zenflow;
  nlohmann::json leaf_module;
};

// "aio": the asynchronous I/O used for NVMe offload (ds::io::AioHandle's parameters).
struct AioConfig {
  int64_t block_size = 1048576;
  int queue_depth = 8;
  int intra_op_parallelism = 1;  // DeepSpeed's older name: thread_count
  bool single_submit = false;
  bool overlap_events = true;
  bool use_gds = false;
};

// "checkpoint": DeepSpeed's checkpoint block.
struct CheckpointConfig {
  std::string tag_validation = "Warn";  // "Ignore", "Warn" or "Fail"
  bool load_universal = false;
  // Each node saves to and loads from its own save folder (the same path on every node, each on
  // the node's own disk): every rank writes its shard there, each node's first rank the index and
  // `latest`. docs/checkpoints.md.
  bool use_node_local_storage = false;
  // Kept as written; null when absent.
  nlohmann::json parallel_write;
  nlohmann::json writer;
};

// "pipeline": DeepSpeed's pipeline-engine block.
struct PipelineConfig {
  std::optional<int> stages;  // number of pipeline stages; not given or "auto": the engine decides
  std::string partition = "best";  // "best", "parameters", "uniform" or "type:<regex>"
  bool seed_layers = false;
  int activation_checkpoint_interval = 0;
  bool pipe_partitioned = true;
  bool grad_partitioned = true;
};

class Config {
 public:
  // Missing file, unreadable file, invalid JSON (with its byte offset) or a duplicate key throw
  // ds::Error with the path. Comments (// and /* */) are skipped, as DeepSpeed's hjson loader does.
  static Config from_file(const std::string& path);
  static Config from_json(const nlohmann::json& json);
  // The file's JSON as written, read as from_file reads it (comments skipped; a duplicate key or a
  // number that overflows a double is an error naming the key and the path), for callers that edit
  // it before from_json, as the trainer's --set does.
  static nlohmann::json parse_file(const std::string& path);
  // "--set KEY=VALUE": writes VALUE (JSON, else a string) at the dotted KEY, creating objects on the
  // way. KEY through a value that is not an object, or VALUE a number that overflows, throws
  // ds::Error naming KEY; a VALUE of the wrong type is refused by from_json, naming KEY.
  static void apply_override(nlohmann::json& json, const std::string& assignment);

  // The batch rule: train_batch_size == train_micro_batch_size_per_gpu *
  // gradient_accumulation_steps * dp_world_size. Any two given keys derive the third; only
  // train_batch_size: gas 1, micro = train / world; only micro: gas 1, train = micro * world.
  // Throws ds::Error naming the values when they do not fit the world size. May be called again
  // with another world size; it always starts from the keys as given.
  void resolve_batch(int dp_world_size);
  // What the engine needs beyond a config DeepSpeed accepts (from_json accepts these, as DeepSpeed
  // does, e.g. for zero::Init or `dstrain estimate`): an optimizer (deepspeed.initialize can take
  // one from the caller, ds::initialize cannot), and offload_param "nvme" only at stage 3
  // (DeepSpeed ignores it below). Throws ds::Error naming "optimizer" or
  // "zero_optimization.offload_param.device".
  void check_trainable() const;
  bool batch_resolved() const { return dp_world_size_ > 0; }
  // These throw ds::Error until resolve_batch() has run.
  int dp_world_size() const;
  int train_batch_size() const;
  int train_micro_batch_size_per_gpu() const;
  int gradient_accumulation_steps() const;

  const TrainingConfig& training() const { return training_; }
  const OptimizerConfig& optimizer() const { return optimizer_; }
  const SchedulerConfig& scheduler() const { return scheduler_; }
  const Fp16Config& fp16() const { return fp16_; }
  const Bf16Config& bf16() const { return bf16_; }
  const ZeroConfig& zero_optimization() const { return zero_; }
  const AioConfig& aio() const { return aio_; }
  const PipelineConfig& pipeline() const { return pipeline_; }
  const CheckpointConfig& checkpoint() const { return checkpoint_; }

  // Our own model and data settings, the free-form top-level "dstrain" object ({} if absent).
  const nlohmann::json& dstrain_block() const { return dstrain_; }
  // A switch of that block, dstrain.<key>: `fallback` when absent or null, a ds::Error naming the
  // key for anything but true or false.
  bool dstrain_flag(const std::string& key, bool fallback) const;
  // Top-level DeepSpeed keys that are accepted and kept as written but have no struct yet
  // (activation_checkpointing, tensorboard, flops_profiler, ...): an object keyed by name.
  const nlohmann::json& untyped() const { return untyped_; }
  // One line per unknown or deprecated key, as logged, e.g. "unknown key 'zero_optimization.foo'".
  const std::vector<std::string>& warnings() const { return warnings_; }
  // Hugging Face "auto" (docs/config.md): true where the config wrote "auto" at this dotted path
  // (first spelling, e.g. "bf16.enabled"), resolved or not. zero_optimization.reduce_bucket_size,
  // stage3_prefetch_bucket_size and stage3_param_persistence_threshold stay "auto": their members
  // keep DeepSpeed's defaults, to_json() writes "auto", and whoever knows the model's hidden size d
  // resolves them (HF: d*d, 0.9*d*d, 10*d).
  bool is_auto(const std::string& path) const;
  // True where the config set this key (or block) to a value: not absent, null or "auto".
  bool given(const std::string& path) const;
  // Whether `name` is a setting of the "dstrain" block that "auto" values are resolved from (HF's
  // TrainingArguments names: "learning_rate", "per_device_train_batch_size", ...; docs/config.md).
  static bool is_auto_setting(const std::string& name);
  // The keys this config sets (away from DeepSpeed's default, or a kept block that is enabled) that
  // dstrain accepts but does not act on yet, e.g. "zero_optimization.offload_optimizer"; the engine
  // warns once about each at start. The table is runtime/src/config_not_acted_on.cpp.
  std::vector<std::string> keys_not_acted_on() const;

  // The effective config: every typed key with its value or default, the untyped blocks and the
  // dstrain block. Batch keys appear as given until resolve_batch(), then all three. Reading it
  // back with from_json gives the same config, without warnings.
  nlohmann::json to_json() const;

 private:
  Config() = default;
  void check_batch_keys() const;
  void resolve_amp_autos(const config_detail::AutoValues& autos);
  void log_resolved_autos(const config_detail::AutoValues& autos) const;
  void log_derived_autos() const;
  void check_cross_section_rules() const;

  std::optional<int> given_train_batch_size_;
  std::optional<int> given_micro_batch_size_;
  std::optional<int> given_accumulation_steps_;
  int dp_world_size_ = 0;
  int train_batch_size_ = 0;
  int micro_batch_size_ = 0;
  int accumulation_steps_ = 0;

  TrainingConfig training_;
  OptimizerConfig optimizer_;
  SchedulerConfig scheduler_;
  Fp16Config fp16_;
  Bf16Config bf16_;
  ZeroConfig zero_;
  AioConfig aio_;
  PipelineConfig pipeline_;
  CheckpointConfig checkpoint_;
  nlohmann::json dstrain_ = nlohmann::json::object();
  nlohmann::json untyped_ = nlohmann::json::object();
  std::vector<std::string> warnings_;
  std::set<std::string> auto_keys_;
  std::set<std::string> given_keys_;
};

}  // namespace ds
