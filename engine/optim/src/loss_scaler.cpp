#include "dstrain/engine/optim/loss_scaler.hpp"

#include <algorithm>
#include <cmath>

namespace ds {

LossScaler::LossScaler(const Fp16Config& config) : config_(config), dynamic_(config.loss_scale == 0) {
  state_.scale = dynamic_ ? std::ldexp(1.0, config.initial_scale_power) : config.loss_scale;
  state_.hysteresis_left = config.hysteresis;
}

bool LossScaler::update(bool overflow) {
  if (!dynamic_) return !overflow;
  if (overflow) {
    if (config_.hysteresis == 1 || state_.hysteresis_left == 1)
      state_.scale = std::max(state_.scale / 2, config_.min_loss_scale);
    else
      --state_.hysteresis_left;
    state_.last_overflow_iteration = state_.iteration;
  } else {
    if (config_.consecutive_hysteresis) state_.hysteresis_left = config_.hysteresis;
    if ((state_.iteration - state_.last_overflow_iteration) % config_.loss_scale_window == 0) {
      if (!config_.consecutive_hysteresis) state_.hysteresis_left = config_.hysteresis;
      state_.scale *= 2;
    }
  }
  ++state_.iteration;
  return !overflow;
}

}  // namespace ds
