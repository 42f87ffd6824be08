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
#include "dstrain/engine/step_in_backward.hpp"
#include "dstrain/io/aio_settings.hpp"
#include "dstrain/io/swap_preflight.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/zero/buffer_sizes.hpp"
#include "dstrain/zero/init.hpp"
#include "dstrain/zero/node_group.hpp"
#include "dstrain/zero/param_swapper.hpp"
#include "dstrain/zero/slice_gather.hpp"
#include "dstrain/engine/host_offload.hpp"

namespace ds {
namespace {

// qgZ's width: int4 within the node and across, as ZeRO++ and DeepSpeed's all_to_all_quant_reduce.
constexpr int kQuantizedGradientBits = 4;

// ZeRO-Offload's step on the host goes in this many pieces, so that the copy of one piece's new
// weights to the GPU hides behind the CPU's step of the next; at least kMinHostStepPiece elements
// each, so that every copy is large enough to run at the link's speed.
constexpr int64_t kHostStepPieces = 8;
constexpr int64_t kMinHostStepPiece = int64_t{1} << 20;

at::ScalarType model_dtype(const Config& config) {
  if (config.bf16().enabled) return at::kBFloat16;
  if (config.fp16().enabled) return at::kHalf;
  return at::kFloat;
}

// offload_param.device "nvme": this rank's parameter chunks go to a swap file, or are read from
// the optimizer's master file where that holds them (`master` not null), or from the sub-groups
// it keeps in memory between steps (docs/offload.md).
std::unique_ptr<zero::ParamSwapper> make_param_swapper(const Config& config, const zero::ShardLayout& layout,
                                                       zero::OptimizerSwapper* master) {
  const OffloadParamConfig& offload = config.zero_optimization().offload_param;
  zero::ParamSwapper::Options options;
  options.nvme_path = offload.nvme_path;
  if (master) {
    options.shard_file = master->path_of(0);
    options.in_memory = [master](int64_t offset, int64_t count) { return master->master_in_memory(offset, count); };
    options.after_read = [master](int64_t offset, int64_t count, float* dst) {
      return master->overlay_unwritten(0, offset, count, dst);
    };
    options.before_read = [master](int64_t offset, int64_t count) { master->settle(offset, count); };
  }
  options.rank = layout.rank();
  for (size_t i = 0; i < layout.size(); ++i) options.chunks.push_back({layout.slot(i).shard_offset, layout.slot(i).chunk});
  options.buffer_count = offload.buffer_count;
  options.buffer_size = offload.buffer_size;
  options.max_in_cpu = offload.max_in_cpu;
  options.aio = io::aio_settings(config.aio());
  return std::make_unique<zero::ParamSwapper>(std::move(options));
}

// Why the step cannot start inside the boundary backward where the config allows it
// (step_in_backward_config_obstacle), or "".
std::string step_in_backward_obstacle(const Config& config, const ShardOptimizer& optimizer, at::Device device,
                                      int64_t shard_numel) {
  const std::string in_config = step_in_backward_config_obstacle(config);
  if (!in_config.empty()) return in_config;
  const ZeroConfig& zero = config.zero_optimization();
  if (!zero.offload_optimizer.pipeline_read) return "offload_optimizer.pipeline_read is off";
  if (!device.is_cpu()) return "the model is on a GPU";
  if (!optimizer.steps_ranges()) return "the optimizer steps the whole shard at once";
  // Kept in the slots between steps, the whole shard then moves nothing.
  const int64_t sub_group = zero::optimizer_sub_group_numel(shard_numel, zero.sub_group_size);
  const int slots = zero::optimizer_swap_slots(zero.offload_optimizer.pipeline_read, zero.offload_optimizer.pipeline_write);
  if ((shard_numel + sub_group - 1) / sub_group <= slots) return "every sub-group stays in memory between steps";
  return "";
}

// offload_optimizer.device "nvme": the master shard, `optimizer`'s state and (outside the pipeline
// engine) the gradient shard go to swap files (docs/offload.md).
std::unique_ptr<zero::OptimizerSwapper> make_optimizer_swapper(const Config& config, int64_t shard_numel,
                                                               ShardOptimizer& optimizer, int rank,
                                                               bool step_in_backward) {
  const ZeroConfig& zero = config.zero_optimization();
  zero::OptimizerSwapper::Options options;
  options.nvme_path = zero.offload_optimizer.nvme_path;
  options.rank = rank;
  options.names = {"master"};
  for (const auto& [name, tensor] : optimizer.state()) options.names.push_back(name);
  options.shard_numel = shard_numel;
  options.sub_group_size = zero.sub_group_size;
  options.buffer_count = zero.offload_optimizer.buffer_count;
  options.pipeline_read = zero.offload_optimizer.pipeline_read;
  options.pipeline_write = zero.offload_optimizer.pipeline_write;
  // The pipeline engine changes reduced gradients in place (the tied weight's sum, clipping by
  // the whole pipeline's norm): under it the gradient shard stays in memory.
  options.gradients = !config.pipeline().stages;
  options.step_in_backward = step_in_backward;
  options.sum_of_squares = fused::sum_of_squares;
  options.aio = io::aio_settings(config.aio());
  return std::make_unique<zero::OptimizerSwapper>(std::move(options));
}

}  // namespace

EngineCore::EngineCore(std::shared_ptr<torch::nn::Module> model, Config config, std::shared_ptr<comm::Backend> dp_group)
    : model_(std::move(model)),
      config_(std::move(config)),
      group_(dp_group ? std::move(dp_group) : comm::init_distributed("mpi")),
      schedule_(config_.scheduler(), config_.optimizer().lr),
      scaler_(config_.fp16()) {
  const HostPolicy& host = apply_host_policy();
  if (!config_.batch_resolved()) config_.resolve_batch(group_->world_size());
  config_ = plan_engine_memory(config_, *model_, *group_);  // every buffer's size, within the budget
  // The config alone does not know the device: on a GPU offload_optimizer.pin_memory pins
  // ZeRO-Offload's host buffers (HostOffload), so only a CPU model hears that it does nothing.
  const bool on_gpu = !model_->parameters().empty() && !model_->parameters().front().device().is_cpu();
  for (const std::string& key : config_.keys_not_acted_on())
    if (!(on_gpu && key == "zero_optimization.offload_optimizer.pin_memory"))
      log::warn("config key '", key, "' is accepted but not acted on by dstrain yet (docs/config.md)");
  config_.check_trainable();
  const int stage = config_.zero_optimization().stage;
  const bool gather_in_forward = zero::gathers_in_forward(config_);

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
  const ZeroConfig& zero = config_.zero_optimization();
  check_offload_devices(device);
  const bool nvme = zero.offload_optimizer.device == OffloadDevice::Nvme && stage >= 1;
  const bool nvme_params = zero.offload_param.device == OffloadDevice::Nvme;  // stage 3 (check_trainable)
  // ZeRO-Offload (a model on a GPU): the master, the optimizer state and the gradient shard live in
  // host memory and the CPU steps them; on NVMe the CPU steps what it swaps in.
  if (zero.offload_optimizer.device == OffloadDevice::Cpu && !device.is_cpu())
    host_offload_ = std::make_unique<HostOffload>(layout_->shard_numel(), device, zero.offload_optimizer.pin_memory);
  const at::Device optimizer_device = host_offload_ || nvme ? at::Device(at::kCPU) : device;
  // In memory the master comes before the optimizer's state: in fp32 the parameters move into one
  // buffer, and the storage they leave (kept by the allocator within its peak) is where that state
  // then goes, rather than the state adding to a peak of both copies of the weights. Offloaded, the
  // optimizer holds no state of its own (it steps the swapped-in sub-groups) and the master goes
  // to the swapper's file.
  if (!nvme) build_master_shard(optimizer_device);
  optimizer_ = make_optimizer(optimizer_device, nvme ? 0 : layout_->shard_numel());
  if (nvme) {
    if (asks_step_in_backward(config_)) {
      const std::string obstacle = step_in_backward_obstacle(config_, *optimizer_, device, layout_->shard_numel());
      step_in_backward_ = obstacle.empty();
      log::info("dstrain.step_in_backward: ",
                step_in_backward_ ? "each sub-group is stepped as soon as backward has reduced its gradient"
                                  : "off, since " + obstacle +
                                        "; the step runs after backward (docs/offload.md, \"The step begun in backward\")");
    }
    swapper_ = make_optimizer_swapper(config_, layout_->shard_numel(), *optimizer_, group_->rank(), step_in_backward_);
    build_master_shard(optimizer_device);
  }

  zero::GradientReducer::TakenFn on_taken;
  if (stage == 3) on_taken = [this](size_t i) { on_gradient_taken(i); };
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
  if (gradients_on_nvme())
    reducer_->set_shard_sink([this](const at::Tensor& values, int64_t shard_offset, bool overwrite) {
      on_gradient_reduced(values, shard_offset, overwrite);
    });
  if (host_offload_)
    reducer_->set_shard_sink([this](const at::Tensor& values, int64_t shard_offset, bool overwrite) {
      host_offload_->take_gradients(values, shard_offset, overwrite);
    });
  if (stage == 3) {
    // In fp32 (offload_param's only dtype) the optimizer's master file holds exactly the
    // partition, rewritten by every step: on the same disk the parameters are read from it rather
    // than written to a second file each step.
    zero::OptimizerSwapper* master =
        swapper_ && io::same_file_system(zero.offload_param.nvme_path, swapper_->folder()) ? swapper_.get() : nullptr;
    coordinator_ = std::make_unique<zero::ParameterCoordinator>(
        params_, *layout_, *group_, zero, nvme_params ? make_param_swapper(config_, *layout_, master) : nullptr);
  }
  if (stage == 3 && master_storage_ == MasterStorage::Model) master_ = coordinator_->shard();
  if (gather_in_forward && master_storage_ == MasterStorage::ModelSlices && device.is_cpu()) {
    std::vector<at::Tensor> storage;
    for (size_t i = 0; i < params_.size(); ++i) {
      const zero::ParamSlot& slot = layout_->slot(i);
      storage.push_back(model_flat_.narrow(0, partitions * slot.shard_offset, partitions * slot.chunk));
    }
    slice_gather_ = std::make_unique<zero::SliceGather>(*group_, params_, std::move(storage));
    log::info("dstrain.gather_in_forward: each step's parameter all-gather runs during the next forward, every "
              "module waiting for its own parameters (docs/zero.md)");
  }
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
  const ZeroConfig& zero = config_.zero_optimization();
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

EngineCore::MasterStorage EngineCore::choose_master_storage() const {
  if (swapper_) return MasterStorage::Swapped;
  if (host_offload_) return MasterStorage::Copy;  // on the host, apart from the model on its GPU
  // The master of a model in fp16/bf16 is its fp32 shadow.
  if (params_.front().scalar_type() != at::kFloat) return MasterStorage::Copy;
  if (zero_stage() == 3)
    return config_.zero_optimization().offload_param.device == OffloadDevice::Nvme ? MasterStorage::Copy
                                                                                     : MasterStorage::Model;
  // One tensor registered twice would have to live in two places of the buffer.
  std::set<const void*> storages;
  for (const at::Tensor& param : params_)
    if (!storages.insert(param.storage().unsafeGetStorageImpl()).second) return MasterStorage::Copy;
  return layout_->partitions() > 1 ? MasterStorage::ModelSlices : MasterStorage::Model;
}

void EngineCore::build_master_shard(at::Device device) {
  at::NoGradGuard no_grad;
  master_storage_ = choose_master_storage();
  const auto fp32 = at::dtype(at::kFloat).device(device);
  switch (master_storage_) {
    case MasterStorage::Model:
      if (zero_stage() == 3) return;  // the coordinator's partition, once it is built
      [[fallthrough]];
    case MasterStorage::ModelSlices: {
      // One fp32 buffer holds every parameter, each padded to partitions x chunk so that this rank's
      // chunk of it is one slice (with one partition the buffer is the shard itself). The parameters
      // become views of it and their former storage is freed: one fp32 copy of the weights remains,
      // and the optimizer steps this rank's slices of it in place.
      const int64_t partitions = layout_->partitions();
      at::Tensor flat = at::empty({partitions * layout_->shard_numel()}, fp32);
      for (size_t i = 0; i < params_.size(); ++i) {
        const zero::ParamSlot& slot = layout_->slot(i);
        at::Tensor padded = flat.narrow(0, partitions * slot.shard_offset, partitions * slot.chunk);
        padded.narrow(0, 0, slot.numel).copy_(params_[i].detach().reshape({-1}));
        padded.narrow(0, slot.numel, padded.numel() - slot.numel).zero_();
        params_[i].set_data(padded.narrow(0, 0, slot.numel).view(shapes_[i]));
      }
      (partitions == 1 ? master_ : model_flat_) = flat;
      return;
    }
    case MasterStorage::Copy:
      master_ = host_offload_ ? host_offload_->host_empty(layout_->shard_numel(), at::kFloat)
                              : at::empty({layout_->shard_numel()}, fp32);
      for (size_t i = 0; i < params_.size(); ++i)
        layout_->copy_rank_chunk(i, params_[i].detach(), layout_->chunk_view(i, master_));
      return;
    case MasterStorage::Swapped:
      break;
  }
  // The master shard goes to its file a sub-group at a time, never whole in memory: each
  // parameter chunk that overlaps the sub-group is copied in (one straddling two, twice).
  swapper_->fill(0, [&](int64_t begin, int64_t count, float* dst) {
    const at::Tensor group = at::from_blob(dst, {count}, at::kFloat);
    for (size_t i = 0; i < params_.size(); ++i) {
      const zero::ParamSlot& slot = layout_->slot(i);
      const int64_t lo = std::max(begin, slot.shard_offset), hi = std::min(begin + count, slot.shard_offset + slot.chunk);
      if (lo >= hi) continue;
      at::Tensor chunk = at::empty({slot.chunk}, at::kFloat);
      layout_->copy_rank_chunk(i, params_[i].detach(), chunk);
      group.narrow(0, lo - begin, hi - lo).copy_(chunk.narrow(0, lo - slot.shard_offset, hi - lo));
    }
  });
}

at::Tensor EngineCore::master_chunk(size_t i) const {
  if (master_storage_ != MasterStorage::ModelSlices) return layout_->chunk_view(i, master_);
  const zero::ParamSlot& slot = layout_->slot(i);
  return model_flat_.narrow(0, layout_->partitions() * slot.shard_offset + layout_->rank() * slot.chunk, slot.chunk);
}

at::Tensor EngineCore::master_range(int64_t begin, int64_t count) {
  if (master_.defined()) return master_.narrow(0, begin, count);
  if (swapper_) {
    at::Tensor values = at::empty({count}, at::kFloat);
    swapper_->read(0, begin, values.data_ptr<float>(), count);
    return values;
  }
  at::Tensor values = at::empty({count}, model_flat_.options());
  for (size_t i = 0; i < params_.size(); ++i) {
    const zero::ParamSlot& slot = layout_->slot(i);
    const int64_t lo = std::max(begin, slot.shard_offset), hi = std::min(begin + count, slot.shard_offset + slot.chunk);
    if (lo < hi) values.narrow(0, lo - begin, hi - lo).copy_(master_chunk(i).narrow(0, lo - slot.shard_offset, hi - lo));
  }
  return values;
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
                                 : engine.slice_gather_.get()),
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
  const bool local_only = !optimizer_->needs_reduced_gradients(optimizer_steps_ + 1);
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
  stepping_in_backward_ = step_in_backward_ && is_gradient_accumulation_boundary();
  if (stepping_in_backward_) {
    lr_ = schedule_.lr(optimizer_steps_);  // as step() will set it
    // The last step's final sub-groups served this forward from memory; their slots are this
    // step's first (no gather is in flight between forward and backward).
    swapper_->release_kept();
  }
  // Autograd runs the hooks as backward reaches them:
  //   ParameterCoordinator::pre_backward    gradient reached a module's outputs: gather the
  //                                         module's parameters (stage 3), prefetch the previous
  //   GradientReducer::on_gradient_ready    a parameter's gradient is complete: pack it into its
  //                                         bucket; full buckets are reduced while backward goes on
  //   on_gradient_taken                     ... and release the parameter (stage 3)
  //   on_gradient_reduced                   a bucket's reduction is done: its range goes to the
  //                                         gradient's swap file (offload_optimizer on NVMe); with
  //                                         dstrain.step_in_backward, each sub-group whose gradient
  //                                         is whole is swapped in, stepped and swapped out here
  torch::autograd::backward(outputs, gradients);
  if (reducer_->reducing()) {
    reducer_->finish_backward();  // the buckets left open go out; every reduction is waited for
    if (gradients_on_nvme()) swapped_grad_sum_of_squares_ = swapper_->finish_gradients();
  }
  stepping_in_backward_ = false;
  if (coordinator_) coordinator_->release_all();
}

void EngineCore::on_gradient_taken(size_t param_index) { coordinator_->gradient_taken(param_index); }

void EngineCore::on_gradient_reduced(const at::Tensor& values, int64_t shard_offset, bool overwrite) {
  // A model on a GPU: the bucket's result comes to the host first (the swapper writes host pages).
  const at::Tensor host = values.is_cpu() ? values : values.to(at::kCPU);
  const float* data = host.data_ptr<float>();
  if (!stepping_in_backward_) {
    swapper_->write_gradients(data, shard_offset, host.numel(), overwrite);
    return;
  }
  // The range a sub-group at a time from its top down, the step's order: each sub-group it
  // completes is stepped before the next piece needs a slot, so a range longer than the slots
  // hold (a parameter larger than several sub-groups) is stepped through as it is staged.
  ScopedTimer timer(breakdown_timers(), "step_in_backward");
  at::NoGradGuard no_grad;
  const int64_t group = swapper_->sub_group_numel();
  for (int64_t end = shard_offset + host.numel(); end > shard_offset;) {
    const int64_t begin = std::max(shard_offset, (end - 1) / group * group);
    swapper_->write_gradients(data + (begin - shard_offset), begin, end - begin, overwrite);
    end = begin;
    // The sub-groups whose whole gradient is staged, in the step's order: the same kernel on the
    // same values as step() would run, one step early.
    while (stepped_in_backward_ < swapper_->sub_groups()) {
      const int64_t i = swapper_->step_order(stepped_in_backward_);
      if (!swapper_->gradient_complete(i)) break;
      step_sub_group(i, at::Tensor(), 1, 1, optimizer_steps_ + 1);
      ++stepped_in_backward_;
    }
  }
}

bool EngineCore::gradients_on_nvme() const { return swapper_ && swapper_->swaps_gradients(); }

const at::Tensor& EngineCore::host_gradients() {
  ScopedTimer timer(breakdown_timers(), "gradients_to_host");  // the rest of backward's copies
  const at::Tensor& grads = host_offload_->gradients();
  if (!reducer_->has_gradients()) grads.zero_();  // no backward reduced since the last step
  return grads;
}

at::Tensor EngineCore::reduced_gradient_chunk(const at::Tensor& param) {
  if (reducer_->local_only() && layout_->partitions() > 1)
    throw Error("the 1-bit optimizers at ZeRO stages 1-2 keep each rank's whole local gradients after the freeze, "
                "not reduced chunks (pipeline parallelism needs zero_optimization.stage 0 with them)")
        .with_key("zero_optimization.stage");
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].is_same(param)) continue;
    if (host_offload_) return layout_->chunk_view(i, host_gradients());
    if (!gradients_on_nvme()) return layout_->chunk_view(i, reducer_->grad_shard());
    if (stepped_in_backward_ > 0)
      throw Error("the reduced gradient was consumed by the step begun in backward; set dstrain.step_in_backward "
                  "false to read it between backward and step")
          .with_key("dstrain.step_in_backward");
    const zero::ParamSlot& slot = layout_->slot(i);
    at::Tensor chunk = at::zeros({slot.chunk}, at::kFloat);
    if (reducer_->has_gradients()) swapper_->read_gradients(slot.shard_offset, chunk.data_ptr<float>(), slot.chunk);
    return chunk;
  }
  throw Error("reduced_gradient_chunk: not a parameter of this engine");
}

at::Tensor EngineCore::master_weights_chunk(const at::Tensor& param) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].is_same(param)) return swapper_ ? at::Tensor() : master_chunk(i);
  throw Error("master_weights_chunk: not a parameter of this engine");
}

std::optional<double> EngineCore::unscale_and_norm(const at::Tensor& grads, double loss_scale) {
  const bool fp16 = config_.fp16().enabled;
  if (!grads.defined()) {
    // On NVMe: from the sum of squares taken as the boundary backward wrote the file (the loss
    // scale, a power of two, divides out exactly). A non-finite element makes it non-finite on
    // every rank, so it is the overflow vote too.
    const double local = reducer_->has_gradients() ? swapped_grad_sum_of_squares_ / (loss_scale * loss_scale) : 0.0;
    at::Tensor sum_of_squares = at::full({1}, local, at::kDouble);
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

void EngineCore::wait_for_parameters() {
  if (slice_gather_) slice_gather_->finish();
}

void EngineCore::step() {
  wait_for_parameters();  // before this rank's slices change again
  const bool boundary = is_gradient_accumulation_boundary();
  ++micro_steps_;
  if (!boundary) return;
  ScopedTimer timer(breakdown_timers(), "step");
  at::NoGradGuard no_grad;
  ++global_steps_;
  // The boundary backward waited for its last buckets. The gradient shard is in memory, or on
  // NVMe (undefined here): then step_offloaded unscales and clips each sub-group as it swaps it
  // in, by the same operations in the same order.
  // Left local under partitions (the 1-bit family), they are this rank's whole gradients.
  // With ZeRO-Offload it is the host's, its copies from the GPU waited for.
  const at::Tensor grads = gradients_on_nvme()                                     ? at::Tensor()
                           : host_offload_                                         ? host_gradients()
                           : reducer_->local_only() && layout_->partitions() > 1 ? reducer_->local_gradients()
                                                                                 : reducer_->grad_shard();
  const double loss_scale = config_.fp16().enabled ? scaler_.scale() : 1.0;
  const std::optional<double> norm = unscale_and_norm(grads, loss_scale);
  if (!norm) {
    ++skipped_steps_;
    log::info("step ", global_steps_, ": gradient overflow, step skipped, loss scale now ", scaler_.scale());
    reducer_->zero_grad_shard();
    return;
  }
  grad_norm_ = *norm;
  const double clip = clip_coefficient(grad_norm_, config_.training().gradient_clipping);
  if (grads.defined() && clip < 1) grads.mul_(clip);
  lr_ = schedule_.lr(optimizer_steps_);
  ++optimizer_steps_;
  if (swapper_) {
    step_offloaded(grads, loss_scale, clip);  // per sub-group: swap in, update, swap out, refresh
  } else if (host_offload_) {
    step_on_host(grads);  // per piece: update on the CPU, copy to the GPU while the next steps
  } else {
    if (master_storage_ == MasterStorage::ModelSlices)
      step_model_slices(grads);
    else
      optimizer_->step(master_, grads, lr_, optimizer_steps_);
    refresh_model_from_master();
  }
  reducer_->zero_grad_shard();
}

void EngineCore::step_model_slices(const at::Tensor& grads) {
  if (optimizer_->steps_ranges()) {
    // The fused kernel where each slice lies (on the CPU range by range, on a GPU one launch for
    // all): it touches element i alone, so stepping slice by slice gives the whole shard's result
    // bit for bit.
    std::vector<ShardRange> ranges;
    ranges.reserve(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      const zero::ParamSlot& slot = layout_->slot(i);
      ranges.push_back({master_chunk(i).data_ptr<float>(), grads.data_ptr<float>() + slot.shard_offset,
                        slot.shard_offset, slot.chunk});
    }
    optimizer_->step_ranges(ranges, lr_, optimizer_steps_);
    return;
  }
  // An optimizer that takes the shard as one tensor (Lamb's per-parameter norms, the 1-bit
  // exchanges), or a device shard: the slices joined for the step's length and written back.
  const at::Tensor master = master_range(0, layout_->shard_numel());
  optimizer_->step(master, grads, lr_, optimizer_steps_);
  for (size_t i = 0; i < params_.size(); ++i) master_chunk(i).copy_(layout_->chunk_view(i, master));
}

void EngineCore::step_on_host(const at::Tensor& grads) {
  ScopedTimer timer(breakdown_timers(), "step_on_host");
  if (optimizer_->steps_ranges()) {
    // The fused CPU kernel touches element i alone, so piece by piece gives the whole shard's
    // result; each piece's weights go to the GPU (non-blocking, on HostOffload's side stream) while
    // the CPU steps the next.
    const int64_t numel = layout_->shard_numel();
    const int64_t piece = std::max(kMinHostStepPiece, (numel + kHostStepPieces - 1) / kHostStepPieces);
    for (int64_t begin = 0; begin < numel; begin += piece) {
      const int64_t count = std::min(piece, numel - begin);
      optimizer_->step_ranges({{master_.data_ptr<float>() + begin, grads.data_ptr<float>() + begin, begin, count}},
                              lr_, optimizer_steps_);
      refresh_model_range(master_.narrow(0, begin, count), begin);
    }
  } else {
    // An optimizer that takes the shard as one tensor (Lamb's per-parameter norms, the 1-bit family).
    optimizer_->step(master_, grads, lr_, optimizer_steps_);
    refresh_model_range(master_, 0);
  }
  finish_refresh();
}

void EngineCore::step_offloaded(const at::Tensor& grads, double unscale, double clip) {
  ScopedTimer timer(breakdown_timers(), "step_offloaded");
  zero::OptimizerSwapper& swap = *swapper_;
  // Up and down the shard on alternate steps: each step starts with the sub-groups the last one
  // left in memory. With dstrain.step_in_backward the first ones were stepped during backward.
  for (int64_t k = stepped_in_backward_; k < swap.sub_groups(); ++k)
    step_sub_group(swap.step_order(k), grads, unscale, clip, optimizer_steps_);
  stepped_in_backward_ = 0;
  swap.finish_step();
  finish_refresh();
}

void EngineCore::step_sub_group(int64_t i, const at::Tensor& grads, double unscale, double clip, int64_t step) {
  zero::OptimizerSwapper& swap = *swapper_;
  // state[0] is the master sub-group, state[1..] the optimizer's state (pipeline_read: the next
  // sub-group is being read meanwhile).
  const zero::OptimizerSwapper::SubGroup& group = swap.swap_in(i);
  const float* g = nullptr;
  if (grads.defined()) {
    g = grads.data_ptr<float>() + group.offset;
  } else {
    // The swapped-in gradient, unscaled and clipped as step() does the shard in memory.
    at::Tensor values = at::from_blob(group.gradients, {group.numel}, at::kFloat);
    if (!stepping_in_backward_ && !reducer_->has_gradients()) values.zero_();  // no backward reduced since the last step
    if (unscale != 1) values.div_(unscale);
    if (clip < 1) values.mul_(clip);
    g = group.gradients;
  }
  optimizer_->step_range(group.state[0], g, group.state.data() + 1, group.numel, lr_, step);
  swap.swap_out(i);  // pipeline_write: written while the next sub-group steps
  // The buffers stay valid until the slot's next swap_in, so the model takes the new master
  // values from them while they are written.
  refresh_model_range(at::from_blob(group.state[0], {group.numel}, at::kFloat), group.offset);
}

void EngineCore::refresh_model_from_master() {
  at::NoGradGuard no_grad;
  switch (master_storage_) {
    case MasterStorage::Model:
      break;  // the optimizer stepped the model's own storage (stage 3: its partition)
    case MasterStorage::ModelSlices: {
      // This rank's slices are new in place; the other ranks' come during the next forward
      // (SliceGather), or here a window at a time.
      if (slice_gather_) {
        slice_gather_->start();
        break;
      }
      const int64_t width =
          refresh_gather_width(config_.zero_optimization().allgather_bucket_size, layout_->partitions());
      for (int64_t at = 0; at < layout_->shard_numel(); at += width)
        refresh_model_range(master_range(at, std::min(width, layout_->shard_numel() - at)), at);
      break;
    }
    case MasterStorage::Copy:
      refresh_model_range(master_, 0);
      break;
    case MasterStorage::Swapped: {
      at::Tensor values = at::empty({swapper_->sub_group_numel()}, at::kFloat);
      for (int64_t i = 0; i < swapper_->sub_groups(); ++i) {
        const zero::OptimizerSwapper::SubGroup& group = swapper_->sub_group(i);
        swapper_->read(0, group.offset, values.data_ptr<float>(), group.numel);
        refresh_model_range(values.narrow(0, 0, group.numel), group.offset);
      }
      break;
    }
  }
  finish_refresh();
}

void EngineCore::refresh_model_range(const at::Tensor& values, int64_t shard_offset) {
  at::NoGradGuard no_grad;
  if (coordinator_) {
    coordinator_->load_shard_range(values, shard_offset);
    return;
  }
  // Stages 0-2 hold every parameter whole. The shard range is gathered from every partition a
  // few elements at a time (refresh_gather_width, memory_plan.hpp). Each rank's piece of the range
  // then lands in the parameters it belongs to.
  const int partitions = layout_->partitions();
  const int64_t width = refresh_gather_width(config_.zero_optimization().allgather_bucket_size, partitions);
  const auto dtype = params_.front().scalar_type();
  for (int64_t at = 0; at < values.numel(); at += width) {
    const int64_t begin = shard_offset + at;
    const int64_t end = begin + std::min(width, values.numel() - at);
    // With ZeRO-Offload the range goes to the GPU from a (pinned) staging copy in the model's dtype.
    at::Tensor mine;
    if (host_offload_) {
      mine = host_offload_->host_empty(end - begin, dtype);
      mine.copy_(values.narrow(0, at, end - begin));
    } else {
      mine = values.narrow(0, at, end - begin).to(dtype);
    }
    at::Tensor by_rank = mine.view({1, end - begin});
    if (partitions > 1) {
      at::Tensor all = host_offload_ ? host_offload_->host_empty(partitions * (end - begin), dtype)
                                     : at::empty({partitions * (end - begin)}, mine.options());
      group_->all_gather_into(all, mine);
      by_rank = all.view({partitions, end - begin});
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      const zero::ParamSlot& slot = layout_->slot(i);
      const int64_t lo = std::max(begin, slot.shard_offset), hi = std::min(end, slot.shard_offset + slot.chunk);
      if (lo >= hi) continue;
      at::Tensor flat = params_[i].detach().view({-1});
      for (int p = 0; p < partitions; ++p) {
        // Partition p's chunk covers elements [p * chunk, (p + 1) * chunk) of the parameter; the
        // last one ends in padding.
        const int64_t first = p * slot.chunk + (lo - slot.shard_offset);
        const int64_t count = std::min(hi - lo, slot.numel - first);
        if (count <= 0) continue;
        if (host_offload_)
          host_offload_->copy_to_device(flat.narrow(0, first, count), by_rank[p].narrow(0, lo - begin, count));
        else
          flat.narrow(0, first, count).copy_(by_rank[p].narrow(0, lo - begin, count));
      }
    }
  }
}

void EngineCore::finish_refresh() {
  if (host_offload_) {
    ScopedTimer timer(breakdown_timers(), "weights_to_device");
    host_offload_->finish_copies_to_device();  // before the next forward reads them
  }
  if (coordinator_) coordinator_->regather_persistent();
}

ModelStateBytes EngineCore::model_state_bytes() const {
  ModelStateBytes bytes;
  // Offloaded, the master and optimizer state on NVMe hold no memory; their swap buffers count as
  // optimizer state.
  if (master_storage_ == MasterStorage::ModelSlices) {
    bytes.parameters = model_flat_.nbytes();
  } else if (master_storage_ == MasterStorage::Model) {
    bytes.parameters = coordinator_ ? coordinator_->bytes() : master_.nbytes();
  } else {
    bytes.parameters = master_.defined() ? master_.nbytes() : 0;
    if (coordinator_) {
      bytes.parameters += coordinator_->bytes();
    } else {
      for (const at::Tensor& param : params_) bytes.parameters += param.nbytes();
    }
  }
  bytes.gradients = reducer_->bytes();
  for (const at::Tensor& param : params_)
    if (param.grad().defined()) bytes.gradients += param.grad().nbytes();
  if (swapper_) bytes.gradients += swapper_->gradient_buffer_bytes();
  if (host_offload_) bytes.gradients += host_offload_->bytes();
  for (auto& [name, state] : optimizer_->state()) bytes.optimizer += state.nbytes();
  for (auto& [name, state] : optimizer_->local_state()) bytes.optimizer += state.nbytes();
  for (auto& [name, state] : optimizer_->replicated_state()) bytes.optimizer += state.nbytes();
  if (swapper_) bytes.optimizer += swapper_->buffer_bytes();
  return bytes;
}

io::SwapStats EngineCore::take_swap_stats() {
  io::SwapStats stats;
  if (swapper_) stats += swapper_->take_stats();
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
