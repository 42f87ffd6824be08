#include "dstrain/engine/optim/onebit_adam.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "dstrain/comm/backend.hpp"
#include "dstrain/comm/onebit_kernels.hpp"
#include "dstrain/engine/kernels/fused_optimizer.hpp"
#include "dstrain/runtime/error.hpp"
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

OneBitAdamShardOptimizer::OneBitAdamShardOptimizer(const OptimizerConfig& config, const zero::ShardLayout& shards,
                                                   at::Device device, comm::Backend& group)
    : adam_(without_bias_correction(config), shards.shard_numel(), device, /*decoupled=*/true),
      group_(group),
      freeze_step_(config.freeze_step),
      beta1_(config.betas[0]),
      local_rank_(rank_env_from_environment().local_rank),
      partitioned_(shards.partitions() > 1),
      partition_(shards, group.world_size()) {
  if (partitioned_ && !device.is_cpu())
    throw Error("OneBitAdam under ZeRO runs on the CPU only so far, the model is on " + device.str())
        .with_key("zero_optimization.stage");
  const comm::onebit::Layout& layout = partition_.flat();
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
  if (partitioned_) {
    partitioned_compressed_step(params, grads, lr, step);
    return;
  }
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

void OneBitAdamShardOptimizer::partitioned_compressed_step(const at::Tensor& params, const at::Tensor& grads, double lr,
                                                           int64_t step) {
  const comm::onebit::Layout& flat = partition_.flat();
  const at::Tensor& exp_avg = adam_.exp_avg();
  check_flat_shards({&grads}, flat.padded);
  // m = β1·m + (1−β1)·g into the gradient buffer, by fused::momentum's arithmetic (its padding
  // stays 0), with the last averaged momentum as kept, or (first compressed step, or a loaded
  // checkpoint) as gathered from every rank's exp_avg shard.
  float* m = grads.data_ptr<float>();
  const float b = static_cast<float>(beta1_), one_minus_b = static_cast<float>(1 - beta1_);
  if (kept_momentum_current()) {
    at::parallel_for(0, flat.numel, 1 << 15, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) m[i] = std::fma(one_minus_b, m[i], partition_.kept_value(i) * b);
    });
  } else {
    partition_.gather(exp_avg, group_, [&](int64_t offset, const float* last, int64_t count) {
      for (int64_t e = 0; e < count; ++e) m[offset + e] = std::fma(one_minus_b, m[offset + e], last[e] * b);
    });
  }
  group_.compressed_allreduce(grads, worker_error_, server_error_, local_rank_);
  partition_.keep(m);
  partition_.to_shard(m, exp_avg);
  adam_.apply(params, exp_avg, adam_.exp_avg_sq(), lr, step);
}

bool OneBitAdamShardOptimizer::kept_momentum_current() {
  bool same = partition_.kept();
  const float* m = adam_.exp_avg().data_ptr<float>();
  for (const OneBitPartition::Piece& piece : partition_.pieces())
    for (int64_t k = 0; same && k < piece.count; ++k) same = m[piece.shard + k] == partition_.kept_value(piece.flat + k);
  return on_every_rank(same, group_);
}

std::vector<std::pair<std::string, at::Tensor>> OneBitAdamShardOptimizer::state() { return adam_.state(); }

std::vector<std::pair<std::string, at::Tensor>> OneBitAdamShardOptimizer::local_state() {
  return {{"worker_error", worker_error_}, {"server_error", server_error_}};
}

}  // namespace ds
