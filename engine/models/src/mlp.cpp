#include "dstrain/engine/models/mlp.hpp"

#include "dstrain/runtime/json_block.hpp"
#include "dstrain/zero/module_call.hpp"

#include <torch/torch.h>

#include <string>

namespace ds::models {

MLPConfig MLPConfig::from_json(const nlohmann::json& block) {
  JsonBlock keys(block, "dstrain.model");
  keys.skip("type");
  MLPConfig config;
  config.input_dim = keys.positive_int("input_dim");
  config.hidden_dim = keys.positive_int("hidden_dim");
  config.n_layers = keys.positive_int("n_layers");
  config.output_dim = keys.positive_int("output_dim");
  keys.reject_unknown_keys();
  return config;
}

MLPImpl::MLPImpl(const MLPConfig& config) {
  auto layers = register_module("hidden", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.n_layers; ++i) {
    torch::nn::Linear layer(i == 0 ? config.input_dim : config.hidden_dim, config.hidden_dim);
    layers->push_back(layer);
    hidden.push_back(layer);
  }
  out = register_module("out", torch::nn::Linear(config.hidden_dim, config.output_dim));
}

at::Tensor MLPImpl::forward(const at::Tensor& input) {
  at::Tensor x = input;
  for (torch::nn::Linear& layer : hidden) x = torch::gelu(ds::zero::call(layer, x));
  return ds::zero::call(out, x);
}

}  // namespace ds::models
