#include "dstrain/engine/models/activation_checkpointing.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <mutex>
#include <string>

#include "dstrain/runtime/log.hpp"
#include "dstrain/zero/module_call.hpp"

namespace ds {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor cpu_rng_state() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_cpu_rng_state(const at::Tensor& state) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// What backward needs besides the inputs, carried through the context as a capsule.
struct Recompute : torch::CustomClassHolder {
  CheckpointFn fn;
  at::Tensor rng_state;
  zero::ModuleHooks* hooks;  // the ZeRO-3 hooks active in the forward (null without)
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static variable_list forward(AutogradContext* ctx, const CheckpointFn& fn, at::TensorList input_list) {
    const variable_list inputs = input_list.vec();
    auto recompute = c10::make_intrusive<Recompute>();
    recompute->fn = fn;
    recompute->rng_state = cpu_rng_state();
    recompute->hooks = zero::ModuleHooks::active();
    ctx->saved_data["recompute"] = at::IValue::make_capsule(recompute);
    ctx->save_for_backward(inputs);
    return fn(inputs);  // autograd records nothing in a Function's forward
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto recompute = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    variable_list inputs;
    for (const at::Tensor& saved : ctx->get_saved_variables()) {
      at::Tensor input = saved.defined() ? saved.detach() : saved;
      if (input.defined() && saved.requires_grad()) input.requires_grad_(true);
      inputs.push_back(input);
    }
    const at::Tensor rng_after = cpu_rng_state();
    set_cpu_rng_state(recompute->rng_state);
    variable_list outputs;
    {
      at::AutoGradMode grad_mode(true);
      zero::ActiveHooks hooks(recompute->hooks);
      outputs = recompute->fn(inputs);
    }
    set_cpu_rng_state(rng_after);

    variable_list with_grad, grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i].requires_grad() || !grad_outputs[i].defined()) continue;
      with_grad.push_back(outputs[i]);
      grads.push_back(grad_outputs[i]);
    }
    if (!with_grad.empty()) torch::autograd::backward(with_grad, grads);

    // One gradient per argument of forward: none for fn, then one per input.
    variable_list input_grads{at::Tensor()};
    for (const at::Tensor& input : inputs) input_grads.push_back(input.defined() ? input.grad() : at::Tensor());
    return input_grads;
  }
};

}  // namespace

std::vector<at::Tensor> checkpoint(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs) {
  if (!at::GradMode::is_enabled()) return fn(inputs);
  // A TensorList, not a vector: autograd counts each of its tensors as an input.
  return CheckpointFunction::apply(fn, at::TensorList(inputs));
}

at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& input) {
  return checkpoint([fn](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{fn(in[0])}; },
                    {input})[0];
}

int activation_checkpoint_interval(const Config& config) {
  const nlohmann::json& block = config.untyped().value("activation_checkpointing", nlohmann::json());
  if (block.is_object()) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      const char* const inert[][2] = {
          {"partition_activations", "there is no model parallelism to partition checkpoints across"},
          {"cpu_checkpointing", "checkpoints are in CPU memory already"},
          {"contiguous_memory_optimization", "it is a GPU allocator remedy"},
          {"number_checkpoints", "it sizes contiguous_memory_optimization's buffer"},
          {"synchronize_checkpoint_boundary", "there are no device streams"},
          {"profile", "there are no device streams to time"}};
      for (const auto& [key, why] : inert)
        if (block.contains(key) && block[key] != false && !block[key].is_null())
          log::warn("activation_checkpointing.", key, " has no effect on this CPU build: ", why);
    });
  }
  if (config.pipeline().activation_checkpoint_interval > 0) return config.pipeline().activation_checkpoint_interval;
  return block.is_object() ? 1 : 0;
}

}  // namespace ds
