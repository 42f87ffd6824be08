// Keys of the top level, fp16, bf16 and pipeline blocks.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "config_sections.hpp"

namespace ds::config_detail {

template <class V>
void visit(V& v, TrainingConfig& c) {
  v.field("steps_per_print", c.steps_per_print, at_least(1));
  v.field("gradient_clipping", c.gradient_clipping, at_least(0));
  v.field("seed", c.seed, at_least(0));
  v.field("wall_clock_breakdown", c.wall_clock_breakdown);
  v.field("memory_breakdown", c.memory_breakdown);
  v.field("dump_state", c.dump_state);
  v.field("prescale_gradients", c.prescale_gradients);
  v.field("gradient_predivide_factor", c.gradient_predivide_factor, positive());
  v.field("sparse_gradients", c.sparse_gradients);
  // "bfp16" as bf16: DeepSpeed v0.19.5 raises for it, but Megatron-DeepSpeed's configs write it and
  // it asks for nothing ambiguous (docs/config.md).
  v.field("communication_data_type", c.communication_data_type,
          std::vector<std::string>{"fp16", "bf16", "fp32", "bfp16"});
  if constexpr (V::kReading)
    if (c.communication_data_type == "bfp16") c.communication_data_type = "bf16";
  v.field("disable_allgather", c.disable_allgather);
  v.field("fp32_allreduce", c.fp32_allreduce);
  v.field("zero_allow_untested_optimizer", c.zero_allow_untested_optimizer);
  v.field("zero_force_ds_cpu_optimizer", c.zero_force_ds_cpu_optimizer);
}

template <class V>
void visit(V& v, Fp16Config& c) {
  v.field("enabled", c.enabled);
  v.field("auto_cast", c.auto_cast);
  v.field("loss_scale", c.loss_scale, at_least(0));
  // The scale 2^power is kept in fp32, whose largest exponent is 127.
  v.field("initial_scale_power", c.initial_scale_power, between(0, 127));
  v.field("loss_scale_window", c.loss_scale_window, at_least(1));
  v.field("hysteresis", c.hysteresis, at_least(1));
  v.field("consecutive_hysteresis", c.consecutive_hysteresis);
  v.field("min_loss_scale", c.min_loss_scale, positive());
  // DeepSpeedFP16Config (v0.19.5) declares it an int and refuses a fraction; it stays a double
  // here for the loss scaler's arithmetic.
  if constexpr (V::kReading)
    if (c.min_loss_scale != std::floor(c.min_loss_scale))
      throw v.error("min_loss_scale", "expected a whole number > 0 (DeepSpeed's is an int), got " +
                                          std::to_string(c.min_loss_scale));
  v.field("fp16_master_weights_and_grads", c.fp16_master_weights_and_grads);
}

template <class V>
void visit(V& v, Bf16Config& c) {
  v.field("enabled", c.enabled);
  v.field("immediate_grad_update", c.immediate_grad_update);
  v.field("check_grad_overflow", c.check_grad_overflow);
  v.field("bf16_master_weights_and_grads", c.bf16_master_weights_and_grads);
  v.field("bf16_optimizer_states", c.bf16_optimizer_states);
  // Megatron-DeepSpeed copies fp16's loss-scale keys into bf16, which needs no loss scaling;
  // DeepSpeed reads past them without a word, and so do we.
  if constexpr (V::kReading)
    for (const char* key : {"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                            "consecutive_hysteresis", "min_loss_scale"})
      v.take(key);
}

template <class V>
void visit(V& v, PipelineConfig& c) {
  v.field("stages", c.stages, at_least(1));
  v.field("partition", c.partition);
  if constexpr (V::kReading) {
    std::string method = c.partition;
    std::transform(method.begin(), method.end(), method.begin(), [](unsigned char ch) { return std::tolower(ch); });
    // PipelineModule's methods; "type:<regex>" balances the layers whose class name matches.
    if (method != "best" && method != "parameters" && method != "uniform" && method.rfind("type:", 0) != 0)
      throw v.invalid("partition", "\"best\", \"parameters\", \"uniform\" or \"type:<regex>\"", c.partition);
  }
  v.field("seed_layers", c.seed_layers);
  v.field("activation_checkpoint_interval", c.activation_checkpoint_interval, at_least(0));
  v.field("pipe_partitioned", c.pipe_partitioned);
  v.field("grad_partitioned", c.grad_partitioned);
}

template void visit(Reader&, TrainingConfig&);
template void visit(Writer&, TrainingConfig&);
template void visit(Reader&, Fp16Config&);
template void visit(Writer&, Fp16Config&);
template void visit(Reader&, Bf16Config&);
template void visit(Writer&, Bf16Config&);
template void visit(Reader&, PipelineConfig&);
template void visit(Writer&, PipelineConfig&);

}  // namespace ds::config_detail
