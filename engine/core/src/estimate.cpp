#include "dstrain/engine/estimate.hpp"

#include "dstrain/engine/memory_plan.hpp"

namespace ds {

std::vector<StageEstimate> estimate_model_state(const std::vector<int64_t>& param_numels, const Config& config,
                                                int world) {
  ModelShape shape;
  shape.numels = param_numels;
  std::vector<StageEstimate> estimates;
  for (int stage = 0; stage <= 3; ++stage) {
    const MemoryPlan plan = size_memory(config, shape, world, stage);
    // As the engine counts them: the swap buffers with the state they hold.
    StageEstimate e{stage, plan.model_state, 0};
    e.after_step.parameters += plan.param_swap_memory;
    e.after_step.gradients += plan.gradient_swap_buffers;
    e.after_step.optimizer += plan.optimizer_swap_buffers;
    e.peak_gradient_bytes = e.after_step.gradients + plan.backward_gradients + plan.reduce_buckets;
    estimates.push_back(e);
  }
  return estimates;
}

}  // namespace ds
