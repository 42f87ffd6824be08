#include "dstrain/engine/optim/onebit_adam.hpp"

#include <ATen/ATen.h>

#include "dstrain/comm/backend.hpp"
#include "dstrain/comm/onebit_kernels.hpp"
#include "dstrain/engine/kernels/fused_optimizer.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/rank_env.hpp"

namespace ds {
namespace {

// DeepSpeed's OnebitAdam accepts bias_correction and never corrects.
OptimizerConfig without_bias_correction(OptimizerConfig config) {
  config.bias_correction = false;
  return config;
}

}  // namespace

void warn_on_transport_mismatch(const OptimizerConfig& config, comm::Backend& group, const char* optimizer) {
  const std::string transport = group.name();
  if (config.comm_backend_name != transport)
    log::warn(optimizer, ": comm_backend_name '", config.comm_backend_name, "' asked for, but the engine's ",
              "data-parallel group is ", transport, "; the compressed allreduce runs over ", transport);
}

OneBitAdamShardOptimizer::OneBitAdamShardOptimizer(const OptimizerConfig& config, int64_t shard_numel,
                                                   at::Device device, comm::Backend& group)
    : adam_(without_bias_correction(config), shard_numel, device, /*decoupled=*/true),
      group_(group),
      freeze_step_(config.freeze_step),
      beta1_(config.betas[0]),
      local_rank_(rank_env_from_environment().local_rank) {
  const comm::onebit::Layout layout = comm::onebit::layout_for(shard_numel, group.world_size());
  worker_error_ = at::zeros({layout.padded}, at::dtype(at::kFloat).device(device));
  server_error_ = at::zeros({layout.chunk}, at::dtype(at::kFloat).device(device));
  warn_on_transport_mismatch(config, group, "OneBitAdam");
  log::info("OneBitAdam: full allreduce for ", freeze_step_, " steps, then 1-bit compressed momentum over ",
            group.world_size(), " ranks (error buffers of ", layout.padded, " + ", layout.chunk, " values)");
}

void OneBitAdamShardOptimizer::step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step) {
  if (step <= freeze_step_) {
    adam_.step(params, grads, lr, step);
    return;
  }
  if (step == freeze_step_ + 1) log::info("OneBitAdam: step ", step, ", variance frozen, compressed communication starts");
  const at::Tensor& exp_avg = adam_.exp_avg();
  if (exp_avg.is_cpu()) {
    check_flat_shards({&exp_avg, &grads}, exp_avg.numel());
    fused::momentum(exp_avg.data_ptr<float>(), grads.data_ptr<float>(), exp_avg.numel(), beta1_);
  } else {
    exp_avg.mul_(beta1_).add_(grads, 1 - beta1_);
  }
  // With one rank there is nothing to average, and DeepSpeed leaves the momentum uncompressed.
  if (group_.world_size() > 1) group_.compressed_allreduce(exp_avg, worker_error_, server_error_, local_rank_);
  adam_.apply(params, exp_avg, adam_.exp_avg_sq(), lr, step);
}

std::vector<std::pair<std::string, at::Tensor>> OneBitAdamShardOptimizer::state() { return adam_.state(); }

std::vector<std::pair<std::string, at::Tensor>> OneBitAdamShardOptimizer::local_state() {
  return {{"worker_error", worker_error_}, {"server_error", server_error_}};
}

}  // namespace ds
