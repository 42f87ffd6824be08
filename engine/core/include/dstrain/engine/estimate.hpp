// What each ZeRO stage holds per rank, computed from parameter sizes alone: the same accounting
// as EngineCore::model_state_bytes() right after an optimizer step, taken from ds::MemoryPlan
// (memory_plan.hpp), which sizes every buffer. During backward, stages 0 and 1 accumulating over
// micro-steps also hold every parameter's gradient in the model dtype (peak_gradient_bytes).
#pragma once

#include <cstdint>
#include <vector>

#include "dstrain/engine/engine.hpp"
#include "dstrain/runtime/config.hpp"

namespace ds {

struct StageEstimate {
  int stage;
  ModelStateBytes after_step;
  int64_t peak_gradient_bytes;  // the most gradient bytes held at once, during backward
};

// One entry per ZeRO stage 0..3 for `param_numels` trained as `config` says on `world` ranks.
std::vector<StageEstimate> estimate_model_state(const std::vector<int64_t>& param_numels, const Config& config,
                                                int world);

}  // namespace ds
