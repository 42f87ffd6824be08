#include "dstrain/engine/optim/lamb.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "dstrain/runtime/error.hpp"

namespace ds {
namespace {

constexpr int64_t kGrain = 1 << 15;

using Sums = std::array<double, 2>;

Sums add(const Sums& a, const Sums& b) { return {a[0] + b[0], a[1] + b[1]}; }

}  // namespace

LambShardOptimizer::LambShardOptimizer(const OptimizerConfig& config, const zero::ShardLayout& layout,
                                       at::Device device, comm::Backend& group)
    : config_(config),
      partition_group_(layout.partitions() > 1 ? &group : nullptr),
      exp_avg_(at::zeros({layout.shard_numel()}, at::dtype(at::kFloat).device(device))),
      exp_avg_sq_(at::zeros({layout.shard_numel()}, at::dtype(at::kFloat).device(device))) {
  for (size_t i = 0; i < layout.size(); ++i) segments_.push_back({layout.slot(i).shard_offset, layout.slot(i).chunk});
  coefficients_.assign(segments_.size(), 1.0);
}

std::vector<double> LambShardOptimizer::update_moments_and_norms(const at::Tensor& params, const at::Tensor& grads) {
  // 1 − β in double, then rounded, as FusedLamb's host code: 1 − float(0.999) would be 1.3e-5 smaller.
  const float b1 = static_cast<float>(config_.betas[0]), b2 = static_cast<float>(config_.betas[1]);
  const float one_minus_b1 = static_cast<float>(1 - config_.betas[0]);
  const float one_minus_b2 = static_cast<float>(1 - config_.betas[1]);
  const float eps = static_cast<float>(config_.eps), decay = static_cast<float>(config_.weight_decay);
  std::vector<double> sums(2 * segments_.size());
  if (!params.is_cpu()) {
    // On an accelerator the same arithmetic as tensor operations (host code never reads device memory).
    exp_avg_.mul_(b1).add_(grads, one_minus_b1);
    exp_avg_sq_.mul_(b2).addcmul_(grads, grads, one_minus_b2);
    const at::Tensor denom = config_.eps_inside_sqrt ? exp_avg_sq_.add(eps).sqrt_() : exp_avg_sq_.sqrt().add_(eps);
    const at::Tensor update = exp_avg_.div(denom).add_(params, decay);
    std::vector<at::Tensor> parts;
    for (const Segment& s : segments_) {
      parts.push_back(params.narrow(0, s.offset, s.numel).to(at::kDouble).pow(2).sum());
      parts.push_back(update.narrow(0, s.offset, s.numel).to(at::kDouble).pow(2).sum());
    }
    const at::Tensor host = at::stack(parts).cpu();
    std::copy_n(host.data_ptr<double>(), sums.size(), sums.begin());
    return sums;
  }
  float* p = params.data_ptr<float>();
  const float* g = grads.data_ptr<float>();
  float* m = exp_avg_.data_ptr<float>();
  float* v = exp_avg_sq_.data_ptr<float>();
  const bool inside = config_.eps_inside_sqrt;
  for (size_t k = 0; k < segments_.size(); ++k) {
    const Segment& s = segments_[k];
    const Sums result = at::parallel_reduce(
        s.offset, s.offset + s.numel, kGrain, Sums{0, 0},
        [&](int64_t begin, int64_t end, Sums acc) {
          double w2 = 0, u2 = 0;
          for (int64_t i = begin; i < end; ++i) {
            const float mi = b1 * m[i] + one_minus_b1 * g[i];
            const float vi = b2 * v[i] + one_minus_b2 * g[i] * g[i];
            m[i] = mi;
            v[i] = vi;
            const float denom = inside ? std::sqrt(vi + eps) : std::sqrt(vi) + eps;
            const float u = mi / denom + decay * p[i];
            w2 += double(p[i]) * p[i];
            u2 += double(u) * u;
          }
          return Sums{acc[0] + w2, acc[1] + u2};
        },
        add);
    sums[2 * k] = result[0];
    sums[2 * k + 1] = result[1];
  }
  return sums;
}

void LambShardOptimizer::apply(const at::Tensor& params, double step_size) {
  const float eps = static_cast<float>(config_.eps), decay = static_cast<float>(config_.weight_decay);
  if (!params.is_cpu()) {
    const at::Tensor denom = config_.eps_inside_sqrt ? exp_avg_sq_.add(eps).sqrt_() : exp_avg_sq_.sqrt().add_(eps);
    const at::Tensor update = exp_avg_.div(denom).add_(params, decay);
    for (size_t k = 0; k < segments_.size(); ++k)
      params.narrow(0, segments_[k].offset, segments_[k].numel)
          .add_(update.narrow(0, segments_[k].offset, segments_[k].numel), -step_size * coefficients_[k]);
    return;
  }
  float* p = params.data_ptr<float>();
  const float* m = exp_avg_.data_ptr<float>();
  const float* v = exp_avg_sq_.data_ptr<float>();
  const bool inside = config_.eps_inside_sqrt;
  for (size_t k = 0; k < segments_.size(); ++k) {
    const float scale = static_cast<float>(step_size * coefficients_[k]);
    at::parallel_for(segments_[k].offset, segments_[k].offset + segments_[k].numel, kGrain,
                     [&](int64_t begin, int64_t end) {
                       for (int64_t i = begin; i < end; ++i) {
                         const float denom = inside ? std::sqrt(v[i] + eps) : std::sqrt(v[i]) + eps;
                         p[i] -= scale * (m[i] / denom + decay * p[i]);
                       }
                     });
  }
}

void LambShardOptimizer::step(const at::Tensor& params, const at::Tensor& grads, double lr, int64_t step) {
  std::vector<double> sums = update_moments_and_norms(params, grads);
  if (partition_group_) {
    at::Tensor all = at::from_blob(sums.data(), {static_cast<int64_t>(sums.size())}, at::kDouble).to(params.device());
    partition_group_->all_reduce(all, comm::ReduceOp::Sum);
    const at::Tensor host = all.cpu();
    std::copy_n(host.data_ptr<double>(), sums.size(), sums.begin());
  }
  for (size_t k = 0; k < segments_.size(); ++k) {
    const double weight_norm = std::sqrt(sums[2 * k]), update_norm = std::sqrt(sums[2 * k + 1]);
    coefficients_[k] = weight_norm != 0 && update_norm != 0
                           ? std::clamp(weight_norm / update_norm, config_.min_coeff, config_.max_coeff)
                           : 1.0;
  }
  const auto [beta1, beta2] = config_.betas;
  const double step_size = config_.bias_correction
                               ? lr * std::sqrt(1 - std::pow(beta2, step)) / (1 - std::pow(beta1, step))
                               : lr;
  apply(params, step_size);
}

std::vector<std::pair<std::string, at::Tensor>> LambShardOptimizer::state() {
  return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}};
}

}  // namespace ds
