#include "dstrain/engine/engine.hpp"

#include <torch/torch.h>

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <utility>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/host_policy.hpp"
#include "dstrain/engine/memory_plan.hpp"
#include "dstrain/engine/optim/gradient_clipping.hpp"
#include "dstrain/engine/optim/lamb.hpp"
#include "dstrain/engine/optim/onebit_adam.hpp"
#include "dstrain/engine/optim/onebit_lamb.hpp"
#include "dstrain/engine/optim/zero_one_adam.hpp"
#include "dstrain/engine/partition/model_weights.hpp"
#include "dstrain/io/aio_settings.hpp"
#include "dstrain/io/swap_preflight.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/zero/init.hpp"
#include "dstrain/zero/node_group.hpp"
#include "dstrain/zero/param_swapper.hpp"
#include "dstrain/zero/slice_gather.hpp"

namespace ds {
namespace {

// qgZ's width: int4 within the node and across, as ZeRO++ and DeepSpeed's all_to_all_quant_reduce.
constexpr int kQuantizedGradientBits = 4;

at::ScalarType model_dtype(const Config& config) {
  if (config.bf16().enabled) return at::kBFloat16;
  if (config.fp16().enabled) return at::kHalf;
  return at::kFloat;
}

// offload_param.device "nvme": this rank's parameter chunks go to a swap file, or are read from
// the optimizer's master file where that holds them (`master` not null), or from the sub-groups
// it keeps in memory between steps (docs/offload.md).
std::unique_ptr<zero::ParamSwapper> make_param_swapper(const Config& config, const ZeroConfig& zero,
                                                       const zero::ShardLayout& layout, zero::MasterFile* master) {
  const OffloadParamConfig& offload = zero.offload_param;
  zero::ParamSwapper::Options options;
  options.nvme_path = offload.nvme_path;
  options.master_file = master;
  options.rank = layout.rank();
  for (size_t i = 0; i < layout.size(); ++i) options.chunks.push_back({layout.slot(i).shard_offset, layout.slot(i).chunk});
  options.buffer_count = offload.buffer_count;
  options.buffer_size = offload.buffer_size;
  options.max_in_cpu = offload.max_in_cpu;
  options.aio = io::aio_settings(config.aio());
  return std::make_unique<zero::ParamSwapper>(std::move(options));
}

// Whether two of `params` share one storage (a tied weight registered twice).
bool shares_storage(const std::vector<at::Tensor>& params) {
  std::set<const void*> storages;
  for (const at::Tensor& param : params)
    if (!storages.insert(param.storage().unsafeGetStorageImpl()).second) return true;
  return false;
}

}  // namespace

EngineCore::EngineCore(std::shared_ptr<torch::nn::Module> model, Config config, std::shared_ptr<comm::Backend> dp_group,
                       EngineOptions options)
    : model_(std::move(model)),
      config_(std::move(config)),
      options_(options),
      group_(dp_group ? std::move(dp_group) : comm::init_distributed("mpi")),
      schedule_(config_.scheduler(), config_.optimizer().lr),
      scaler_(config_.fp16()) {
  const HostPolicy& host = apply_host_policy();
  if (!config_.batch_resolved()) config_.resolve_batch(group_->world_size());
  plan_ = plan_engine_memory(config_, *model_, *group_);  // every buffer's size, within the budget
  // The config alone does not know the device: on a GPU offload_optimizer.pin_memory pins
  // ZeRO-Offload's host buffers (HostOffload), so only a CPU model hears that it does nothing.
  const bool on_gpu = !model_->parameters().empty() && !model_->parameters().front().device().is_cpu();
  for (const std::string& key : config_.keys_not_acted_on())
    if (!(on_gpu && key == "zero_optimization.offload_optimizer.pin_memory"))
      log::warn("config key '", key, "' is accepted but not acted on by dstrain yet (docs/config.md)");
  config_.check_trainable();
  const int stage = config_.zero_optimization().stage;

  if (config_.fp16().enabled && !model_->parameters().empty() && model_->parameters().front().device().is_cpu())
    throw Error("fp16 needs a GPU, and this model is on the CPU, where LibTorch lacks most Half kernels (LayerNorm "
                "fails at the first step); use bf16.enabled there")
        .with_key("fp16.enabled");
  model_->to(model_dtype(config_));
  for (auto& item : model_->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    names_.push_back(item.key());
    params_.push_back(item.value());
    shapes_.push_back(item.value().sizes().vec());
  }
  if (params_.empty()) throw Error("the model has no trainable parameters");
  broadcast_parameters();

  // Every piece of model state lives where the model does (the user moved it there, e.g. cuda:N).
  const at::Device device = params_.front().device();
  const int partitions = stage >= 1 ? group_->world_size() : 1;
  layout_ = std::make_unique<zero::ShardLayout>(params_, partitions, stage >= 1 ? group_->rank() : 0);
  const ZeroConfig& zero = plan_.zero;
  check_offload_devices(device);
  const PartitionKind kind =
      choose_partition(zero, {partitions, params_.front().scalar_type() == at::kFloat, !device.is_cpu(),
                              shares_storage(params_)});
  partition_ = make_partition(
      kind, PartitionContext{config_, zero, params_, shapes_, *layout_, *group_, device,
                             options_.gather_in_forward && zero::gathers_in_forward(config_), breakdown_timers(),
                             [this](at::Device on, int64_t state_numel) { return make_optimizer(on, state_numel); }});

  zero::GradientReducer::TakenFn on_taken;
  if (stage == 3) on_taken = [this](size_t i) { coordinator_->gradient_taken(i); };
  // The reducer first: autograd records each parameter's whole shape when its gradient
  // accumulator is created, and stage 3 is about to leave the parameters empty.
  reducer_ = std::make_unique<zero::GradientReducer>(params_, *layout_, *group_, zero.reduce_bucket_size,
                                                     zero.overlap_comm, std::move(on_taken));
  reducer_->set_timers(breakdown_timers());
  if (zero.zero_quantized_gradients && layout_->partitions() > 1)
    reducer_->set_quantized(
        zero::node_group(*group_, rank_env_from_environment(), "zero_optimization.zero_quantized_gradients"),
        kQuantizedGradientBits);
  if ((zero.zero_quantized_weights || zero.zero_hpz_partition_size > 1) && stage != 3)
    log::warn("zero_quantized_weights and zero_hpz_partition_size act at ZeRO stage 3 only (this is stage ", stage,
              ")");
  if (zero.zero_quantized_gradients && layout_->partitions() == 1)
    log::warn("zero_quantized_gradients acts on a partitioned reduce-scatter (ZeRO stages 1-3, several ranks)");
  if (zero::GradientReducer::ShardSink sink = partition_->gradient_sink()) reducer_->set_shard_sink(std::move(sink));
  if (stage == 3) {
    // In fp32 (offload_param's only dtype) the optimizer's master file holds exactly the
    // partition, rewritten by every step: on the same disk the parameters are read from it rather
    // than written to a second file each step.
    zero::OptimizerSwapper* swapper = partition_->swapper();
    zero::MasterFile* master =
        swapper && io::same_file_system(zero.offload_param.nvme_path, swapper->folder()) ? swapper : nullptr;
    coordinator_ = std::make_unique<zero::ParameterCoordinator>(
        params_, *layout_, *group_, zero,
        zero.offload_param.device == OffloadDevice::Nvme ? make_param_swapper(config_, zero, *layout_, master) : nullptr);
  }
  weights_ = std::make_unique<ModelWeights>(params_, *layout_, *group_, coordinator_.get(), zero.allgather_bucket_size);
  partition_->bind(*reducer_, *weights_);
  lr_ = schedule_.lr(0);
  // Building and sharding the model freed what it no longer holds (whole parameters, staging
  // copies); the host policy never trims the heap, so without this those pages would stay resident
  // under every step's peak (~250 MB per rank at stage 3 of a 100M model).
  malloc_trim(0);

  log::info("engine: ZeRO stage ", stage, ", ", params_.size(), " parameter tensors, dp world ",
            group_->world_size(), ", train_batch_size ", train_batch_size(), " = micro ",
            train_micro_batch_size_per_gpu(), " x accumulation ", gradient_accumulation_steps(), " x ranks ",
            group_->world_size(), ", dtype ", c10::toString(model_dtype(config_)), ", device ", device.str(), ", ",
            describe(host));
}

EngineCore::~EngineCore() = default;

void EngineCore::check_offload_devices(at::Device device) const {
  const ZeroConfig& zero = plan_.zero;
  if (zero.offload_optimizer.device != OffloadDevice::None && zero.stage == 0 && !device.is_cpu())
    throw Error("offload_optimizer moves the optimizer's shard off " + device.str() +
                ", which needs ZeRO stage 1, 2 or 3 (as DeepSpeed's ZeRO-Offload); this is stage 0")
        .with_key("zero_optimization.offload_optimizer.device");
  // The 1-bit family exchanges its momentum from this rank's own gradients on the model's device,
  // which ZeRO-Offload's host gradient shard never holds.
  if (zero.offload_optimizer.device == OffloadDevice::Cpu && is_onebit(config_.optimizer().type) && !device.is_cpu())
    throw Error("offload_optimizer.device \"cpu\" for a model on " + device.str() +
                " steps Adam, AdamW, SGD or Lamb; the 1-bit optimizers keep their state on the model's device")
        .with_key("zero_optimization.offload_optimizer.device");
  using Offload = std::pair<const char*, OffloadDevice>;
  for (const auto& [key, offload] : {Offload{"offload_optimizer", zero.offload_optimizer.device},
                                     Offload{"offload_param", zero.offload_param.device}})
    if (offload == OffloadDevice::Cpu) {
      if (device.is_cpu())
        log::info("zero_optimization.", key, ".device \"cpu\": the model runs on the CPU, so its state already "
                  "lives in host memory; nothing to move");
      else if (std::string(key) == "offload_optimizer")
        log::info("zero_optimization.offload_optimizer.device \"cpu\": the fp32 master, optimizer state and "
                  "gradient shard of the model on ", device.str(), " live in ",
                  zero.offload_optimizer.pin_memory ? "pinned" : "pageable", " host memory (docs/offload.md)");
      else
        log::warn("zero_optimization.", key, ".device \"cpu\" is accepted but not acted on for a model on ",
                  device.str(), " (docs/offload.md)");
    }
}

// The optimizers that need the group (they communicate) or the layout (per-parameter norms) are
// built here; the others by make_shard_optimizer.
std::unique_ptr<ShardOptimizer> EngineCore::make_optimizer(at::Device device, int64_t state_numel) {
  const OptimizerConfig& config = config_.optimizer();
  switch (config.type) {
    case OptimizerType::OneBitAdam:
      return std::make_unique<OneBitAdamShardOptimizer>(config, *layout_, device, *group_);
    case OptimizerType::Lamb:
      return std::make_unique<LambShardOptimizer>(config, *layout_, device, *group_);
    case OptimizerType::OneBitLamb:
      return std::make_unique<OneBitLambShardOptimizer>(config, *layout_, device, *group_);
    case OptimizerType::ZeroOneAdam:
      return std::make_unique<ZeroOneAdamShardOptimizer>(config, *layout_, device, *group_);
    default:
      return make_shard_optimizer(config, state_numel, device);
  }
}

void EngineCore::broadcast_parameters() {
  // One parameter at a time, in place: never a second copy of the whole model. Parameters built
  // partitioned (ds::zero::Init) were broadcast as they were built.
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!zero::is_partitioned(params_[i])) {
      group_->broadcast(params_[i].detach(), 0);
    } else if (zero_stage() != 3) {
      throw Error("parameter '" + names_[i] + "' was built partitioned (ds::zero::Init), which needs ZeRO stage 3")
          .with_key("zero_optimization.stage");
    }
  }
}

bool EngineCore::is_gradient_accumulation_boundary() const {
  return (micro_steps_ + 1) % gradient_accumulation_steps() == 0;
}

EngineCore::ForwardScope::ForwardScope(EngineCore& engine)
    : hooks_(engine.coordinator_ ? static_cast<zero::ModuleHooks*>(engine.coordinator_.get())
                                 : engine.partition_->forward_hooks()),
      timer_(engine.breakdown_timers(), "forward") {
  if (engine.coordinator_) engine.coordinator_->begin_forward();
}

EngineCore::ForwardScope::~ForwardScope() = default;

void EngineCore::backward(const at::Tensor& loss) {
  double scale = 1.0 / gradient_accumulation_steps();
  if (config_.fp16().enabled) scale *= scaler_.scale();
  backward({loss * scale}, {});
}

void EngineCore::backward(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& gradients) {
  ScopedTimer timer(breakdown_timers(), "backward");
  wait_for_parameters();  // the forward waited for those it used; a model may read more in backward
  // An optimizer that exchanges its own state (OneBitAdam after freeze_step) takes this rank's
  // gradients as they are: the full allreduce is the traffic it exists to save.
  const bool local_only = !partition_->optimizer().needs_reduced_gradients(optimizer_steps_ + 1);
  // Stages 0-1 reduce at the accumulation boundary only (autograd accumulates param.grad() until
  // then), stages 2-3 every micro-step; but the 1-bit family's reduced steps at stage 2 reduce at
  // the boundary, as stage 1: reduced per micro-step, their sum of averages is an ulp from stage 0's
  // average of sums, which the compressed steps turn into another trajectory (docs/optimizers.md,
  // Tests), and the whole gradients it holds meanwhile are no more than its compressed steps hold.
  const bool onebit = is_onebit(config_.optimizer().type);
  const bool each_micro_step = zero_stage() >= 3 || (zero_stage() == 2 && !(onebit && !local_only));
  reducer_->set_reducing(each_micro_step || is_gradient_accumulation_boundary());
  reducer_->set_local_only(local_only);
  if (coordinator_) coordinator_->begin_backward();
  // With dstrain.step_in_backward the NVMe partition begins the coming step in this backward, with
  // the lr and step number step() will use.
  partition_->begin_backward(is_gradient_accumulation_boundary(), {schedule_.lr(optimizer_steps_), optimizer_steps_ + 1});
  // Autograd runs the hooks as backward reaches them:
  //   ParameterCoordinator::pre_backward    gradient reached a module's outputs: gather the
  //                                         module's parameters (stage 3), prefetch the previous
  //   GradientReducer::on_gradient_ready    a parameter's gradient is complete: pack it into its
  //                                         bucket; full buckets are reduced while backward goes on
  //   ParameterCoordinator::gradient_taken  ... and release the parameter (stage 3)
  //   OptimizerPartition::gradient_sink     a bucket's reduction is done: its range goes where the
  //                                         partition keeps the gradient (host memory, a swap
  //                                         file; with dstrain.step_in_backward each sub-group
  //                                         whose gradient is whole is swapped in, stepped and
  //                                         swapped out there)
  torch::autograd::backward(outputs, gradients);
  const bool reduced = reducer_->reducing();
  if (reduced) reducer_->finish_backward();  // the buckets left open go out; every reduction is waited for
  partition_->finish_backward(reduced);
  if (coordinator_) coordinator_->release_all();
}

at::Tensor EngineCore::reduced_gradient_chunk(const at::Tensor& param) {
  const size_t i = index_of(param, "reduced_gradient_chunk");
  if (reducer_->local_only() && layout_->partitions() > 1)
    throw Error("the 1-bit optimizers at ZeRO stages 1-2 keep each rank's whole local gradients after the freeze, "
                "not reduced chunks (pipeline parallelism needs zero_optimization.stage 0 with them)")
        .with_key("zero_optimization.stage");
  return partition_->reduced_gradient_chunk(i);
}

at::Tensor EngineCore::master_weights_chunk(const at::Tensor& param) const {
  return partition_->master_chunk(index_of(param, "master_weights_chunk"));
}

size_t EngineCore::index_of(const at::Tensor& param, const char* caller) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].is_same(param)) return i;
  throw Error(std::string(caller) + ": not a parameter of this engine");
}

std::optional<double> EngineCore::unscale_and_norm(const at::Tensor& grads, double loss_scale) {
  const bool fp16 = config_.fp16().enabled;
  if (!grads.defined()) {
    // On NVMe: from the sum of squares taken as the boundary backward wrote the file (the loss
    // scale, a power of two, divides out exactly). A non-finite element makes it non-finite on
    // every rank, so it is the overflow vote too.
    at::Tensor sum_of_squares =
        at::full({1}, partition_->gradient_sum_of_squares() / (loss_scale * loss_scale), at::kDouble);
    if (layout_->partitions() > 1) group_->all_reduce(sum_of_squares, comm::ReduceOp::Sum);
    const double total = sum_of_squares.item<double>();
    if (fp16 && !scaler_.update(!std::isfinite(total))) return std::nullopt;
    return std::sqrt(total);
  }
  if (fp16) {
    grads.div_(loss_scale);
    if (!scaler_.update(any_overflow(grads))) return std::nullopt;
  }
  return global_grad_norm(grads);
}

bool EngineCore::any_overflow(const at::Tensor& grads) {
  at::Tensor flag = grads.isfinite().all().logical_not().to(at::kFloat).reshape({1});
  group_->all_reduce(flag, comm::ReduceOp::Max);
  return flag.item<float>() > 0;
}

double EngineCore::global_grad_norm(const at::Tensor& grads) {
  // On the CPU one fused pass without a shard-sized temporary; on a device, tensor ops.
  at::Tensor sum_sq = grads.is_cpu()
                          ? at::full({1}, fused::sum_of_squares(grads.data_ptr<float>(), grads.numel()), at::kDouble)
                          : grads.pow(2).sum().to(at::kDouble).reshape({1});
  // Under partitioning each rank holds a different shard; unpartitioned, all hold the same, or,
  // when the gradients were left local (the 1-bit family), each clips its own, as DeepSpeed does.
  if (layout_->partitions() > 1 && !reducer_->local_only()) group_->all_reduce(sum_sq, comm::ReduceOp::Sum);
  return std::sqrt(sum_sq.item<double>());
}

void EngineCore::wait_for_parameters() { partition_->wait_for_parameters(); }

void EngineCore::step() {
  wait_for_parameters();  // before this rank's slices change again
  const bool boundary = is_gradient_accumulation_boundary();
  ++micro_steps_;
  if (!boundary) return;
  ScopedTimer timer(breakdown_timers(), "step");
  at::NoGradGuard no_grad;
  ++global_steps_;
  // The boundary backward waited for its last buckets. The gradient shard is where the partition
  // keeps it: in memory (the host's with ZeRO-Offload, its copies from the GPU waited for), or on
  // NVMe (undefined here: the partition unscales and clips each sub-group as it swaps it in, by
  // the same operations in the same order).
  const at::Tensor grads = partition_->gradients();
  const double loss_scale = config_.fp16().enabled ? scaler_.scale() : 1.0;
  const std::optional<double> norm = unscale_and_norm(grads, loss_scale);
  if (!norm) {
    ++skipped_steps_;
    log::info("step ", global_steps_, ": gradient overflow, step skipped, loss scale now ", scaler_.scale());
    reducer_->zero_grad_shard();
    return;
  }
  grad_norm_ = *norm;
  const double clip = options_.clip_gradients ? clip_coefficient(grad_norm_, config_.training().gradient_clipping) : 1.0;
  if (grads.defined() && clip < 1) grads.mul_(clip);
  lr_ = schedule_.lr(optimizer_steps_);
  ++optimizer_steps_;
  partition_->step(grads, {lr_, optimizer_steps_, loss_scale, clip});  // and the model's weights refreshed
  reducer_->zero_grad_shard();
}

ModelStateBytes EngineCore::model_state_bytes() const {
  // The partition's: the weights with the master, its gradient and state memory (swap buffers
  // counted as state); the reducer's gradient shard and buckets and autograd's gradients beside.
  ModelStateBytes bytes = partition_->bytes();
  bytes.gradients += reducer_->bytes();
  for (const at::Tensor& param : params_)
    if (param.grad().defined()) bytes.gradients += param.grad().nbytes();
  for (auto& [name, state] : partition_->optimizer().local_state()) bytes.optimizer += state.nbytes();
  for (auto& [name, state] : partition_->optimizer().replicated_state()) bytes.optimizer += state.nbytes();
  return bytes;
}

io::SwapStats EngineCore::take_swap_stats() {
  io::SwapStats stats = partition_->take_swap_stats();
  if (coordinator_ && coordinator_->swapper()) stats += coordinator_->swapper()->take_stats();
  // The two swappers read at once (a sub-group's state beside the next layer's parameters): their
  // summed seconds would count those twice, the process's count them once.
  const double reading = io::reading_seconds(), writing = io::writing_seconds();
  stats.read_seconds = reading - reading_seconds_taken_;
  stats.write_seconds = writing - writing_seconds_taken_;
  reading_seconds_taken_ = reading;
  writing_seconds_taken_ = writing;
  return stats;
}

zero::ParamStatus EngineCore::param_status(const at::Tensor& param) const {
  return coordinator_ ? coordinator_->status(param) : zero::ParamStatus::Available;
}

}  // namespace ds
