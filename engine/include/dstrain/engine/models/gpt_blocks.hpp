// The pieces of a GPT-2 transformer block, as in llm.c / nanoGPT:
//   Block: x + attn(ln_1(x)), then x + mlp(ln_2(x))
//   CausalSelfAttention: c_attn (q, k, v), masked softmax over earlier positions, c_proj
//   FeedForward: c_fc (C -> 4C), GELU (tanh approximation), c_proj (4C -> C)
//   LayerNorm: over the last dimension, bias optional (LibTorch's has no bias switch)
// Each initializes its parameters from the generator it is given (GPT-2's scheme: normal(0, 0.02),
// residual projections normal(0, 0.02 / sqrt(2 * n_layer)), zero biases, LayerNorm weight 1), so
// that a block is the same whether built in the whole model or alone on a pipeline stage.
#pragma once

#include "dstrain/engine/models/gpt_config.hpp"

#include <ATen/core/Generator.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace ds::models {

class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(int64_t features, bool bias);
  at::Tensor forward(const at::Tensor& x);

  at::Tensor weight;
  at::Tensor bias;  // undefined without bias
};
TORCH_MODULE(LayerNorm);

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(const GPTConfig& config, at::Generator& init);
  at::Tensor forward(const at::Tensor& x);  // [B, T, C] -> [B, T, C]

  torch::nn::Linear c_attn{nullptr};
  torch::nn::Linear c_proj{nullptr};

 private:
  int64_t n_head_;
  double dropout_;
};
TORCH_MODULE(CausalSelfAttention);

class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(const GPTConfig& config, at::Generator& init);
  at::Tensor forward(const at::Tensor& x);

  torch::nn::Linear c_fc{nullptr};
  torch::nn::Linear c_proj{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(FeedForward);

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const GPTConfig& config, at::Generator& init);
  at::Tensor forward(const at::Tensor& x);

  LayerNorm ln_1{nullptr};
  CausalSelfAttention attn{nullptr};
  LayerNorm ln_2{nullptr};
  FeedForward mlp{nullptr};
};
TORCH_MODULE(Block);

}  // namespace ds::models
