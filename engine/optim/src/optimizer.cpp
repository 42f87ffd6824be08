#include "dstrain/engine/optim/optimizer.hpp"

#include <ATen/ATen.h>

#include <cmath>

#include "dstrain/runtime/error.hpp"

#ifdef DSTRAIN_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "dstrain/engine/kernels/fused_adam_cuda.hpp"
#endif

namespace ds {

#ifdef DSTRAIN_WITH_CUDA
namespace {

// What fused::cuda::adam takes: contiguous fp32 tensors of `numel` elements on one CUDA device.
bool fits_fused_cuda(std::initializer_list<const at::Tensor*> tensors, int64_t numel, at::Device device) {
  for (const at::Tensor* t : tensors)
    if (!t->defined() || !t->is_contiguous() || t->scalar_type() != at::kFloat || t->device() != device ||
        t->numel() != numel)
      return false;
  return device.is_cuda();
}

}  // namespace
#endif

void check_flat_shards(std::initializer_list<const at::Tensor*> tensors, int64_t numel) {
  for (const at::Tensor* t : tensors)
    if (!t->defined() || !t->is_contiguous() || t->scalar_type() != at::kFloat || !t->device().is_cpu() ||
        t->numel() != numel)
      throw Error("shard optimizer: expects contiguous fp32 CPU shards of " + std::to_string(numel) + " elements, got " +
                  (t->defined() ? std::string(c10::toString(t->scalar_type())) + " of " + std::to_string(t->numel())
                                : std::string("an undefined tensor")));
}

void ShardOptimizer::step_range(float*, const float*, float* const*, int64_t, double, int64_t) const {
  throw Error("this optimizer cannot step a swapped-in sub-group (offload_optimizer needs Adam, AdamW or SGD)")
      .with_key("zero_optimization.offload_optimizer.device");
}

void ShardOptimizer::step_ranges(const std::vector<ShardRange>& ranges, double lr, int64_t step) {
  const auto named = state();
  for (const auto& [name, tensor] : named)
    if (!tensor.is_cpu())
      throw Error("step_ranges: the state '" + name + "' is on " + tensor.device().str() +
                  ", and only Adam and AdamW in a CUDA build step ranges of a device shard");
  std::vector<float*> at_offset(named.size());
  for (const ShardRange& range : ranges) {
    for (size_t k = 0; k < named.size(); ++k) at_offset[k] = named[k].second.data_ptr<float>() + range.shard_offset;
    step_range(range.params, range.grads, at_offset.data(), range.n, lr, step);
  }
}

std::unique_ptr<ShardOptimizer> make_shard_optimizer(const OptimizerConfig& config, int64_t shard_numel,
                                                     at::Device device) {
  switch (config.type) {
    case OptimizerType::Adam:
      return std::make_unique<AdamShardOptimizer>(config, shard_numel, device, config.adam_w_mode);
    case OptimizerType::AdamW:
      return std::make_unique<AdamShardOptimizer>(config, shard_numel, device, true);
    case OptimizerType::SGD:
      return std::make_unique<SgdShardOptimizer>(config, shard_numel, device);
    default:
      throw Error(std::string("optimizer type '") + to_string(config.type) + "' has no shard optimizer")
          .with_key("optimizer.type");
  }
}

AdamShardOptimizer::AdamShardOptimizer(const OptimizerConfig& config, int64_t shard_numel, at::Device device,
                                       bool decoupled)
    : config_(config),
      decoupled_(decoupled),
      exp_avg_(at::zeros({shard_numel}, at::dtype(at::kFloat).device(device))),
      exp_avg_sq_(at::zeros({shard_numel}, at::dtype(at::kFloat).device(device))) {}

void AdamShardOptimizer::step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step) {
  if (params.is_cpu()) {
    check_flat_shards({&params, &grads, &exp_avg_, &exp_avg_sq_}, exp_avg_.numel());
    float* state[] = {exp_avg_.data_ptr<float>(), exp_avg_sq_.data_ptr<float>()};
    step_range(params.data_ptr<float>(), grads.data_ptr<float>(), state, params.numel(), lr, step);
    return;
  }
#ifdef DSTRAIN_WITH_CUDA
  if (fits_fused_cuda({&params, &grads, &exp_avg_, &exp_avg_sq_}, exp_avg_.numel(), params.device())) {
    step_ranges({ShardRange{params.data_ptr<float>(), grads.data_ptr<float>(), 0, params.numel()}}, lr, step);
    return;
  }
#endif
  const fused::AdamStep s = step_scalars(lr, step);
  // A device shard (CUDA): the same update as tensor ops.
  at::Tensor grad = grads;
  if (!decoupled_ && s.weight_decay != 0) grad = grads.add(params, s.weight_decay);
  exp_avg_.mul_(s.beta1).add_(grad, 1 - s.beta1);
  exp_avg_sq_.mul_(s.beta2).addcmul_(grad, grad, 1 - s.beta2);
  apply(params, exp_avg_, exp_avg_sq_, lr, step);
}

void AdamShardOptimizer::step_range(float* params, const float* grads, float* const* state, int64_t n, double lr,
                                    int64_t step) const {
  fused::adam(params, grads, state[0], state[1], n, step_scalars(lr, step));
}

bool AdamShardOptimizer::steps_ranges() const {
#ifdef DSTRAIN_WITH_CUDA
  if (fits_fused_cuda({&exp_avg_, &exp_avg_sq_}, exp_avg_.numel(), exp_avg_.device())) return true;
#endif
  return exp_avg_.defined() && exp_avg_.is_cpu();
}

void AdamShardOptimizer::step_ranges(const std::vector<ShardRange>& ranges, double lr, int64_t step) {
#ifdef DSTRAIN_WITH_CUDA
  if (exp_avg_.is_cuda()) {
    // The ranges lie on the state's device; the launch goes on its current stream, after the
    // gradients' producers and before their readers, as a tensor op would.
    const c10::cuda::CUDAGuard device(exp_avg_.device());
    float* const m = exp_avg_.data_ptr<float>();
    float* const v = exp_avg_sq_.data_ptr<float>();
    std::vector<fused::cuda::AdamRange> on_device;
    on_device.reserve(ranges.size());
    for (const ShardRange& r : ranges)
      on_device.push_back({r.params, r.grads, m + r.shard_offset, v + r.shard_offset, r.n});
    fused::cuda::adam(on_device.data(), static_cast<int64_t>(on_device.size()), step_scalars(lr, step),
                      c10::cuda::getCurrentCUDAStream().stream());
    return;
  }
#endif
  ShardOptimizer::step_ranges(ranges, lr, step);
}

void AdamShardOptimizer::apply(const at::Tensor& params, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                               double lr, int64_t step) const {
  const fused::AdamStep s = step_scalars(lr, step);
  if (params.is_cpu()) {
    check_flat_shards({&params, &exp_avg, &exp_avg_sq}, params.numel());
    fused::adam_update(params.data_ptr<float>(), exp_avg.data_ptr<float>(), exp_avg_sq.data_ptr<float>(),
                       params.numel(), s);
    return;
  }
  if (decoupled_ && s.weight_decay != 0) params.mul_(1 - lr * s.weight_decay);
  at::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(s.bias_correction2)).add_(s.eps);
  params.addcdiv_(exp_avg, denom, -lr / s.bias_correction1);
}

fused::AdamStep AdamShardOptimizer::step_scalars(double lr, int64_t step) const {
  fused::AdamStep s;
  s.lr = lr;
  s.beta1 = config_.betas[0];
  s.beta2 = config_.betas[1];
  s.eps = config_.eps;
  s.weight_decay = config_.weight_decay;
  s.decoupled = decoupled_;
  if (config_.bias_correction) {
    s.bias_correction1 = 1 - std::pow(s.beta1, step);
    s.bias_correction2 = 1 - std::pow(s.beta2, step);
  }
  return s;
}

std::vector<std::pair<std::string, at::Tensor>> AdamShardOptimizer::state() {
  return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}};
}

SgdShardOptimizer::SgdShardOptimizer(const OptimizerConfig& config, int64_t shard_numel, at::Device device)
    : config_(config), momentum_buffer_(at::zeros({shard_numel}, at::dtype(at::kFloat).device(device))) {}

void SgdShardOptimizer::step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step) {
  if (params.is_cpu()) {
    check_flat_shards({&params, &grads, &momentum_buffer_}, momentum_buffer_.numel());
    float* state[] = {momentum_buffer_.data_ptr<float>()};
    step_range(params.data_ptr<float>(), grads.data_ptr<float>(), state, params.numel(), lr, step);
    return;
  }
  // A device shard (CUDA): the same update as tensor ops.
  at::Tensor grad = config_.weight_decay != 0 ? grads.add(params, config_.weight_decay) : grads;
  if (config_.momentum != 0) {
    if (step == 1)
      momentum_buffer_.copy_(grad);
    else
      momentum_buffer_.mul_(config_.momentum).add_(grad, 1 - config_.dampening);
    grad = config_.nesterov ? grad.add(momentum_buffer_, config_.momentum) : momentum_buffer_;
  }
  params.add_(grad, -lr);
}

void SgdShardOptimizer::step_range(float* params, const float* grads, float* const* state, int64_t n, double lr,
                                   int64_t step) const {
  fused::SgdStep s;
  s.lr = lr;
  s.momentum = config_.momentum;
  s.dampening = config_.dampening;
  s.weight_decay = config_.weight_decay;
  s.nesterov = config_.nesterov;
  s.first = step == 1;
  fused::sgd(params, grads, state[0], n, s);
}

bool SgdShardOptimizer::steps_ranges() const { return momentum_buffer_.defined() && momentum_buffer_.is_cpu(); }

std::vector<std::pair<std::string, at::Tensor>> SgdShardOptimizer::state() {
  return {{"momentum_buffer", momentum_buffer_}};
}

}  // namespace ds
