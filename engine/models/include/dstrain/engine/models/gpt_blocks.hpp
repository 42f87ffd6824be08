// The pieces of a GPT-2 transformer block, as in llm.c / nanoGPT:
//   Block: x + attn(ln_1(x)), then x + mlp(ln_2(x))
//   CausalSelfAttention: c_attn (q, k, v), masked softmax over earlier positions
//     (causal_attention.hpp), c_proj
//   FeedForward: c_fc (C -> 4C), GELU (tanh approximation), c_proj (4C -> C)
//   LayerNorm: over the last dimension, bias optional (LibTorch's has no bias switch)
// Each initializes its parameters from the generator it is given (GPT-2's scheme: normal(0, 0.02),
// residual projections normal(0, 0.02 / sqrt(2 * n_layer)), zero biases, LayerNorm weight 1), so
// that a block is the same whether built in the whole model or alone on a pipeline stage.
// For ZeRO stage 3: the block, the attention and the feed-forward derive from ds::zero::Module, so
// each gathers only its own weights around its own forward, and the linears are
// ds::zero::Linear, whose autograd keeps no gathered weight alive between forward and backward.
#pragma once

#include "dstrain/engine/models/gpt_config.hpp"

#include <ATen/core/Generator.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dstrain/zero/linear.hpp"
#include "dstrain/zero/module.hpp"

namespace ds::models {

class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(int64_t features, bool bias);
  at::Tensor forward(const at::Tensor& x);

  at::Tensor weight;
  at::Tensor bias;  // undefined without bias
};
TORCH_MODULE(LayerNorm);

class CausalSelfAttentionImpl : public ds::zero::Module {
 public:
  CausalSelfAttentionImpl(const GPTConfig& config, at::Generator& init);
  at::Tensor forward(const at::Tensor& x);  // [B, T, C] -> [B, T, C]

  ds::zero::Linear c_attn{nullptr};
  ds::zero::Linear c_proj{nullptr};

 private:
  int64_t n_head_;
  double dropout_;
};
TORCH_MODULE(CausalSelfAttention);

class FeedForwardImpl : public ds::zero::Module {
 public:
  FeedForwardImpl(const GPTConfig& config, at::Generator& init);
  at::Tensor forward(const at::Tensor& x);

  ds::zero::Linear c_fc{nullptr};
  ds::zero::Linear c_proj{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(FeedForward);

class BlockImpl : public ds::zero::Module {
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
