// GPTConfig: the shape of the built-in GPT-2-style decoder, read from the "dstrain.model" block,
// and the parameter counts that follow from it (for memory estimates and pipeline partitioning,
// without building the model).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ds::models {

struct GPTConfig {
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_embd = 0;
  int64_t block_size = 0;  // longest sequence: rows of the position embedding
  int64_t vocab_size = 0;
  double dropout = 0.0;
  bool bias = true;  // biases in the Linear and LayerNorm layers, as GPT-2
  // Blocks per activation-checkpointed segment in training (0: none). Not read from the JSON: the
  // trainer sets it from the DeepSpeed config (ds::activation_checkpoint_interval).
  int64_t activation_checkpoint_interval = 0;

  // Keys n_layer, n_head, n_embd, block_size, vocab_size (required, positive), dropout (default
  // 0, in [0, 1)), bias (default true). "type" is left to the caller that chose the model.
  // Throws ds::Error naming the key, e.g. "dstrain.model.n_head", for a bad or unknown key and for
  // an n_embd that n_head does not divide.
  static GPTConfig from_json(const nlohmann::json& block);

  // The pipeline's ordered layers: 0 = embedding, 1..n_layer = blocks, n_layer + 1 = head.
  int64_t num_layers() const { return n_layer + 2; }
};

// Parameters of the whole model, each counted once (the tied token embedding once).
int64_t num_parameters(const GPTConfig& config);

// Parameters each pipeline layer holds when built alone: the embedding and the head both count
// the tied token embedding, since a stage holding either keeps a copy of it.
std::vector<int64_t> layer_parameter_counts(const GPTConfig& config);

// The type name of each pipeline layer, what pipeline.partition "type:<regex>" matches:
// "Embedding", then "Block" for each block, then "Head".
std::vector<std::string> layer_types(const GPTConfig& config);

}  // namespace ds::models
