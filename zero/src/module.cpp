#include "dstrain/zero/module.hpp"

#include "dstrain/runtime/error.hpp"

namespace ds::zero {

void Module::register_external_parameter(const at::Tensor& parameter) {
  if (!parameter.requires_grad()) throw Error("register_external_parameter: the tensor is not a trainable parameter");
  for (const at::Tensor& known : external_parameters_)
    if (known.is_same(parameter)) return;
  external_parameters_.push_back(parameter);
}

std::vector<at::Tensor> own_parameters(torch::nn::Module& module) {
  std::vector<at::Tensor> own = module.parameters(/*recurse=*/false);
  for (const auto& child : module.children())
    if (!dynamic_cast<Module*>(child.get())) {
      std::vector<at::Tensor> theirs = own_parameters(*child);
      own.insert(own.end(), theirs.begin(), theirs.end());
    }
  return own;
}

void register_external_parameter(torch::nn::Module& module, const at::Tensor& parameter) {
  auto* zero_module = dynamic_cast<Module*>(&module);
  if (!zero_module)
    throw Error("register_external_parameter: module '" + module.name() + "' must derive from ds::zero::Module");
  zero_module->register_external_parameter(parameter);
}

}  // namespace ds::zero
