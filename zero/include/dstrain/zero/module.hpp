// ds::zero::Module: a torch::nn::Module that can name "external parameters": parameters of other
// modules that its forward uses directly (a tied embedding used by the output head, say). ZeRO
// stage 3 keeps them gathered while this module runs. Parameters a submodule *returns* from its
// forward are detected automatically; this is for the cases no return value reveals.
#pragma once

#include <torch/nn/module.h>

#include <vector>

namespace ds::zero {

class Module : public torch::nn::Module {
 public:
  using torch::nn::Module::Module;

  void register_external_parameter(const at::Tensor& parameter);
  const std::vector<at::Tensor>& external_parameters() const { return external_parameters_; }

 private:
  std::vector<at::Tensor> external_parameters_;
};

// A module's own parameters, as ZeRO's hooks manage them: those of its subtree down to (not into)
// children deriving from ds::zero::Module, which are called through ds::zero::call and own theirs.
// External parameters are not among them.
std::vector<at::Tensor> own_parameters(torch::nn::Module& module);

// DeepSpeed's deepspeed.zero.register_external_parameter(module, parameter). `module` must derive
// from ds::zero::Module (ds::Error otherwise); `parameter` must require grad.
void register_external_parameter(torch::nn::Module& module, const at::Tensor& parameter);

}  // namespace ds::zero
