#include "dstrain/engine/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

#include "dstrain/runtime/error.hpp"

namespace ds {

LrSchedule::LrSchedule(const SchedulerConfig& config, double base_lr)
    : config_(config), base_lr_(base_lr), warmup_steps_(std::max<int64_t>(2, config.warmup_num_steps)) {
  switch (config_.type) {
    case SchedulerType::None:
    case SchedulerType::WarmupLR:
    case SchedulerType::OneCycle:
      break;
    case SchedulerType::LRRangeTest:
      break;
    case SchedulerType::WarmupDecayLR:
    case SchedulerType::WarmupCosineLR:
      if (!config_.total_num_steps)
        throw Error(std::string(to_string(config_.type)) + " needs total_num_steps").with_key("scheduler.params.total_num_steps");
      break;
  }
}

// DeepSpeed clamps warmup_num_steps to at least 2 so that log(warmup) is positive.
double LrSchedule::warmup_gamma(int64_t i) const {
  if (i >= warmup_steps_) return 1.0;
  if (config_.warmup_type == "linear") return static_cast<double>(i) / warmup_steps_;
  return std::log(static_cast<double>(i + 1)) / std::log(static_cast<double>(warmup_steps_));
}

double LrSchedule::one_cycle(int64_t i) const {
  const double first = static_cast<double>(config_.cycle_first_step_size);
  const double total = first + static_cast<double>(config_.cycle_second_step_size);
  if (i < total) {
    const double iteration = static_cast<double>(i + 1);
    const double cycle = std::floor(1 + iteration / total);
    const double x = 1 + iteration / total - cycle;
    const double ratio = first / total;
    const double scale = x <= ratio ? x / ratio : (x - 1) / (ratio - 1);
    return config_.cycle_min_lr + (config_.cycle_max_lr - config_.cycle_min_lr) * scale;
  }
  if (config_.decay_step_size == 0) return config_.cycle_min_lr;
  const double decay_interval = static_cast<double>(i - total + 1) / static_cast<double>(config_.decay_step_size);
  return config_.cycle_min_lr / (1 + config_.decay_lr_rate * decay_interval);
}

double LrSchedule::lr(int64_t i) const {
  switch (config_.type) {
    case SchedulerType::WarmupLR: {
      const double max_lr = config_.warmup_max_lr.value_or(base_lr_);
      return config_.warmup_min_lr + (max_lr - config_.warmup_min_lr) * warmup_gamma(i);
    }
    case SchedulerType::WarmupDecayLR: {
      const double max_lr = config_.warmup_max_lr.value_or(0.001);
      double gamma = warmup_gamma(i);
      if (i >= warmup_steps_) {
        const double remaining = static_cast<double>(*config_.total_num_steps - i);
        gamma = std::max(0.0, remaining / std::max(1.0, static_cast<double>(*config_.total_num_steps - warmup_steps_)));
      }
      return config_.warmup_min_lr + (max_lr - config_.warmup_min_lr) * gamma;
    }
    case SchedulerType::WarmupCosineLR:
      return base_lr_ * warmup_cosine_ratio(i);
    case SchedulerType::OneCycle:
      return one_cycle(i);
    case SchedulerType::LRRangeTest: {
      // The rate grows by lr_range_test_step_rate x min_lr every lr_range_test_step_size steps,
      // continuously or (staircase) at whole intervals, with no end.
      const double interval = static_cast<double>(i + 1) / static_cast<double>(config_.lr_range_test_step_size);
      return config_.lr_range_test_min_lr *
             (1 + config_.lr_range_test_step_rate * (config_.lr_range_test_staircase ? std::floor(interval) : interval));
    }
    case SchedulerType::None:
      return base_lr_;
  }
  return base_lr_;
}

// WarmupCosineLR's factor of the optimizer's lr: from warmup_min_ratio up to 1 over the warm-up
// (warmup_gamma's log or linear curve), then half a cosine down to cos_min_ratio, reached at
// total_num_steps and kept after it. A cosine phase of no steps (total <= warm-up) counts as one,
// so the first step after warm-up is already at cos_min_ratio (DeepSpeed's max(1, ...)).
double LrSchedule::warmup_cosine_ratio(int64_t i) const {
  if (i < warmup_steps_) return config_.warmup_min_ratio + warmup_gamma(i) * (1.0 - config_.warmup_min_ratio);
  const double done = static_cast<double>(i - warmup_steps_ + 1);
  const double total = static_cast<double>(std::max<int64_t>(1, *config_.total_num_steps - warmup_steps_));
  const double progress = std::min(1.0, done / total);
  const double cosine = (1 + std::cos(M_PI * progress)) / 2;
  return std::max(0.0, config_.cos_min_ratio + (1.0 - config_.cos_min_ratio) * cosine);
}

}  // namespace ds
