// The one place the commands choose the built-in model. The config's "dstrain.model" block names a
// type, "gpt" (the default) or "llama", with that model's sizes; ModelChoice reads them with the
// type's own parser, and CausalLM holds the built model, so the trainer, eval and generate are
// written once for both.
//
// CausalLM is a module holder as LibTorch's are (ptr(), *model, model->forward(tokens)), so
// ds::initialize and ds::zero::Init take it as they take models::GPT: the engine sees the model's
// own module, with its own parameter names, ZeRO-3 hooks and checkpoints.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "dstrain/engine/memory_plan.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/gpt_config.hpp"
#include "dstrain/engine/models/llama.hpp"
#include "dstrain/engine/models/llama_config.hpp"
#include "dstrain/engine/models/token_sampler.hpp"

namespace ds::app {

class CausalLM {
 public:
  CausalLM(models::GPT model) : model_(std::move(model)) {}
  CausalLM(models::Llama model) : model_(std::move(model)) {}

  // tokens [B, T] int64 -> logits [B, T, vocab_size]
  at::Tensor forward(const at::Tensor& tokens) const;
  // The model's KV-cache generation (gpt_inference.hpp, llama_inference.hpp); the model whole.
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                                const models::Sampling& sampling, uint64_t seed,
                                const std::function<void(int64_t)>& on_token) const;

  const CausalLM* operator->() const { return this; }
  torch::nn::Module& operator*() const { return *ptr(); }
  std::shared_ptr<torch::nn::Module> ptr() const;

 private:
  std::variant<models::GPT, models::Llama> model_;  // holders share the module: copies are handles
};

struct ModelChoice {
  std::variant<models::GPTConfig, models::LlamaConfig> config;

  std::string name() const;  // "GPT" or "Llama"
  int64_t vocab_size() const;
  int64_t max_sequence_length() const;  // GPT block_size, Llama max_position_embeddings
  std::string max_sequence_key() const;  // "block_size" or "max_position_embeddings"
  // "GPT with 4 layers, 192 wide" / "Llama with 2 layers, 256 wide, 8 heads sharing 2 key/value heads"
  std::string summary() const;
  // The whole model, on the CPU, from torch's default generator (under a zero::Init: partitioned).
  CausalLM build() const;
  // Its parameters' sizes from the config alone, for dstrain estimate and plan (the GPT's with the
  // activations the planner knows; the Llama's without).
  ModelShape shape() const;
};

// The model the block describes; `activation_checkpoint_interval` (ds::activation_checkpoint_interval
// of the DeepSpeed config) goes to its config. Throws ds::Error naming the key: an unknown type
// (check_model_type), or a size the type's parser refuses.
ModelChoice choose_model(const nlohmann::json& model_block, int64_t activation_checkpoint_interval = 0);

}  // namespace ds::app
