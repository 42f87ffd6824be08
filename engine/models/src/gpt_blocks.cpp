#include "dstrain/engine/models/gpt_blocks.hpp"

#include "dstrain/engine/models/causal_attention.hpp"
#include "dstrain/engine/models/gelu.hpp"

#include "dstrain/zero/module_call.hpp"

#include <torch/torch.h>

#include <cmath>

namespace ds::models {

namespace {

constexpr double kInitStd = 0.02;

// GPT-2 scales the projections that write into the residual stream, since each block adds two
// of them: the stream's variance then stays put as depth grows.
double residual_std(const GPTConfig& config) { return kInitStd / std::sqrt(2.0 * config.n_layer); }

ds::zero::Linear make_linear(const GPTConfig& config, int64_t in, int64_t out, double std,
                              at::Generator& init) {
  ds::zero::Linear linear(torch::nn::LinearOptions(in, out).bias(config.bias));
  torch::NoGradGuard no_grad;
  linear->weight.normal_(0.0, std, init);
  if (config.bias) linear->bias.zero_();
  return linear;
}

}  // namespace

LayerNormImpl::LayerNormImpl(int64_t features, bool with_bias) {
  weight = register_parameter("weight", torch::ones({features}));
  if (with_bias) bias = register_parameter("bias", torch::zeros({features}));
}

at::Tensor LayerNormImpl::forward(const at::Tensor& x) {
  return torch::layer_norm(x, {weight.size(0)}, weight, bias, 1e-5);
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GPTConfig& config, at::Generator& init)
    : n_head_(config.n_head), dropout_(config.dropout) {
  const int64_t C = config.n_embd;
  c_attn = register_module("c_attn", make_linear(config, C, 3 * C, kInitStd, init));
  c_proj = register_module("c_proj", make_linear(config, C, C, residual_std(config), init));
}

at::Tensor CausalSelfAttentionImpl::forward(const at::Tensor& x) {
  const at::Tensor y = causal_attention(ds::zero::call(c_attn, x), n_head_, dropout_, is_training());
  return torch::dropout(ds::zero::call(c_proj, y), dropout_, is_training());
}

FeedForwardImpl::FeedForwardImpl(const GPTConfig& config, at::Generator& init) : dropout_(config.dropout) {
  const int64_t C = config.n_embd;
  c_fc = register_module("c_fc", make_linear(config, C, 4 * C, kInitStd, init));
  c_proj = register_module("c_proj", make_linear(config, 4 * C, C, residual_std(config), init));
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x) {
  const at::Tensor h = gelu_tanh(ds::zero::call(c_fc, x));
  return torch::dropout(ds::zero::call(c_proj, h), dropout_, is_training());
}

BlockImpl::BlockImpl(const GPTConfig& config, at::Generator& init) {
  ln_1 = register_module("ln_1", LayerNorm(config.n_embd, config.bias));
  attn = register_module("attn", CausalSelfAttention(config, init));
  ln_2 = register_module("ln_2", LayerNorm(config.n_embd, config.bias));
  mlp = register_module("mlp", FeedForward(config, init));
}

at::Tensor BlockImpl::forward(const at::Tensor& x) {
  const at::Tensor h = x + ds::zero::call(attn, ds::zero::call(ln_1, x));
  return h + ds::zero::call(mlp, ds::zero::call(ln_2, h));
}

}  // namespace ds::models
