#include "dstrain/engine/checkpoint/hf_format.hpp"

#include <cmath>
#include <regex>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/json_excerpt.hpp"

namespace ds::ckpt {
namespace {

const std::regex kGptParameter(
    R"(((wte|wpe)\.weight)|(ln_f\.(weight|bias))|(h\.[0-9]+\.(ln_1|ln_2|attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.(weight|bias)))");
const std::regex kMaskBuffer(R"(h\.[0-9]+\.attn\.(bias|masked_bias))");
const std::string kPrefix = "transformer.";

// HF's Conv1D weights: the four projections of each block.
bool conv1d_weight(const std::string& name) {
  return name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 &&
         (name.find(".attn.c_") != std::string::npos || name.find(".mlp.c_") != std::string::npos);
}

Error config_error(const std::string& path, const std::string& field, const std::string& what) {
  Error error("config.json field '" + field + "' " + what);
  error.with_path(path);
  return error;
}

int64_t positive_field(const nlohmann::json& config, const std::string& field, const std::string& path) {
  const auto it = config.find(field);
  if (it == config.end()) throw config_error(path, field, "is missing");
  if (!it->is_number_integer() || it->get<int64_t>() <= 0)
    throw config_error(path, field, "is " + json_excerpt(*it) + ", not a positive integer");
  return it->get<int64_t>();
}

}  // namespace

HfTensor to_hf_tensor(const std::string& name) {
  if (!std::regex_match(name, kGptParameter)) throw Error("the GPT has no parameter '" + name + "' that GPT-2 names");
  return {kPrefix + name, conv1d_weight(name)};
}

HfTensor from_hf_tensor(const std::string& name) {
  const std::string bare = name.compare(0, kPrefix.size(), kPrefix) == 0 ? name.substr(kPrefix.size()) : name;
  if (bare == "lm_head.weight" || std::regex_match(bare, kMaskBuffer)) return {};
  if (!std::regex_match(bare, kGptParameter)) throw Error("tensor '" + name + "' is not one of GPT-2's");
  return {bare, conv1d_weight(bare)};
}

nlohmann::json hf_config(const nlohmann::json& model_block) {
  if (!model_block.value("bias", true))
    throw Error("GPT-2 has biases: a GPT without them has no Hugging Face equivalent").with_key("dstrain.model.bias");
  const double dropout = model_block.value("dropout", 0.0);
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"n_layer", model_block.at("n_layer")},
          {"n_head", model_block.at("n_head")},
          {"n_embd", model_block.at("n_embd")},
          {"n_positions", model_block.at("block_size")},
          {"n_ctx", model_block.at("block_size")},
          {"vocab_size", model_block.at("vocab_size")},
          {"n_inner", nullptr},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5},
          {"resid_pdrop", dropout},
          {"embd_pdrop", dropout},
          {"attn_pdrop", dropout},
          {"initializer_range", 0.02},
          {"scale_attn_weights", true},
          {"tie_word_embeddings", true},
          {"torch_dtype", "float32"}};
}

nlohmann::json model_sizes_from_hf(const nlohmann::json& config, const std::string& path) {
  if (!config.is_object()) throw Error("config.json is not a JSON object").with_path(path);
  if (config.value("model_type", nlohmann::json()) != "gpt2")
    throw config_error(path, "model_type", "is " + json_excerpt(config.value("model_type", nlohmann::json())) +
                                               "; dstrain imports \"gpt2\"");
  const auto activation = config.value("activation_function", nlohmann::json("gelu_new"));
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
    throw config_error(path, "activation_function", "is " + json_excerpt(activation) +
                                                        "; the GPT computes GELU's tanh approximation (gelu_new)");
  nlohmann::json sizes = {{"n_layer", positive_field(config, "n_layer", path)},
                          {"n_head", positive_field(config, "n_head", path)},
                          {"n_embd", positive_field(config, "n_embd", path)},
                          {"block_size", positive_field(config, "n_positions", path)},
                          {"vocab_size", positive_field(config, "vocab_size", path)}};
  if (const auto inner = config.value("n_inner", nlohmann::json()); !inner.is_null() && inner != 4 * sizes["n_embd"].get<int64_t>())
    throw config_error(path, "n_inner", "is " + json_excerpt(inner) + "; the GPT's MLP is 4 x n_embd wide");
  if (const auto eps = config.value("layer_norm_epsilon", nlohmann::json(1e-5)); !eps.is_number() || std::abs(eps.get<double>() - 1e-5) > 1e-12)
    throw config_error(path, "layer_norm_epsilon", "is " + json_excerpt(eps) + "; the GPT's LayerNorm uses 1e-5");
  if (config.value("tie_word_embeddings", nlohmann::json(true)) != true)
    throw config_error(path, "tie_word_embeddings", "is false; the GPT's head is the token embedding");
  if (config.value("scale_attn_by_inverse_layer_idx", nlohmann::json(false)) != false)
    throw config_error(path, "scale_attn_by_inverse_layer_idx", "is true; the GPT scales attention by 1/sqrt(head size) only");
  return sizes;
}

}  // namespace ds::ckpt
