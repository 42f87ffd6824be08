#include "dstrain/engine/partition/step_in_backward.hpp"

namespace ds {

bool asks_step_in_backward(const Config& config) { return config.dstrain_flag("step_in_backward", false); }

std::string step_in_backward_config_obstacle(const Config& config) {
  const ZeroConfig& zero = config.zero_optimization();
  if (zero.offload_optimizer.device != OffloadDevice::Nvme) return "offload_optimizer.device is not nvme";
  if (zero.stage != 3) return "zero_optimization.stage is not 3";
  if (config.pipeline().stages) return "the pipeline engine keeps the gradient in memory";
  if (config.gradient_accumulation_steps() != 1) return "gradient_accumulation_steps is not 1";
  if (config.training().gradient_clipping > 0) return "gradient_clipping needs the whole gradient's norm first";
  if (config.fp16().enabled || config.bf16().enabled) return "the model is not fp32";
  if (zero.zero_hpz_partition_size > 1) return "zero_hpz_partition_size is set";
  return "";
}

}  // namespace ds
