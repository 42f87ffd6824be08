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

// The compression stage's arithmetic on one value, the same at every stage so that all round alike.
// 1 − β in double, then rounded, as DeepSpeed's (1 - beta) on Python floats.
struct OneBitLambShardOptimizer::Arithmetic {
  explicit Arithmetic(const OptimizerConfig& c)
      : b1(static_cast<float>(c.betas[0])),
        b2(static_cast<float>(c.betas[1])),
        one_minus_b1(static_cast<float>(1 - c.betas[0])),
        one_minus_b2(static_cast<float>(1 - c.betas[1])),
        eps(static_cast<float>(c.eps)),
        decay(static_cast<float>(c.weight_decay)) {}

  // This rank's momentum, scaled for the compression.
  float momentum(float m, float g, float scale) const { return (b1 * m + one_minus_b1 * g) * scale; }
  // With the averaged momentum `m` and the one before it, `last`: updates the fresh variance and adds
  // to the parameter's sums (u2, prelim2) and ratio.
  void measure(float m, float last, float& fresh, float v, float p, double& u2, double& prelim2, float& ratio) const {
    const float reconstructed = (m - last * b1) / one_minus_b1;
    const float fi = b2 * fresh + one_minus_b2 * reconstructed * reconstructed;
    fresh = fi;
    const float denom = std::sqrt(v) + eps;
    const float prelim = m / denom;
    const float u = prelim + decay * p;
    u2 += double(u) * u;
    prelim2 += double(prelim) * prelim;
    ratio = std::max(ratio, denom / (std::sqrt(fi) + eps));
  }
  float updated(float p, float m, float v, float scale) const { return p - scale * (m / (std::sqrt(v) + eps) + decay * p); }

  float b1, b2, one_minus_b1, one_minus_b2, eps, decay;
};

OneBitLambShardOptimizer::OneBitLambShardOptimizer(const OptimizerConfig& config, const zero::ShardLayout& layout,
                                                   at::Device device, comm::Backend& group)
    : config_(config),
      lamb_(warmup_lamb(config), layout, device, group),
      group_(group),
      local_rank_(rank_env_from_environment().local_rank),
      partition_(layout, group.world_size()) {
  if (!device.is_cpu())
    throw Error("OneBitLamb runs on the CPU only so far, the model is on " + device.str()).with_key("optimizer.type");
  const int64_t n = layout.shard_numel();
  const auto f32 = at::dtype(at::kFloat).device(device);
  exp_avg_sq_fresh_ = at::zeros({n}, f32);
  worker_error_ = at::zeros({partition_.flat().padded}, f32);
  server_error_ = at::zeros({partition_.flat().chunk}, f32);
  const int64_t count = static_cast<int64_t>(layout.size());
  coeff_freeze_ = at::zeros({count}, at::kDouble);
  last_factor_ = at::ones({count}, at::kDouble);
  scaling_coeff_ = at::zeros({count}, at::kDouble);
  partitioned_ = layout.partitions() > 1;
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
  if (partitioned_) {
    partitioned_compressed_step(params, grads, lr);
    return;
  }
  // scaling_coeff is 0 until the compression stage starts (and stays set in a checkpoint after it).
  if (!compression_started()) start_compression(lamb_.exp_avg());
  compressed_step(params, grads, lr);
}

bool OneBitLambShardOptimizer::compression_started() const { return scaling_coeff_.ne(0).any().item<bool>(); }

// DeepSpeed's scaling_coeff: brings every parameter's momentum to the same RMS before the one-scale
// compression of the flat buffer. `m`: the whole momentum in stage 0's flat order.
void OneBitLambShardOptimizer::start_compression(const at::Tensor& m) {
  log::info("OneBitLamb: variance frozen, compressed communication starts");
  std::vector<double> scales;
  for (size_t k = 0; k < partition_.size(); ++k) {
    const int64_t numel = partition_.numel(k);
    scales.push_back(m.narrow(0, partition_.flat_offset(k), numel).to(at::kDouble).norm().item<double>() /
                     std::sqrt(double(numel)));
  }
  double united = 0;
  for (double scale : scales) united += scale;
  united /= static_cast<double>(scales.size());
  double* scaling = scaling_coeff_.data_ptr<double>();
  for (size_t k = 0; k < scales.size(); ++k) scaling[k] = scales[k] > 0 ? united / scales[k] : 1.0;
  last_factor_.fill_(1.0);
}

void OneBitLambShardOptimizer::compressed_step(const at::Tensor& params, const at::Tensor& grads, double lr) {
  const auto& segments = lamb_.segments();
  const Arithmetic a(config_);
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
        m[i] = a.momentum(m[i], g[i], scale);
      }
    });
  }
  // With one rank there is nothing to average, and DeepSpeed leaves the momentum uncompressed.
  if (group_.world_size() > 1) group_.compressed_allreduce(lamb_.exp_avg(), worker_error_, server_error_, local_rank_);

  std::vector<Stats> stats(segments.size());
  for (size_t k = 0; k < segments.size(); ++k) {
    const float inverse = static_cast<float>(1.0 / scaling[k]);
    stats[k] = at::parallel_reduce(
        segments[k].offset, segments[k].offset + segments[k].numel, kGrain, Stats{0, 0, 0},
        [&](int64_t begin, int64_t end, Stats acc) {
          double u2 = 0, prelim2 = 0;
          float ratio = 0;
          for (int64_t i = begin; i < end; ++i) {
            m[i] = m[i] * inverse;
            a.measure(m[i], last[i], fresh[i], v[i], p[i], u2, prelim2, ratio);
          }
          return combine(acc, Stats{u2, prelim2, ratio});
        },
        combine);
  }
  const std::vector<double> coefficients = coefficients_from(stats);
  for (size_t k = 0; k < segments.size(); ++k) {
    const float scale = static_cast<float>(lr * coefficients[k]);
    at::parallel_for(segments[k].offset, segments[k].offset + segments[k].numel, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) p[i] = a.updated(p[i], m[i], v[i], scale);
    });
  }
}

// Under ZeRO-1/2: the scaled momentum and its compressed allreduce on the whole flat vector, as at
// stage 0 (grads: this rank's whole gradients, flat and padded, overwritten); the rest on this rank's
// pieces of it, each parameter's sums and ratio combined across the group.
void OneBitLambShardOptimizer::partitioned_compressed_step(const at::Tensor& params, const at::Tensor& grads,
                                                           double lr) {
  check_flat_shards({&grads}, partition_.flat().padded);
  const Arithmetic a(config_);
  const at::Tensor& exp_avg = lamb_.exp_avg();
  const double* scaling = scaling_coeff_.data_ptr<double>();
  const bool kept = kept_momentum_current();
  const at::Tensor gathered = kept ? at::Tensor() : partition_.gather(exp_avg, group_);
  if (!compression_started()) start_compression(gathered);

  float* x = grads.data_ptr<float>();
  for (size_t k = 0; k < partition_.size(); ++k) {
    const float scale = static_cast<float>(scaling[k]);
    const float inverse = static_cast<float>(1.0 / scaling[k]);
    const int64_t offset = partition_.flat_offset(k);
    const float* whole = kept ? nullptr : gathered.data_ptr<float>();
    at::parallel_for(offset, offset + partition_.numel(k), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        x[i] = a.momentum(kept ? partition_.kept_value(i) * inverse : whole[i], x[i], scale);
    });
  }
  group_.compressed_allreduce(grads, worker_error_, server_error_, local_rank_);
  partition_.keep(x);

  float* p = params.data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();  // the momentum before this step, until replaced below
  const float* v = lamb_.exp_avg_sq().data_ptr<float>();
  float* fresh = exp_avg_sq_fresh_.data_ptr<float>();
  const size_t count = partition_.size();
  at::Tensor sums = at::zeros({2 * static_cast<int64_t>(count)}, at::kDouble);
  at::Tensor ratios = at::zeros({static_cast<int64_t>(count)}, at::kFloat);
  const auto& pieces = partition_.pieces();
  for (size_t j = 0; j < pieces.size(); ++j) {
    const size_t k = partition_.param_of_piece(j);
    const float inverse = static_cast<float>(1.0 / scaling[k]);
    const OneBitPartition::Piece piece = pieces[j];
    double u2 = 0, prelim2 = 0;
    float ratio = 0;
    for (int64_t e = 0; e < piece.count; ++e) {
      const int64_t i = piece.shard + e;
      const float averaged = x[piece.flat + e] * inverse;
      a.measure(averaged, m[i], fresh[i], v[i], p[i], u2, prelim2, ratio);
      m[i] = averaged;
    }
    sums[2 * k] = u2;
    sums[2 * k + 1] = prelim2;
    ratios[k] = ratio;
  }
  group_.all_reduce(sums, comm::ReduceOp::Sum);
  group_.all_reduce(ratios, comm::ReduceOp::Max);
  std::vector<Stats> stats(count);
  for (size_t k = 0; k < count; ++k)
    stats[k] = {sums[2 * k].item<double>(), sums[2 * k + 1].item<double>(), ratios[k].item<float>()};
  const std::vector<double> coefficients = coefficients_from(stats);
  for (size_t j = 0; j < pieces.size(); ++j) {
    const float scale = static_cast<float>(lr * coefficients[partition_.param_of_piece(j)]);
    for (int64_t i = pieces[j].shard; i < pieces[j].shard + pieces[j].count; ++i) p[i] = a.updated(p[i], m[i], v[i], scale);
  }
}

// Each parameter's coefficient from its sums and ratio: lamb_coeff_freeze · factor, the factor
// mixed with 1 under weight decay and clamped.
std::vector<double> OneBitLambShardOptimizer::coefficients_from(const std::vector<Stats>& stats) {
  const double* freeze = coeff_freeze_.data_ptr<double>();
  double* last_factor = last_factor_.data_ptr<double>();
  std::vector<double> coefficients(stats.size());
  for (size_t k = 0; k < stats.size(); ++k) {
    double factor = stats[k][2];
    if (config_.weight_decay > 0) {
      const double update_norm = std::sqrt(stats[k][0]);
      const double update_ratio = update_norm > 0 ? std::min(1.0, std::sqrt(stats[k][1]) / update_norm) : 1.0;
      factor = factor * update_ratio + (1.0 - update_ratio);
    }
    factor = std::clamp(factor, config_.factor_min, config_.factor_max);
    factor = std::min(factor, last_factor[k] * (1.0 + config_.factor_threshold));
    factor = std::max(factor, last_factor[k] * (1.0 - config_.factor_threshold));
    last_factor[k] = factor;
    coefficients[k] = freeze[k] * factor;
  }
  return coefficients;
}

bool OneBitLambShardOptimizer::kept_momentum_current() {
  bool same = partition_.kept();
  const float* m = lamb_.exp_avg().data_ptr<float>();
  const double* scaling = scaling_coeff_.data_ptr<double>();
  const auto& pieces = partition_.pieces();
  for (size_t j = 0; same && j < pieces.size(); ++j) {
    const float inverse = static_cast<float>(1.0 / scaling[partition_.param_of_piece(j)]);
    for (int64_t e = 0; same && e < pieces[j].count; ++e)
      same = m[pieces[j].shard + e] == partition_.kept_value(pieces[j].flat + e) * inverse;
  }
  return on_every_rank(same, group_);
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
