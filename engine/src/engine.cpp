#include "dstrain/engine/engine.hpp"

#include <torch/torch.h>

#include <cmath>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/host_policy.hpp"
#include "dstrain/engine/lamb.hpp"
#include "dstrain/engine/onebit_adam.hpp"
#include "dstrain/engine/onebit_lamb.hpp"
#include "dstrain/engine/zero_one_adam.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/zero/init.hpp"

namespace ds {
namespace {

at::ScalarType model_dtype(const Config& config) {
  if (config.bf16().enabled) return at::kBFloat16;
  if (config.fp16().enabled) return at::kHalf;
  return at::kFloat;
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
  for (const std::string& key : config_.keys_not_acted_on())
    log::warn("config key '", key, "' is accepted but not acted on by dstrain yet (docs/config.md)");
  const int stage = config_.zero_optimization().stage;
  const OptimizerType type = config_.optimizer().type;
  if ((type == OptimizerType::OneBitAdam || type == OptimizerType::OneBitLamb || type == OptimizerType::ZeroOneAdam) &&
      stage > 0)
    throw Error(std::string(to_string(type)) + " is not supported with ZeRO (stage " + std::to_string(stage) +
                "); use stage 0")
        .with_key("zero_optimization.stage");
  if (config_.optimizer().type == OptimizerType::None)
    throw Error("no optimizer configured: add an \"optimizer\" block").with_key("optimizer");

  if (config_.fp16().enabled)
    log::warn("fp16 on CPU: LibTorch lacks most Half kernels on the CPU; prefer bf16 there (fp16 is for GPUs)");
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
  master_ = at::empty({layout_->shard_numel()}, at::dtype(at::kFloat).device(device));
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i)
      layout_->copy_rank_chunk(i, params_[i].detach(), layout_->chunk_view(i, master_));
  }

  const ZeroConfig& zero = config_.zero_optimization();
  zero::GradientReducer::TakenFn on_taken;
  if (stage == 3) on_taken = [this](size_t i) { coordinator_->gradient_taken(i); };
  // The reducer first: autograd records each parameter's whole shape when its gradient
  // accumulator is created, and stage 3 is about to leave the parameters empty.
  reducer_ = std::make_unique<zero::GradientReducer>(params_, *layout_, *group_, zero.reduce_bucket_size,
                                                     zero.overlap_comm, std::move(on_taken));
  reducer_->set_timers(breakdown_timers());
  if (stage == 3) coordinator_ = std::make_unique<zero::ParameterCoordinator>(params_, *layout_, *group_, zero);
  optimizer_ = make_optimizer(device);
  lr_ = schedule_.lr(0);

  log::info("engine: ZeRO stage ", stage, ", ", params_.size(), " parameter tensors, dp world ",
            group_->world_size(), ", train_batch_size ", train_batch_size(), " = micro ",
            train_micro_batch_size_per_gpu(), " x accumulation ", gradient_accumulation_steps(), " x ranks ",
            group_->world_size(), ", dtype ", c10::toString(model_dtype(config_)), ", device ", device.str(), ", ",
            describe(host));
}

EngineCore::~EngineCore() = default;

// The optimizers that need the group (they communicate) or the layout (per-parameter norms) are
// built here; the others by make_shard_optimizer.
std::unique_ptr<ShardOptimizer> EngineCore::make_optimizer(at::Device device) {
  const OptimizerConfig& config = config_.optimizer();
  switch (config.type) {
    case OptimizerType::OneBitAdam:
      return std::make_unique<OneBitAdamShardOptimizer>(config, layout_->shard_numel(), device, *group_);
    case OptimizerType::Lamb:
      return std::make_unique<LambShardOptimizer>(config, *layout_, device, *group_);
    case OptimizerType::OneBitLamb:
      return std::make_unique<OneBitLambShardOptimizer>(config, *layout_, device, *group_);
    case OptimizerType::ZeroOneAdam:
      return std::make_unique<ZeroOneAdamShardOptimizer>(config, layout_->shard_numel(), device, *group_);
    default:
      return make_shard_optimizer(config, layout_->shard_numel(), device);
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
    : hooks_(engine.coordinator_.get()),
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
  reducer_->set_reducing(zero_stage() >= 2 || is_gradient_accumulation_boundary());
  // An optimizer that exchanges its own state (OneBitAdam after freeze_step) takes this rank's
  // gradients as they are: the full allreduce is the traffic it exists to save.
  reducer_->set_local_only(!optimizer_->needs_reduced_gradients(optimizer_steps_ + 1));
  if (coordinator_) coordinator_->begin_backward();
  torch::autograd::backward(outputs, gradients);
  if (reducer_->reducing()) reducer_->finish_backward();
  if (coordinator_) coordinator_->release_all();
}

at::Tensor EngineCore::reduced_gradient_chunk(const at::Tensor& param) {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].is_same(param)) return layout_->chunk_view(i, reducer_->grad_shard());
  throw Error("reduced_gradient_chunk: not a parameter of this engine");
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
  // when the gradients were left local (OneBitAdam), each clips its own, as DeepSpeed does.
  if (layout_->partitions() > 1) group_->all_reduce(sum_sq, comm::ReduceOp::Sum);
  return std::sqrt(sum_sq.item<double>());
}

void EngineCore::step() {
  const bool boundary = is_gradient_accumulation_boundary();
  ++micro_steps_;
  if (!boundary) return;
  ScopedTimer timer(breakdown_timers(), "step");
  at::NoGradGuard no_grad;
  const at::Tensor& grads = reducer_->grad_shard();
  ++global_steps_;
  if (config_.fp16().enabled) {
    grads.div_(scaler_.scale());
    if (!scaler_.update(any_overflow(grads))) {
      ++skipped_steps_;
      log::info("step ", global_steps_, ": gradient overflow, step skipped, loss scale now ", scaler_.scale());
      reducer_->zero_grad_shard();
      return;
    }
  }
  grad_norm_ = global_grad_norm(grads);
  const double max_norm = config_.training().gradient_clipping;
  if (max_norm > 0) {
    const double coefficient = max_norm / (grad_norm_ + 1e-6);
    if (coefficient < 1) grads.mul_(coefficient);
  }
  lr_ = schedule_.lr(optimizer_steps_);
  ++optimizer_steps_;
  optimizer_->step(master_, grads, lr_, optimizer_steps_);
  refresh_model_from_master();
  reducer_->zero_grad_shard();
}

void EngineCore::refresh_model_from_master() {
  at::NoGradGuard no_grad;
  if (coordinator_) {
    coordinator_->load_shard(master_);
    return;
  }
  // Stages 0-2 hold every parameter whole. The shards are gathered a bucket of consecutive
  // parameters at a time (about allgather_bucket_size elements), so the model never sits whole in a
  // second buffer.
  const int partitions = layout_->partitions();
  const int64_t bucket_numel = config_.zero_optimization().allgather_bucket_size;
  const auto dtype = params_.front().scalar_type();
  for (size_t first = 0, last = 0; first < params_.size(); first = last) {
    int64_t numel = 0;
    do numel += layout_->slot(last++).chunk * partitions;
    while (last < params_.size() && numel + layout_->slot(last).chunk * partitions <= bucket_numel);
    const int64_t begin = layout_->slot(first).shard_offset;
    const int64_t width = layout_->slot(last - 1).shard_offset + layout_->slot(last - 1).chunk - begin;
    const at::Tensor mine = master_.narrow(0, begin, width).to(dtype);
    at::Tensor by_rank = mine.view({1, width});
    if (partitions > 1) {
      at::Tensor all = at::empty({partitions * width}, mine.options());
      group_->all_gather_into(all, mine);
      by_rank = all.view({partitions, width});
    }
    for (size_t i = first; i < last; ++i) {
      const zero::ParamSlot& slot = layout_->slot(i);
      at::Tensor full = by_rank.narrow(1, slot.shard_offset - begin, slot.chunk).reshape({-1}).narrow(0, 0, slot.numel);
      params_[i].detach().view({-1}).copy_(full);
    }
  }
}

ModelStateBytes EngineCore::model_state_bytes() const {
  ModelStateBytes bytes;
  bytes.parameters = master_.nbytes();
  if (coordinator_) {
    bytes.parameters += coordinator_->bytes();
  } else {
    for (const at::Tensor& param : params_) bytes.parameters += param.nbytes();
  }
  bytes.gradients = reducer_->bytes();
  for (const at::Tensor& param : params_)
    if (param.grad().defined()) bytes.gradients += param.grad().nbytes();
  for (auto& [name, state] : optimizer_->state()) bytes.optimizer += state.nbytes();
  for (auto& [name, state] : optimizer_->local_state()) bytes.optimizer += state.nbytes();
  for (auto& [name, state] : optimizer_->replicated_state()) bytes.optimizer += state.nbytes();
  return bytes;
}

zero::ParamStatus EngineCore::param_status(const at::Tensor& param) const {
  return coordinator_ ? coordinator_->status(param) : zero::ParamStatus::Available;
}

}  // namespace ds
