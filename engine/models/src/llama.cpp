#include "dstrain/engine/models/llama.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <string>

#include "dstrain/engine/models/activation_checkpointing.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/zero/init.hpp"
#include "dstrain/zero/module_call.hpp"

namespace ds::models {
namespace {

constexpr double kInitStd = 0.02;  // HF's LlamaConfig.initializer_range

uint64_t draw_base_seed() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get<at::CPUGeneratorImpl>()->random64();
}

}  // namespace

LlamaImpl::LlamaImpl(const LlamaConfig& config) : LlamaImpl(config, 0, config.num_layers()) {}

LlamaImpl::LlamaImpl(const LlamaConfig& config, int64_t first_layer, int64_t last_layer)
    : config_(config),
      first_layer_(first_layer),
      last_layer_(last_layer),
      rope_(rotary_tables(config.head_dim(), config.rope_theta, config.max_position_embeddings)) {
  const int64_t head_layer = config.num_layers() - 1;
  if (first_layer < 0 || last_layer > config.num_layers() || first_layer >= last_layer)
    throw Error("Llama layer slice [" + std::to_string(first_layer) + ", " + std::to_string(last_layer) +
                ") is empty or outside the model's " + std::to_string(config.num_layers()) + " layers");
  const bool has_embedding = first_layer == 0;
  const bool has_head = last_layer == config.num_layers();
  const uint64_t base_seed = draw_base_seed();
  auto layer_generator = [&](int64_t layer) { return at::make_generator<at::CPUGeneratorImpl>(base_seed + layer); };

  auto model = register_module("model", std::make_shared<torch::nn::Module>());
  if (has_embedding || (has_head && config.tie_word_embeddings)) {
    at::Generator init = layer_generator(0);
    embed_tokens = model->register_module("embed_tokens", torch::nn::Embedding(config.vocab_size, config.hidden_size));
    {
      torch::NoGradGuard no_grad;
      embed_tokens->weight.normal_(0.0, kInitStd, init);
    }
    ds::zero::partition_built(*embed_tokens);
    // The tied head multiplies by the embedding's weight outside the embedding's own forward.
    if (has_head) register_external_parameter(embed_tokens->weight);
  }
  auto decoder_layers = model->register_module("layers", torch::nn::ModuleDict());
  for (int64_t layer = std::max<int64_t>(first_layer, 1); layer < std::min(last_layer, head_layer); ++layer) {
    at::Generator init = layer_generator(layer);
    LlamaDecoderLayer decoder_layer(config, init);
    ds::zero::partition_built(*decoder_layer);
    decoder_layers->update({{std::to_string(layer - 1), decoder_layer.ptr()}});
    layers.push_back(decoder_layer);
  }
  if (has_head) {
    norm = model->register_module("norm", RMSNorm(config.hidden_size, config.rms_norm_eps));
    ds::zero::partition_built(*norm);
    if (!config.tie_word_embeddings) {
      at::Generator init = layer_generator(head_layer);
      lm_head = register_module(
          "lm_head", ds::zero::Linear(torch::nn::LinearOptions(config.hidden_size, config.vocab_size).bias(false)));
      {
        torch::NoGradGuard no_grad;
        lm_head->weight.normal_(0.0, kInitStd, init);
      }
      ds::zero::partition_built(*lm_head);
    }
  }
}

at::Tensor LlamaImpl::tied_weight() const {
  return config_.tie_word_embeddings && embed_tokens ? embed_tokens->weight : at::Tensor();
}

at::Tensor LlamaImpl::forward(const at::Tensor& input) {
  at::Tensor x = first_layer_ == 0 ? embed(input) : input;
  const RotaryTables rope = rope_.rows(0, x.size(1));
  const at::Tensor cos = rope.cos.to(x.device()), sin = rope.sin.to(x.device());
  const size_t segment = static_cast<size_t>(config_.activation_checkpoint_interval);
  if (segment == 0 || !is_training()) {
    for (LlamaDecoderLayer& layer : layers) x = ds::zero::call(layer, x, cos, sin);
  } else {
    for (size_t first = 0; first < layers.size(); first += segment) {
      const size_t last = std::min(first + segment, layers.size());
      x = ds::checkpoint(
          [this, first, last, cos, sin](const at::Tensor& in) {
            at::Tensor y = in;
            for (size_t i = first; i < last; ++i) y = ds::zero::call(layers[i], y, cos, sin);
            return y;
          },
          x);
    }
  }
  return norm ? head(x) : x;
}

at::Tensor LlamaImpl::embed(const at::Tensor& tokens) {
  if (tokens.dim() != 2 || tokens.scalar_type() != torch::kLong)
    throw Error("Llama input must be int64 tokens of shape [batch, sequence], got " + std::to_string(tokens.dim()) +
                " dimensions of " + std::string(c10::toString(tokens.scalar_type())));
  if (tokens.size(1) > config_.max_position_embeddings)
    throw Error("sequence length " + std::to_string(tokens.size(1)) + " exceeds max_position_embeddings " +
                std::to_string(config_.max_position_embeddings))
        .with_key("dstrain.model.max_position_embeddings");
  return ds::zero::call(embed_tokens, tokens);
}

at::Tensor LlamaImpl::head(const at::Tensor& hidden) {
  const at::Tensor normed = ds::zero::call(norm, hidden);
  return lm_head ? ds::zero::call(lm_head, normed) : ds::zero::linear(normed, embed_tokens->weight);
}

}  // namespace ds::models
