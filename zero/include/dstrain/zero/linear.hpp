// ds::zero::linear and ds::zero::Linear: DeepSpeed's memory_efficient_linear.
//
// torch::linear's autograd saves weight.t() for backward: a view that keeps the storage of a ZeRO-3
// gathered weight alive from the module's forward to its backward, so every gathered weight of the
// model stays resident through the whole forward. This linear saves the weight parameter itself (a
// handle whose data the ParameterCoordinator swaps between whole and empty), so the gathered weight
// is freed when the module's forward ends and gathered again when its backward begins. Same
// forward as torch::linear; backward computes grad_input = grad @ W, grad_W = grad^T @ input,
// grad_b = sum(grad).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace ds::zero {

// y = input @ weight^T + bias; bias may be undefined.
at::Tensor linear(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias = {});

// torch::nn::Linear (same parameters, names and initialization) whose forward is linear() above.
class LinearImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  at::Tensor forward(const at::Tensor& input);
};
TORCH_MODULE(Linear);

}  // namespace ds::zero
