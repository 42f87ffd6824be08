// Keys of the optimizer and scheduler blocks. Which "params" keys exist depends on the type, as
// each type is a different constructor in DeepSpeed.
#include "config_sections.hpp"

namespace ds {
namespace {

const config_detail::EnumNames<OptimizerType> kOptimizerNames = {
    {OptimizerType::Adam, "Adam"},
    {OptimizerType::AdamW, "AdamW"},
    {OptimizerType::SGD, "SGD"},
    {OptimizerType::OneBitAdam, "OneBitAdam"},
    {OptimizerType::Lamb, "Lamb"},
    {OptimizerType::OneBitLamb, "OneBitLamb"},
    {OptimizerType::ZeroOneAdam, "ZeroOneAdam"},
};

const config_detail::EnumNames<SchedulerType> kSchedulerNames = {
    {SchedulerType::WarmupLR, "WarmupLR"},
    {SchedulerType::WarmupDecayLR, "WarmupDecayLR"},
    {SchedulerType::WarmupCosineLR, "WarmupCosineLR"},
    {SchedulerType::OneCycle, "OneCycle"},
    {SchedulerType::LRRangeTest, "LRRangeTest"},
};

template <class E>
const char* name_of(E value, const config_detail::EnumNames<E>& names) {
  for (const auto& entry : names)
    if (entry.first == value) return entry.second;
  return "none";
}

template <class E>
std::string supported(const config_detail::EnumNames<E>& names) {
  std::string listed;
  for (const auto& entry : names) listed += (listed.empty() ? "" : ", ") + std::string(entry.second);
  return listed;
}

}  // namespace

const char* to_string(OptimizerType type) { return name_of(type, kOptimizerNames); }

bool is_onebit(OptimizerType type) {
  return type == OptimizerType::OneBitAdam || type == OptimizerType::OneBitLamb || type == OptimizerType::ZeroOneAdam;
}
const char* to_string(SchedulerType type) { return name_of(type, kSchedulerNames); }

namespace config_detail {
namespace {

template <class V>
void visit_params(V& p, OptimizerConfig& c) {
  if constexpr (V::kReading)
    if (c.type == OptimizerType::SGD) p.require("lr", "SGD");
  p.field("lr", c.lr, at_least(0));
  p.field("weight_decay", c.weight_decay, at_least(0));
  if (c.type == OptimizerType::SGD) {
    p.field("momentum", c.momentum, at_least(0));
    p.field("dampening", c.dampening);
    p.field("nesterov", c.nesterov);
    if constexpr (V::kReading)
      if (c.nesterov && (c.momentum <= 0 || c.dampening != 0))
        throw p.error("nesterov", "needs momentum > 0 and dampening 0, got momentum " + std::to_string(c.momentum) +
                                      " and dampening " + std::to_string(c.dampening));
    return;
  }
  p.field("betas", c.betas, fraction());
  p.field("eps", c.eps, at_least(0));
  p.field("bias_correction", c.bias_correction);
  if (c.type == OptimizerType::Adam || c.type == OptimizerType::AdamW) {
    p.field("torch_adam", c.torch_adam);
    p.field("adam_w_mode", c.adam_w_mode);
    // DeepSpeed's AdamW ignores adam_w_mode: decoupled weight decay is what AdamW means.
    if (c.type == OptimizerType::AdamW) c.adam_w_mode = true;
    if constexpr (V::kReading) {
      // FusedAdam's set_grad_none: gradients are freed after each step here whatever it says.
      bool set_grad_none = true;
      p.field("set_grad_none", set_grad_none);
      // DeepSpeedCPUAdam's (ZeRO-Offload) fp32_optimizer_states: the state here is always fp32.
      bool fp32_optimizer_states = true;
      p.field("fp32_optimizer_states", fp32_optimizer_states);
      if (!fp32_optimizer_states)
        throw p.error("fp32_optimizer_states", "false is not supported: the optimizer state is always fp32, got false");
    }
  }
  const bool onebit = is_onebit(c.type);
  if (c.type == OptimizerType::OneBitAdam || c.type == OptimizerType::OneBitLamb)
    p.field("freeze_step", c.freeze_step, at_least(0));
  if (onebit) {
    p.field("cuda_aware", c.cuda_aware);
    p.field("comm_backend_name", c.comm_backend_name, std::vector<std::string>{"nccl", "mpi"});
  }
  if (c.type == OptimizerType::Lamb || c.type == OptimizerType::OneBitLamb) {
    p.field("max_coeff", c.max_coeff, at_least(0));
    p.field("min_coeff", c.min_coeff, at_least(0));
    if constexpr (V::kReading)
      if (c.min_coeff > c.max_coeff)
        throw p.error("min_coeff", "must not exceed max_coeff (" + std::to_string(c.max_coeff) + "), got " +
                                       std::to_string(c.min_coeff));
  }
  if (c.type == OptimizerType::Lamb || onebit) {
    p.field("eps_inside_sqrt", c.eps_inside_sqrt);
    // DeepSpeed's 1-bit optimizers take eps_inside_sqrt and always add eps outside the root.
    if constexpr (V::kReading)
      if (c.eps_inside_sqrt && c.type != OptimizerType::Lamb)
        p.warn("'" + p.path_of("eps_inside_sqrt") + "' is ignored by " + to_string(c.type) +
               " (as DeepSpeed): eps is added outside the square root");
  }
  if (c.type == OptimizerType::OneBitLamb) {
    p.field("coeff_beta", c.coeff_beta, fraction());
    p.field("factor_max", c.factor_max, at_least(0));
    p.field("factor_min", c.factor_min, at_least(0));
    p.field("factor_threshold", c.factor_threshold, between(0, 1));
    if constexpr (V::kReading)
      if (c.factor_min > c.factor_max)
        throw p.error("factor_min", "must not exceed factor_max (" + std::to_string(c.factor_max) + "), got " +
                                        std::to_string(c.factor_min));
  }
  if (c.type == OptimizerType::ZeroOneAdam) {
    p.field("var_freeze_step", c.var_freeze_step, at_least(0));
    p.field("var_update_scaler", c.var_update_scaler, at_least(1));
    p.field("local_step_scaler", c.local_step_scaler, at_least(1));
    p.field("local_step_clipper", c.local_step_clipper, at_least(1));
  }
  if constexpr (V::kReading) {
    bool amsgrad = false;
    p.field("amsgrad", amsgrad);
    if (amsgrad) throw p.error("amsgrad", "AMSGrad is not supported, got true");
    // As DeepSpeed (engine.py, _configure_basic_optimizer raises ValueError): clipping is the
    // engine's job, and a norm here would otherwise leave the run unclipped without a word. 0,
    // which asks for no clipping, stays accepted: DeepSpeedExamples' BERT configs carry it.
    if (const json* norm = p.take("max_grad_norm"); norm && !norm->is_null() && *norm != 0)
      throw p.error("max_grad_norm", "is not an optimizer parameter (DeepSpeed refuses it too): use the top-level "
                                     "gradient_clipping, got " + norm->dump());
  }
}

template <class V>
void visit_warmup(V& p, SchedulerConfig& c) {
  p.field("warmup_num_steps", c.warmup_num_steps, at_least(0));
  p.field("warmup_type", c.warmup_type, std::vector<std::string>{"log", "linear"});
}

template <class V>
void visit_total_steps(V& p, SchedulerConfig& c) {
  if constexpr (V::kReading) p.require("total_num_steps", to_string(c.type));
  p.field("total_num_steps", c.total_num_steps, at_least(1));
  if constexpr (V::kReading)
    if (c.total_num_steps && *c.total_num_steps < c.warmup_num_steps)
      p.warn("'" + p.path_of("total_num_steps") + "' (" + std::to_string(*c.total_num_steps) +
             ") is less than warmup_num_steps (" + std::to_string(c.warmup_num_steps) + ")");
}

template <class V>
void visit_params(V& p, SchedulerConfig& c) {
  switch (c.type) {
    case SchedulerType::WarmupLR:
    case SchedulerType::WarmupDecayLR:
      p.field("warmup_min_lr", c.warmup_min_lr, at_least(0));
      p.field("warmup_max_lr", c.warmup_max_lr, at_least(0));
      visit_warmup(p, c);
      if (c.type == SchedulerType::WarmupDecayLR) {
        if constexpr (V::kReading)
          if (!c.warmup_max_lr) c.warmup_max_lr = 0.001;
        visit_total_steps(p, c);
      }
      break;
    case SchedulerType::WarmupCosineLR:
      p.field("warmup_min_ratio", c.warmup_min_ratio, between(0, 1));
      p.field("cos_min_ratio", c.cos_min_ratio, between(0, 1));
      visit_warmup(p, c);
      visit_total_steps(p, c);
      break;
    case SchedulerType::OneCycle:
      if constexpr (V::kReading) {
        p.require("cycle_min_lr", "OneCycle");
        p.require("cycle_max_lr", "OneCycle");
      }
      p.field("cycle_min_lr", c.cycle_min_lr, at_least(0));
      p.field("cycle_max_lr", c.cycle_max_lr, at_least(0));
      p.field("decay_lr_rate", c.decay_lr_rate, at_least(0));
      p.field("cycle_first_step_size", c.cycle_first_step_size, at_least(1));
      if constexpr (V::kReading) {
        if (!p.given("cycle_second_step_size")) c.cycle_second_step_size = c.cycle_first_step_size;
      }
      p.field("cycle_second_step_size", c.cycle_second_step_size, at_least(1));
      p.field("cycle_first_stair_count", c.cycle_first_stair_count, at_least(0));
      if constexpr (V::kReading) {
        if (!p.given("cycle_second_stair_count")) c.cycle_second_stair_count = c.cycle_first_stair_count;
      }
      p.field("cycle_second_stair_count", c.cycle_second_stair_count, at_least(0));
      p.field("decay_step_size", c.decay_step_size, at_least(0));
      p.field("cycle_momentum", c.cycle_momentum);
      p.field("cycle_min_mom", c.cycle_min_mom, fraction());
      p.field("cycle_max_mom", c.cycle_max_mom, fraction());
      p.field("decay_mom_rate", c.decay_mom_rate, at_least(0));
      break;
    case SchedulerType::LRRangeTest:
      p.field("lr_range_test_min_lr", c.lr_range_test_min_lr, at_least(0));
      p.field("lr_range_test_step_size", c.lr_range_test_step_size, at_least(1));
      p.field("lr_range_test_step_rate", c.lr_range_test_step_rate, at_least(0));
      p.field("lr_range_test_staircase", c.lr_range_test_staircase);
      break;
    case SchedulerType::None:
      break;
  }
}

// "type" first: it decides which params exist.
template <class V, class Section, class E>
void visit_typed_block(V& v, Section& c, const EnumNames<E>& names, const char* what) {
  v.field("type", c.type, names);
  if constexpr (V::kReading) {
    if (c.type == E::None)
      throw v.error("type", std::string("a ") + what + " block needs a type (supported: " + supported(names) + ")");
  }
  v.block("params", [&](auto& p) { visit_params(p, c); });
}

}  // namespace

template <class V>
void visit(V& v, OptimizerConfig& c) {
  visit_typed_block(v, c, kOptimizerNames, "optimizer");
}

template <class V>
void visit(V& v, SchedulerConfig& c) {
  visit_typed_block(v, c, kSchedulerNames, "scheduler");
}

template void visit(Reader&, OptimizerConfig&);
template void visit(Writer&, OptimizerConfig&);
template void visit(Reader&, SchedulerConfig&);
template void visit(Writer&, SchedulerConfig&);

}  // namespace config_detail
}  // namespace ds
