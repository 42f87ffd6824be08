// LlamaConfig: the shape of the built-in Llama decoder (Hugging Face's LlamaForCausalLM), read from
// the "dstrain.model" block with the names HF's LlamaConfig gives its fields, and the parameter
// counts that follow from it (for pipeline partitioning, without building the model).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ds::models {

struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // the SwiGLU MLP's inner width
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // grouped-query attention: each serves heads / kv_heads query heads
  int64_t max_position_embeddings = 0;  // longest sequence
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;  // lm_head reuses model.embed_tokens.weight
  // Layers per activation-checkpointed segment in training (0: none). Not read from the JSON: the
  // trainer sets it from the DeepSpeed config (ds::activation_checkpoint_interval).
  int64_t activation_checkpoint_interval = 0;

  // Keys vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
  // max_position_embeddings (required, positive); num_key_value_heads (default: num_attention_heads),
  // rms_norm_eps (default 1e-6), rope_theta (default 10000), tie_word_embeddings (default false).
  // "type" is left to the caller that chose the model. Throws ds::Error naming the key, e.g.
  // "dstrain.model.num_key_value_heads", for a bad or unknown key, for sizes past what this build
  // takes, and for heads that do not divide: hidden_size by num_attention_heads (into an even head
  // size, which RoPE rotates in pairs), num_attention_heads by num_key_value_heads.
  static LlamaConfig from_json(const nlohmann::json& block);

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // The pipeline's ordered layers: 0 = embedding, 1..num_hidden_layers = decoder layers, last = head.
  int64_t num_layers() const { return num_hidden_layers + 2; }
};

// Parameters of the whole model, each counted once (a tied embedding once).
int64_t num_parameters(const LlamaConfig& config);

// The size of each parameter of the whole model, in its order (named_parameters()), from the config
// alone: what the memory estimate counts without building the model.
std::vector<int64_t> parameter_numels(const LlamaConfig& config);

// Parameters each pipeline layer holds when built alone (with tied embeddings, the embedding and
// the head each count the token embedding, since a stage holding either keeps a copy).
std::vector<int64_t> layer_parameter_counts(const LlamaConfig& config);

// What pipeline.partition "type:<regex>" matches: "Embedding", "LlamaDecoderLayer" for each layer,
// "Head".
std::vector<std::string> layer_types(const LlamaConfig& config);

}  // namespace ds::models
