#include "dstrain/engine/optimizer.hpp"

#include <ATen/ATen.h>

#include <cmath>

#include "dstrain/runtime/error.hpp"

namespace ds {

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
  const auto [beta1, beta2] = config_.betas;
  at::Tensor grad = grads;
  if (!decoupled_ && config_.weight_decay != 0) grad = grads.add(params, config_.weight_decay);
  exp_avg_.mul_(beta1).add_(grad, 1 - beta1);
  exp_avg_sq_.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  apply(params, exp_avg_, exp_avg_sq_, lr, step);
}

void AdamShardOptimizer::apply(const at::Tensor& params, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                               double lr, int64_t step) const {
  const auto [beta1, beta2] = config_.betas;
  if (decoupled_ && config_.weight_decay != 0) params.mul_(1 - lr * config_.weight_decay);
  const double bias1 = config_.bias_correction ? 1 - std::pow(beta1, step) : 1.0;
  const double bias2 = config_.bias_correction ? 1 - std::pow(beta2, step) : 1.0;
  at::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias2)).add_(config_.eps);
  params.addcdiv_(exp_avg, denom, -lr / bias1);
}

std::vector<std::pair<std::string, at::Tensor>> AdamShardOptimizer::state() {
  return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}};
}

SgdShardOptimizer::SgdShardOptimizer(const OptimizerConfig& config, int64_t shard_numel, at::Device device)
    : config_(config), momentum_buffer_(at::zeros({shard_numel}, at::dtype(at::kFloat).device(device))) {}

void SgdShardOptimizer::step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step) {
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

std::vector<std::pair<std::string, at::Tensor>> SgdShardOptimizer::state() {
  return {{"momentum_buffer", momentum_buffer_}};
}

}  // namespace ds
