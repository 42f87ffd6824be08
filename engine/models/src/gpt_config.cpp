#include "dstrain/engine/models/gpt_config.hpp"

#include "dstrain/runtime/json_block.hpp"
#include "dstrain/runtime/error.hpp"

#include <string>
#include <tuple>

namespace ds::models {

GPTConfig GPTConfig::from_json(const nlohmann::json& block) {
  JsonBlock keys(block, "dstrain.model");
  keys.skip("type");
  GPTConfig config;
  config.n_layer = keys.positive_int("n_layer");
  config.n_head = keys.positive_int("n_head");
  config.n_embd = keys.positive_int("n_embd");
  config.block_size = keys.positive_int("block_size");
  config.vocab_size = keys.positive_int("vocab_size");
  config.dropout = keys.fraction("dropout", config.dropout);
  config.bias = keys.boolean("bias", config.bias);
  keys.reject_unknown_keys();
  // Far past any GPT trained, and small enough that every count of tensors, elements and bytes
  // computed from them stays in an int64_t: a typo (a billion layers) is named here, not by the
  // allocator half a minute later.
  for (const auto& [key, value, most] : {std::tuple{"n_layer", config.n_layer, int64_t{1} << 16},
                                        std::tuple{"n_embd", config.n_embd, int64_t{1} << 20},
                                        std::tuple{"n_head", config.n_head, int64_t{1} << 20},
                                        std::tuple{"block_size", config.block_size, int64_t{1} << 24},
                                        std::tuple{"vocab_size", config.vocab_size, int64_t{1} << 24}})
    if (value > most)
      throw Error(std::to_string(value) + " is past the largest this build takes, " + std::to_string(most))
          .with_key(keys.full_key(key));
  if (config.n_embd % config.n_head != 0) {
    throw Error("n_embd " + std::to_string(config.n_embd) + " is not divisible by n_head " +
                std::to_string(config.n_head))
        .with_key(keys.full_key("n_head"));
  }
  return config;
}

namespace {

int64_t layer_norm_parameters(const GPTConfig& c) { return c.bias ? 2 * c.n_embd : c.n_embd; }

int64_t linear_parameters(const GPTConfig& c, int64_t in, int64_t out) {
  return in * out + (c.bias ? out : 0);
}

int64_t block_parameters(const GPTConfig& c) {
  const int64_t C = c.n_embd;
  return 2 * layer_norm_parameters(c) + linear_parameters(c, C, 3 * C) + linear_parameters(c, C, C) +
         linear_parameters(c, C, 4 * C) + linear_parameters(c, 4 * C, C);
}

int64_t token_embedding_parameters(const GPTConfig& c) { return c.vocab_size * c.n_embd; }

}  // namespace

int64_t num_parameters(const GPTConfig& config) {
  return token_embedding_parameters(config) + config.block_size * config.n_embd +
         config.n_layer * block_parameters(config) + layer_norm_parameters(config);
}

std::vector<int64_t> layer_parameter_counts(const GPTConfig& config) {
  std::vector<int64_t> counts;
  counts.push_back(token_embedding_parameters(config) + config.block_size * config.n_embd);
  for (int64_t i = 0; i < config.n_layer; ++i) counts.push_back(block_parameters(config));
  counts.push_back(layer_norm_parameters(config) + token_embedding_parameters(config));
  return counts;
}

std::vector<std::string> layer_types(const GPTConfig& config) {
  std::vector<std::string> types{"Embedding"};
  types.insert(types.end(), config.n_layer, "Block");
  types.push_back("Head");
  return types;
}

}  // namespace ds::models
