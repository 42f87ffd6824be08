#include "dstrain/engine/models/gpt.hpp"

#include "dstrain/runtime/error.hpp"
#include "dstrain/engine/models/activation_checkpointing.hpp"
#include "dstrain/zero/init.hpp"
#include "dstrain/zero/linear.hpp"
#include "dstrain/zero/module_call.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <string>

namespace ds::models {

namespace {

constexpr double kInitStd = 0.02;

uint64_t draw_base_seed() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get<at::CPUGeneratorImpl>()->random64();
}

torch::nn::Embedding make_embedding(int64_t rows, int64_t dim, at::Generator& init) {
  torch::nn::Embedding embedding(rows, dim);
  torch::NoGradGuard no_grad;
  embedding->weight.normal_(0.0, kInitStd, init);
  return embedding;
}

}  // namespace

GPTImpl::GPTImpl(const GPTConfig& config) : GPTImpl(config, 0, config.num_layers()) {}

GPTImpl::GPTImpl(const GPTConfig& config, int64_t first_layer, int64_t last_layer)
    : config_(config), first_layer_(first_layer), last_layer_(last_layer) {
  const int64_t head_layer = config.num_layers() - 1;
  if (first_layer < 0 || last_layer > config.num_layers() || first_layer >= last_layer) {
    throw Error("GPT layer slice [" + std::to_string(first_layer) + ", " + std::to_string(last_layer) +
                ") is empty or outside the model's " + std::to_string(config.num_layers()) + " layers");
  }
  const bool has_embedding = first_layer == 0;
  const bool has_head = last_layer == config.num_layers();
  const uint64_t base_seed = draw_base_seed();
  auto layer_generator = [&](int64_t layer) { return at::make_generator<at::CPUGeneratorImpl>(base_seed + layer); };

  if (has_embedding || has_head) {
    // wte is drawn first from layer 0's generator, so a stage holding only the head gets a copy
    // equal to the embedding stage's.
    at::Generator init = layer_generator(0);
    wte = register_module("wte", make_embedding(config.vocab_size, config.n_embd, init));
    ds::zero::partition_built(*wte);
    if (has_embedding) {
      wpe = register_module("wpe", make_embedding(config.block_size, config.n_embd, init));
      ds::zero::partition_built(*wpe);
    }
    // The head multiplies by wte's weight outside wte's own forward.
    if (has_head) register_external_parameter(wte->weight);
  }
  auto blocks = register_module("h", torch::nn::ModuleDict());
  for (int64_t layer = std::max<int64_t>(first_layer, 1); layer < std::min(last_layer, head_layer); ++layer) {
    at::Generator init = layer_generator(layer);
    Block block(config, init);
    ds::zero::partition_built(*block);
    blocks->update({{std::to_string(layer - 1), block.ptr()}});
    h.push_back(block);
  }
  if (has_head) {
    ln_f = register_module("ln_f", LayerNorm(config.n_embd, config.bias));
    ds::zero::partition_built(*ln_f);
  }
}

at::Tensor GPTImpl::forward(const at::Tensor& input) {
  at::Tensor x = first_layer_ == 0 ? embed(input) : input;
  const size_t segment = static_cast<size_t>(config_.activation_checkpoint_interval);
  if (segment == 0 || !is_training()) {
    for (Block& block : h) x = ds::zero::call(block, x);
  } else {
    for (size_t first = 0; first < h.size(); first += segment) {
      const size_t last = std::min(first + segment, h.size());
      x = ds::checkpoint(
          [this, first, last](const at::Tensor& in) {
            at::Tensor y = in;
            for (size_t b = first; b < last; ++b) y = ds::zero::call(h[b], y);
            return y;
          },
          x);
    }
  }
  return ln_f ? head(x) : x;
}

at::Tensor GPTImpl::embed(const at::Tensor& tokens) {
  if (tokens.dim() != 2 || tokens.scalar_type() != torch::kLong) {
    throw Error("GPT input must be int64 tokens of shape [batch, sequence], got " +
                std::to_string(tokens.dim()) + " dimensions of " + std::string(c10::toString(tokens.scalar_type())));
  }
  const int64_t T = tokens.size(1);
  if (T > config_.block_size) {
    throw Error("sequence length " + std::to_string(T) + " exceeds block_size " + std::to_string(config_.block_size))
        .with_key("dstrain.model.block_size");
  }
  const at::Tensor positions = torch::arange(T, tokens.options());
  const at::Tensor x = ds::zero::call(wte, tokens) + ds::zero::call(wpe, positions);
  return torch::dropout(x, config_.dropout, is_training());
}

at::Tensor GPTImpl::head(const at::Tensor& hidden) {
  return ds::zero::linear(ds::zero::call(ln_f, hidden), wte->weight);
}

}  // namespace ds::models
