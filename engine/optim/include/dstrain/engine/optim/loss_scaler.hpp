// LossScaler: fp16 loss scaling, DeepSpeed's DynamicLossScaler state machine (or a static scale).
// On overflow the step is skipped and the scale backs off (after `hysteresis` overflows); after
// `loss_scale_window` clean steps it grows by 2; it never goes below min_loss_scale.
#pragma once

#include <cstdint>

#include "dstrain/runtime/config.hpp"

namespace ds {

struct LossScalerState {
  double scale = 1.0;
  int64_t iteration = 0;
  int64_t last_overflow_iteration = -1;
  int hysteresis_left = 1;
};

class LossScaler {
 public:
  explicit LossScaler(const Fp16Config& config);

  double scale() const { return state_.scale; }
  bool dynamic() const { return dynamic_; }
  // Records one step's outcome; returns false when the step must be skipped (overflow).
  bool update(bool overflow);

  const LossScalerState& state() const { return state_; }
  void restore(const LossScalerState& state) { state_ = state; }

 private:
  Fp16Config config_;
  bool dynamic_;
  LossScalerState state_;
};

}  // namespace ds
