#include "dstrain/engine/optim/onebit_lamb.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "dstrain/comm/onebit_kernels.hpp"
#include "dstrain/engine/optim/onebit_adam.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/rank_env.hpp"

namespace ds {
namespace {

constexpr int64_t kGrain = 1 << 15;

// The warm-up stage is DeepSpeed's OnebitLamb: no bias correction, eps outside the root.
OptimizerConfig warmup_lamb(OptimizerConfig config) {
  config.bias_correction = false;
  config.eps_inside_sqrt = false;
  return config;
}

// Per parameter in the compression stage: Σ update², Σ (m/denom)², max(denom / denom_fresh).
using Stats = std::array<double, 3>;

Stats combine(const Stats& a, const Stats& b) { return {a[0] + b[0], a[1] + b[1], std::max(a[2], b[2])}; }

}  // namespace

OneBitLambShardOptimizer::OneBitLambShardOptimizer(const OptimizerConfig& config, const zero::ShardLayout& layout,
                                                   at::Device device, comm::Backend& group)
    : config_(config),
      lamb_(warmup_lamb(config), layout, device, group),
      group_(group),
      local_rank_(rank_env_from_environment().local_rank) {
  if (layout.partitions() != 1)
    throw Error("OneBitLamb needs the whole model on every rank (ZeRO stage 0)").with_key("zero_optimization.stage");
  if (!device.is_cpu())
    throw Error("OneBitLamb runs on the CPU only so far, the model is on " + device.str()).with_key("optimizer.type");
  const int64_t n = layout.shard_numel();
  const auto f32 = at::dtype(at::kFloat).device(device);
  exp_avg_sq_fresh_ = at::zeros({n}, f32);
  const comm::onebit::Layout onebit = comm::onebit::layout_for(n, group.world_size());
  worker_error_ = at::zeros({onebit.padded}, f32);
  server_error_ = at::zeros({onebit.chunk}, f32);
  const int64_t count = static_cast<int64_t>(layout.size());
  coeff_freeze_ = at::zeros({count}, at::kDouble);
  last_factor_ = at::ones({count}, at::kDouble);
  scaling_coeff_ = at::zeros({count}, at::kDouble);
  warn_on_transport_mismatch(config, group, "OneBitLamb");
  log::info("OneBitLamb: full allreduce for ", config.freeze_step, " steps, then 1-bit compressed momentum over ",
            group.world_size(), " ranks");
}

void OneBitLambShardOptimizer::step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step) {
  if (step <= config_.freeze_step) {
    lamb_.step(params, grads, lr, step);
    double* freeze = coeff_freeze_.data_ptr<double>();
    const std::vector<double>& coefficients = lamb_.coefficients();
    for (size_t k = 0; k < coefficients.size(); ++k)
      if (coefficients[k] != 1.0) freeze[k] = config_.coeff_beta * freeze[k] + (1 - config_.coeff_beta) * coefficients[k];
    if (step == config_.freeze_step) exp_avg_sq_fresh_.copy_(lamb_.exp_avg_sq());
    return;
  }
  // scaling_coeff is 0 until the compression stage starts (and stays set in a checkpoint after it).
  if (!scaling_coeff_.ne(0).any().item<bool>()) {
    log::info("OneBitLamb: step ", step, ", variance frozen, compressed communication starts");
    start_compression();
  }
  compressed_step(params, grads, lr);
}

// DeepSpeed's scaling_coeff: brings every parameter's momentum to the same RMS before the one-scale
// compression of the flat buffer.
void OneBitLambShardOptimizer::start_compression() {
  const at::Tensor& m = lamb_.exp_avg();
  const auto& segments = lamb_.segments();
  std::vector<double> scales;
  for (const auto& s : segments)
    scales.push_back(m.narrow(0, s.offset, s.numel).to(at::kDouble).norm().item<double>() / std::sqrt(double(s.numel)));
  double united = 0;
  for (double scale : scales) united += scale;
  united /= static_cast<double>(scales.size());
  double* scaling = scaling_coeff_.data_ptr<double>();
  for (size_t k = 0; k < scales.size(); ++k) scaling[k] = scales[k] > 0 ? united / scales[k] : 1.0;
  last_factor_.fill_(1.0);
  exp_avg_last_ = at::empty_like(m);
}

void OneBitLambShardOptimizer::compressed_step(const at::Tensor& params, const at::Tensor& grads, double lr) {
  const auto& segments = lamb_.segments();
  // 1 − β in double, then rounded, as DeepSpeed's (1 - beta) on Python floats.
  const float b1 = static_cast<float>(config_.betas[0]), b2 = static_cast<float>(config_.betas[1]);
  const float one_minus_b1 = static_cast<float>(1 - config_.betas[0]);
  const float one_minus_b2 = static_cast<float>(1 - config_.betas[1]);
  const float eps = static_cast<float>(config_.eps), decay = static_cast<float>(config_.weight_decay);
  float* p = params.data_ptr<float>();
  const float* g = grads.data_ptr<float>();
  float* m = lamb_.exp_avg().data_ptr<float>();
  const float* v = lamb_.exp_avg_sq().data_ptr<float>();
  float* fresh = exp_avg_sq_fresh_.data_ptr<float>();
  if (!exp_avg_last_.defined()) exp_avg_last_ = at::empty_like(lamb_.exp_avg());
  float* last = exp_avg_last_.data_ptr<float>();
  const double* scaling = scaling_coeff_.data_ptr<double>();

  for (size_t k = 0; k < segments.size(); ++k) {
    const float scale = static_cast<float>(scaling[k]);
    at::parallel_for(segments[k].offset, segments[k].offset + segments[k].numel, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        last[i] = m[i];
        m[i] = (b1 * m[i] + one_minus_b1 * g[i]) * scale;
      }
    });
  }
  // With one rank there is nothing to average, and DeepSpeed leaves the momentum uncompressed.
  if (group_.world_size() > 1) group_.compressed_allreduce(lamb_.exp_avg(), worker_error_, server_error_, local_rank_);

  double* freeze = coeff_freeze_.data_ptr<double>();
  double* last_factor = last_factor_.data_ptr<double>();
  std::vector<double> coefficients(segments.size());
  for (size_t k = 0; k < segments.size(); ++k) {
    const float inverse = static_cast<float>(1.0 / scaling[k]);
    const Stats stats = at::parallel_reduce(
        segments[k].offset, segments[k].offset + segments[k].numel, kGrain, Stats{0, 0, 0},
        [&](int64_t begin, int64_t end, Stats acc) {
          double u2 = 0, prelim2 = 0;
          float ratio = 0;
          for (int64_t i = begin; i < end; ++i) {
            const float mi = m[i] * inverse;
            m[i] = mi;
            const float reconstructed = (mi - last[i] * b1) / one_minus_b1;
            const float fi = b2 * fresh[i] + one_minus_b2 * reconstructed * reconstructed;
            fresh[i] = fi;
            const float denom = std::sqrt(v[i]) + eps;
            const float prelim = mi / denom;
            const float u = prelim + decay * p[i];
            u2 += double(u) * u;
            prelim2 += double(prelim) * prelim;
            ratio = std::max(ratio, denom / (std::sqrt(fi) + eps));
          }
          return combine(acc, Stats{u2, prelim2, ratio});
        },
        combine);
    double factor = stats[2];
    if (config_.weight_decay > 0) {
      const double update_norm = std::sqrt(stats[0]);
      const double update_ratio = update_norm > 0 ? std::min(1.0, std::sqrt(stats[1]) / update_norm) : 1.0;
      factor = factor * update_ratio + (1.0 - update_ratio);
    }
    factor = std::clamp(factor, config_.factor_min, config_.factor_max);
    factor = std::min(factor, last_factor[k] * (1.0 + config_.factor_threshold));
    factor = std::max(factor, last_factor[k] * (1.0 - config_.factor_threshold));
    last_factor[k] = factor;
    coefficients[k] = freeze[k] * factor;
  }

  for (size_t k = 0; k < segments.size(); ++k) {
    const float scale = static_cast<float>(lr * coefficients[k]);
    at::parallel_for(segments[k].offset, segments[k].offset + segments[k].numel, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) p[i] -= scale * (m[i] / (std::sqrt(v[i]) + eps) + decay * p[i]);
    });
  }
}

std::vector<std::pair<std::string, at::Tensor>> OneBitLambShardOptimizer::state() {
  std::vector<std::pair<std::string, at::Tensor>> out = lamb_.state();
  out.emplace_back("exp_avg_sq_fresh", exp_avg_sq_fresh_);
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> OneBitLambShardOptimizer::local_state() {
  return {{"worker_error", worker_error_}, {"server_error", server_error_}};
}

std::vector<std::pair<std::string, at::Tensor>> OneBitLambShardOptimizer::replicated_state() {
  return {{"lamb_coeff_freeze", coeff_freeze_}, {"last_factor", last_factor_}, {"scaling_coeff", scaling_coeff_}};
}

}  // namespace ds
