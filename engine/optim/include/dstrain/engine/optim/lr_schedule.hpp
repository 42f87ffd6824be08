// Learning-rate schedules with DeepSpeed's formulas (deepspeed/runtime/lr_schedules.py), as pure
// functions of the iteration: lr(i) is the rate of the (i+1)-th optimizer step. Being stateless,
// a schedule needs nothing in a checkpoint but the step count.
#pragma once

#include <cstdint>

#include "dstrain/runtime/config.hpp"

namespace ds {

class LrSchedule {
 public:
  // `base_lr` is the optimizer's lr: the constant rate without a scheduler, WarmupLR's default max.
  LrSchedule(const SchedulerConfig& config, double base_lr);
  double lr(int64_t iteration) const;

 private:
  double warmup_gamma(int64_t iteration) const;
  double one_cycle(int64_t iteration) const;
  double warmup_cosine_ratio(int64_t iteration) const;

  SchedulerConfig config_;
  double base_lr_;
  int64_t warmup_steps_;
};

}  // namespace ds
