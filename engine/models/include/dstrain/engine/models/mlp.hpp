// MLP: the built-in multilayer perceptron for classification and regression runs:
//   hidden.0 (input_dim -> hidden_dim), GELU, hidden.1 .. hidden.{n_layers-1} (hidden_dim ->
//   hidden_dim), GELU each, then out (hidden_dim -> output_dim), no activation.
// Parameters start from LibTorch's Linear initialization (the default generator, so
// torch::manual_seed fixes them).
#pragma once

#include <nlohmann/json.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <vector>

namespace ds::models {

struct MLPConfig {
  int64_t input_dim = 0;
  int64_t hidden_dim = 0;
  int64_t n_layers = 0;  // hidden layers, each Linear + GELU
  int64_t output_dim = 0;

  // Keys input_dim, hidden_dim, n_layers, output_dim, all required and positive. "type" is left to
  // the caller that chose the model. Errors name the key, e.g. "dstrain.model.hidden_dim".
  static MLPConfig from_json(const nlohmann::json& block);
};

class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const MLPConfig& config);
  at::Tensor forward(const at::Tensor& x);  // [B, input_dim] -> [B, output_dim]

  std::vector<torch::nn::Linear> hidden;  // registered as "hidden.<i>"
  torch::nn::Linear out{nullptr};
};
TORCH_MODULE(MLP);

}  // namespace ds::models
