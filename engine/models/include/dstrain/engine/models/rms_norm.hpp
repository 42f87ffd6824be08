// RMSNorm (Zhang & Sennrich 2019; HF's LlamaRMSNorm): over the last dimension,
//   y = weight * x / sqrt(mean(x^2) + eps)
// computed in fp32 and returned in x's dtype, as HF does.
//
// The tensor-op version makes five passes over x and keeps x^2, its mean and the normalized x for
// backward. On contiguous fp32 CPU input rms_norm runs its own kernel instead: one pass for the
// row's sum of squares and one for the output, keeping only x and each row's 1/rms for backward,
// whose two passes per row give dx and each thread's share of dweight.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

namespace ds::models {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// The same through LibTorch's tensor ops (HF's equations): what the kernel replaces, and what runs
// for input it does not take.
at::Tensor rms_norm_ops(const at::Tensor& x, const at::Tensor& weight, double eps);

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t features, double eps);
  at::Tensor forward(const at::Tensor& x);

  at::Tensor weight;  // ones at construction

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

}  // namespace ds::models
