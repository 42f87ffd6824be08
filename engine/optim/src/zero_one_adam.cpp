#include "dstrain/engine/optim/zero_one_adam.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "dstrain/comm/onebit_kernels.hpp"
#include "dstrain/engine/optim/onebit_adam.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/rank_env.hpp"

namespace ds {
namespace {

constexpr int64_t kGrain = 1 << 15;

}  // namespace

ZeroOneAdamShardOptimizer::ZeroOneAdamShardOptimizer(const OptimizerConfig& config, const zero::ShardLayout& layout,
                                                     at::Device device, comm::Backend& group)
    : config_(config),
      group_(group),
      local_rank_(rank_env_from_environment().local_rank),
      partitioned_(layout.partitions() > 1),
      partition_(layout, group.world_size()) {
  const int64_t shard_numel = layout.shard_numel();
  if (!device.is_cpu())
    throw Error("ZeroOneAdam runs on the CPU only so far, the model is on " + device.str()).with_key("optimizer.type");
  const auto f32 = at::dtype(at::kFloat).device(device);
  exp_avg_ = at::zeros({shard_numel}, f32);
  exp_avg_sq_ = at::zeros({shard_numel}, f32);
  momentum_accumulator_ = at::zeros({shard_numel}, f32);
  lrs_ = at::zeros({1}, at::kDouble);
  worker_error_ = at::zeros({partition_.flat().padded}, f32);
  server_error_ = at::zeros({partition_.flat().chunk}, f32);
  if (partitioned_)
    log::info("ZeroOneAdam under ZeRO: its local steps after var_freeze_step (", config.var_freeze_step,
              ") need every rank's whole model state, and a run that reaches them stops with an error");
  warn_on_transport_mismatch(config, group, "ZeroOneAdam");
  log::info("ZeroOneAdam: variance updated at exponentially spaced steps until step ", config.var_freeze_step,
            ", 1-bit compressed gradients in between, then local steps over ", group.world_size(), " ranks");
}

void ZeroOneAdamShardOptimizer::advance(Intervals& intervals, int64_t step) const {
  if (!frozen(step)) {
    if (step % intervals.var_interval == 0 && ++intervals.var_counter == config_.var_update_scaler) {
      intervals.var_counter = 0;
      intervals.var_interval *= 2;
    }
  } else if (++intervals.local_step_counter == config_.local_step_scaler) {
    intervals.local_step_counter = 0;
    intervals.local_step_interval = std::min(config_.local_step_clipper, intervals.local_step_interval * 2);
  }
}

ZeroOneAdamShardOptimizer::Intervals ZeroOneAdamShardOptimizer::intervals_at(int64_t step) const {
  if (step - 1 < cached_step_) {
    cached_ = Intervals{};
    cached_step_ = 0;
  }
  for (; cached_step_ < step - 1; ++cached_step_) advance(cached_, cached_step_ + 1);
  return cached_;
}

bool ZeroOneAdamShardOptimizer::needs_reduced_gradients(int64_t step) const {
  return !frozen(step) && step % intervals_at(step).var_interval == 0;
}

void ZeroOneAdamShardOptimizer::step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step) {
  const Intervals intervals = intervals_at(step);
  // 1 − β in double, then rounded, as DeepSpeed's (1 - beta) on Python floats: 1 − float(0.999) would
  // be 1.3e-5 smaller, a bias in every variance update.
  const float b1 = static_cast<float>(config_.betas[0]), b2 = static_cast<float>(config_.betas[1]);
  const float one_minus_b1 = static_cast<float>(1 - config_.betas[0]);
  const float one_minus_b2 = static_cast<float>(1 - config_.betas[1]);
  const float eps = static_cast<float>(config_.eps), decay = static_cast<float>(config_.weight_decay);
  const float rate = static_cast<float>(lr);
  const int64_t n = params.numel();
  float* p = params.data_ptr<float>();
  float* m = exp_avg_.data_ptr<float>();
  float* v = exp_avg_sq_.data_ptr<float>();
  const bool parallel = group_.world_size() > 1;

  if (!frozen(step)) {
    const bool variance = step % intervals.var_interval == 0;
    // Off the variance steps the gradient is this rank's own; DeepSpeed averages it compressed.
    if (!variance && parallel) group_.compressed_allreduce(grads, worker_error_, server_error_, local_rank_);
    const float* g = grads.data_ptr<float>();
    if (!variance && partitioned_) {
      // The whole averaged gradient arrived; this rank steps its shard of it.
      if (!averaged_shard_.defined()) averaged_shard_ = at::empty_like(exp_avg_);
      partition_.to_shard(g, averaged_shard_);
      g = averaged_shard_.data_ptr<float>();
    }
    at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        if (variance) v[i] = b2 * v[i] + one_minus_b2 * g[i] * g[i];
        m[i] = b1 * m[i] + one_minus_b1 * g[i];
        p[i] -= rate * (m[i] / (std::sqrt(v[i]) + eps) + decay * p[i]);
      }
    });
    return;
  }

  if (partitioned_)
    throw Error("ZeroOneAdam's local steps (after var_freeze_step " + std::to_string(config_.var_freeze_step) +
                ") move each rank's whole model on its own gradients, state a ZeRO shard does not hold; raise "
                "var_freeze_step beyond the run, or use zero_optimization.stage 0")
        .with_key("optimizer.params.var_freeze_step");
  if (step == config_.var_freeze_step + 1) {
    log::info("ZeroOneAdam: step ", step, ", variance frozen, local steps start");
    worker_error_.zero_();
    server_error_.zero_();
  }
  const bool sync = step % intervals.local_step_interval == 0;
  double* lrs = lrs_.data_ptr<double>();
  *lrs += lr;
  const float* g = grads.data_ptr<float>();
  float* accumulated = momentum_accumulator_.data_ptr<float>();
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      m[i] = b1 * m[i] + one_minus_b1 * g[i];
      const float denom = std::sqrt(v[i]) + eps;
      const float move = rate * (m[i] / denom + decay * p[i]);
      p[i] -= move;
      accumulated[i] -= move;
      if (sync) {
        p[i] -= accumulated[i];
        accumulated[i] *= denom;
      }
    }
  });
  if (!sync) return;
  if (parallel) group_.compressed_allreduce(momentum_accumulator_, worker_error_, server_error_, local_rank_);
  const float inverse_lrs = static_cast<float>(1.0 / *lrs);
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      m[i] = -accumulated[i] * inverse_lrs;
      p[i] += accumulated[i] / (std::sqrt(v[i]) + eps);
      accumulated[i] = 0;
    }
  });
  *lrs = 0;
}

std::vector<std::pair<std::string, at::Tensor>> ZeroOneAdamShardOptimizer::state() {
  return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}, {"momentum_accumulator", momentum_accumulator_}};
}

std::vector<std::pair<std::string, at::Tensor>> ZeroOneAdamShardOptimizer::local_state() {
  return {{"worker_error", worker_error_}, {"server_error", server_error_}};
}

std::vector<std::pair<std::string, at::Tensor>> ZeroOneAdamShardOptimizer::replicated_state() {
  return {{"lrs", lrs_}};
}

}  // namespace ds
