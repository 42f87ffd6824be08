// GPT: the built-in GPT-2-style decoder (llm.c's train_gpt2.c, nanoGPT's model.py):
//   wte, wpe -> dropout -> h.0 .. h.{n_layer-1} (Block) -> ln_f -> logits = x @ wte.weight^T
// The output head reuses the token embedding's weight (weight tying), so the model names it as an
// external parameter for ZeRO stage 3.
//
// Pipeline parallelism sees the same model as an ordered list of layers (GPTConfig::num_layers):
//   layer 0             embedding   tokens [B, T] int64 -> hidden [B, T, C]   wte, wpe
//   layers 1..n_layer   h.{i-1}     hidden -> hidden
//   layer n_layer + 1   head        hidden -> logits [B, T, V]              ln_f, wte (tied)
// GPT(config, first, last) builds the contiguous slice [first, last) alone: a pipeline stage.
// A slice has the same parameter names and values as those layers have in the whole model built
// after the same torch::manual_seed: construction draws one base seed from torch's default
// generator and initializes layer i from a generator seeded with base + i (DeepSpeed's
// seed_layers), the tied wte from layer 0's. A stage holding layer 0 or the head holds wte
// (one tensor if it holds both); when two stages each hold a copy, the pipeline keeps them equal
// by summing their gradients after backward (DeepSpeed's ReduceTiedGrads): see tied_weight().
// Built while a ds::zero::Init is active (ZeRO stage 3), each embedding, block and the final norm is
// partitioned as soon as it is built, so no rank holds the whole model. In training, with
// config.activation_checkpoint_interval = k > 0, each run of k consecutive blocks is one
// ds::checkpoint segment: only its input is kept for backward, which recomputes the segment.
#pragma once

#include "dstrain/engine/models/gpt_blocks.hpp"
#include "dstrain/engine/models/gpt_config.hpp"
#include "dstrain/zero/module.hpp"

#include <torch/nn/modules/embedding.h>

#include <vector>

namespace ds::models {

class GPTImpl : public ds::zero::Module {
 public:
  explicit GPTImpl(const GPTConfig& config);
  GPTImpl(const GPTConfig& config, int64_t first_layer, int64_t last_layer);

  // The whole model: tokens [B, T] int64 (T <= block_size) -> logits [B, T, vocab_size].
  // A slice maps its first layer's input to its last layer's output.
  at::Tensor forward(const at::Tensor& input);

  // wte.weight if this slice holds layer 0 or the head, else undefined.
  at::Tensor tied_weight() const { return wte ? wte->weight : at::Tensor(); }

  const GPTConfig& config() const { return config_; }
  int64_t first_layer() const { return first_layer_; }
  int64_t last_layer() const { return last_layer_; }  // one past the slice's last layer

  torch::nn::Embedding wte{nullptr};  // tokens -> embeddings, and the head's output projection
  torch::nn::Embedding wpe{nullptr};  // positions -> embeddings
  std::vector<Block> h;               // this slice's blocks, registered as "h.<block index>"
  LayerNorm ln_f{nullptr};

 private:
  at::Tensor embed(const at::Tensor& tokens);
  at::Tensor head(const at::Tensor& hidden);

  GPTConfig config_;
  int64_t first_layer_;
  int64_t last_layer_;
};
TORCH_MODULE(GPT);

}  // namespace ds::models
