#include "dstrain/zero/module_call.hpp"

#include "dstrain/zero/param_status.hpp"

namespace ds::zero {
namespace {
thread_local ModuleHooks* t_active = nullptr;
}  // namespace

ModuleHooks* ModuleHooks::active() { return t_active; }

ActiveHooks::ActiveHooks(ModuleHooks* hooks) : previous_(t_active) { t_active = hooks; }
ActiveHooks::~ActiveHooks() { t_active = previous_; }

const char* to_string(ParamStatus status) {
  switch (status) {
    case ParamStatus::NotAvailable: return "NotAvailable";
    case ParamStatus::Inflight: return "Inflight";
    case ParamStatus::Available: return "Available";
  }
  return "?";
}

ParamStatus param_status(const at::Tensor& param) {
  const ModuleHooks* hooks = ModuleHooks::active();
  return hooks ? hooks->status(param) : ParamStatus::Available;
}

size_t external_parameter_count(const torch::nn::Module& module) {
  const ModuleHooks* hooks = ModuleHooks::active();
  return hooks ? hooks->external_parameter_count(module) : 0;
}

}  // namespace ds::zero
