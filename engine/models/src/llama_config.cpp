#include "dstrain/engine/models/llama_config.hpp"

#include <cmath>
#include <string>
#include <tuple>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/json_block.hpp"
#include "dstrain/runtime/json_excerpt.hpp"

namespace ds::models {
namespace {

// A finite number > 0 (JsonBlock has no accessor for real numbers other than fractions).
double positive_real(const nlohmann::json& block, JsonBlock& keys, const std::string& key, double fallback) {
  if (!keys.has(key)) return fallback;
  keys.skip(key);
  const nlohmann::json& value = block.at(key);
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() <= 0)
    throw Error("must be a number > 0, got " + json_excerpt(value)).with_key(keys.full_key(key));
  return value.get<double>();
}

}  // namespace

LlamaConfig LlamaConfig::from_json(const nlohmann::json& block) {
  JsonBlock keys(block, "dstrain.model");
  keys.skip("type");
  LlamaConfig config;
  config.vocab_size = keys.positive_int("vocab_size");
  config.hidden_size = keys.positive_int("hidden_size");
  config.intermediate_size = keys.positive_int("intermediate_size");
  config.num_hidden_layers = keys.positive_int("num_hidden_layers");
  config.num_attention_heads = keys.positive_int("num_attention_heads");
  config.num_key_value_heads = keys.positive_int("num_key_value_heads", config.num_attention_heads);
  config.max_position_embeddings = keys.positive_int("max_position_embeddings");
  config.rms_norm_eps = positive_real(block, keys, "rms_norm_eps", config.rms_norm_eps);
  config.rope_theta = positive_real(block, keys, "rope_theta", config.rope_theta);
  config.tie_word_embeddings = keys.boolean("tie_word_embeddings", config.tie_word_embeddings);
  keys.reject_unknown_keys();
  // The GPT's bounds: far past any model trained, small enough that every count of elements and
  // bytes computed from them stays in an int64_t.
  for (const auto& [key, value, most] : {std::tuple{"num_hidden_layers", config.num_hidden_layers, int64_t{1} << 16},
                                        std::tuple{"hidden_size", config.hidden_size, int64_t{1} << 20},
                                        std::tuple{"intermediate_size", config.intermediate_size, int64_t{1} << 22},
                                        std::tuple{"num_attention_heads", config.num_attention_heads, int64_t{1} << 20},
                                        std::tuple{"num_key_value_heads", config.num_key_value_heads, int64_t{1} << 20},
                                        std::tuple{"max_position_embeddings", config.max_position_embeddings,
                                                   int64_t{1} << 24},
                                        std::tuple{"vocab_size", config.vocab_size, int64_t{1} << 24}})
    if (value > most)
      throw Error(std::to_string(value) + " is past the largest this build takes, " + std::to_string(most))
          .with_key(keys.full_key(key));
  if (config.hidden_size % config.num_attention_heads != 0 || config.head_dim() % 2 != 0)
    throw Error("hidden_size " + std::to_string(config.hidden_size) + " is not num_attention_heads " +
                std::to_string(config.num_attention_heads) + " heads of an even size (RoPE rotates pairs)")
        .with_key(keys.full_key("num_attention_heads"));
  if (config.num_attention_heads % config.num_key_value_heads != 0)
    throw Error("num_attention_heads " + std::to_string(config.num_attention_heads) + " is not divisible by " +
                std::to_string(config.num_key_value_heads))
        .with_key(keys.full_key("num_key_value_heads"));
  return config;
}

namespace {

int64_t decoder_layer_parameters(const LlamaConfig& c) {
  const int64_t C = c.hidden_size, kv = c.num_key_value_heads * c.head_dim();
  return 2 * C + C * C + 2 * C * kv + C * C + 3 * C * c.intermediate_size;
}

int64_t embedding_parameters(const LlamaConfig& c) { return c.vocab_size * c.hidden_size; }

}  // namespace

int64_t num_parameters(const LlamaConfig& config) {
  const int64_t head = config.tie_word_embeddings ? 0 : embedding_parameters(config);
  return embedding_parameters(config) + config.num_hidden_layers * decoder_layer_parameters(config) +
         config.hidden_size + head;
}

std::vector<int64_t> parameter_numels(const LlamaConfig& config) {
  const int64_t C = config.hidden_size, kv = config.num_key_value_heads * config.head_dim(),
                inner = config.intermediate_size;
  std::vector<int64_t> numels{embedding_parameters(config)};
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer)
    numels.insert(numels.end(), {C * C, C * kv, C * kv, C * C, C * inner, C * inner, inner * C, C, C});
  numels.push_back(C);
  if (!config.tie_word_embeddings) numels.push_back(embedding_parameters(config));
  return numels;
}

std::vector<int64_t> layer_parameter_counts(const LlamaConfig& config) {
  std::vector<int64_t> counts{embedding_parameters(config)};
  counts.insert(counts.end(), config.num_hidden_layers, decoder_layer_parameters(config));
  counts.push_back(config.hidden_size + embedding_parameters(config));
  return counts;
}

std::vector<std::string> layer_types(const LlamaConfig& config) {
  std::vector<std::string> types{"Embedding"};
  types.insert(types.end(), config.num_hidden_layers, "LlamaDecoderLayer");
  types.push_back("Head");
  return types;
}

}  // namespace ds::models
