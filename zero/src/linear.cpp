#include "dstrain/zero/linear.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace ds::zero {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct MemoryEfficientLinear : public torch::autograd::Function<MemoryEfficientLinear> {
  // bias is optional rather than an undefined tensor: autograd wants every tensor input defined.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const c10::optional<at::Tensor>& bias) {
    // A leaf that is an input is saved as itself (not a copy, not a view): in backward it shows
    // whatever data the coordinator has put back into it.
    ctx->save_for_backward({input, weight});
    ctx->saved_data["has_bias"] = bias.has_value();
    return at::linear(input, weight, bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& grad = grad_outputs[0];
    const at::Tensor flat_grad = grad.reshape({-1, weight.size(0)});
    at::Tensor grad_input, grad_weight, grad_bias;
    if (ctx->needs_input_grad(0)) grad_input = grad.matmul(weight);
    if (ctx->needs_input_grad(1)) grad_weight = flat_grad.t().mm(input.reshape({-1, weight.size(1)}));
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) grad_bias = flat_grad.sum(0);
    return {grad_input, grad_weight, grad_bias};
  }
};

}  // namespace

at::Tensor linear(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias) {
  return MemoryEfficientLinear::apply(input, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
}

at::Tensor LinearImpl::forward(const at::Tensor& input) { return linear(input, weight, bias); }

}  // namespace ds::zero
