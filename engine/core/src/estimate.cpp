#include "dstrain/engine/estimate.hpp"

namespace ds {
namespace {

int64_t dtype_bytes(const Config& config) { return config.bf16().enabled || config.fp16().enabled ? 2 : 4; }

int64_t optimizer_state_tensors(const OptimizerConfig& optimizer) {
  return optimizer.type == OptimizerType::SGD ? 1 : 2;  // momentum; or Adam's two moments
}

}  // namespace

std::vector<StageEstimate> estimate_model_state(const std::vector<int64_t>& param_numels, const Config& config,
                                                int world) {
  const int64_t d = dtype_bytes(config);
  const int64_t threshold = config.zero_optimization().stage3_param_persistence_threshold;
  std::vector<StageEstimate> estimates;
  for (int stage = 0; stage <= 3; ++stage) {
    const int64_t partitions = stage >= 1 ? world : 1;
    int64_t shard = 0, whole = 0, persistent = 0;
    for (int64_t numel : param_numels) {
      const int64_t chunk = (numel + partitions - 1) / partitions;
      shard += chunk;
      whole += numel;
      if (numel <= threshold) persistent += chunk * partitions;  // kept gathered, padding included
    }
    StageEstimate e{stage, {}, 0};
    e.after_step.parameters = 4 * shard + (stage == 3 ? d * (shard + persistent) : d * whole);
    e.after_step.gradients = 4 * shard;
    e.after_step.optimizer = 4 * shard * optimizer_state_tensors(config.optimizer());
    // Stages 0-1 accumulate whole gradients in autograd until the boundary; 2-3 free each one as
    // soon as it is packed into a bucket (at most a bucket's worth lives beside the shard).
    e.peak_gradient_bytes = 4 * shard + (stage <= 1 ? d * whole : 4 * std::min<int64_t>(
                                                                      whole, config.zero_optimization().reduce_bucket_size));
    estimates.push_back(e);
  }
  return estimates;
}

}  // namespace ds
