#include "dstrain/engine/checkpoint/hf_format.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <regex>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/json_excerpt.hpp"

namespace ds::ckpt {
namespace {

const std::regex kGptParameter(
    R"(((wte|wpe)\.weight)|(ln_f\.(weight|bias))|(h\.[0-9]+\.(ln_1|ln_2|attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.(weight|bias)))");
const std::regex kMaskBuffer(R"(h\.[0-9]+\.attn\.(bias|masked_bias))");
const std::regex kLlamaParameter(
    R"((model\.embed_tokens\.weight)|(model\.norm\.weight)|(lm_head\.weight)|(model\.layers\.[0-9]+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj|input_layernorm|post_attention_layernorm)\.weight))");
const std::regex kRotaryBuffer(R"(model\.layers\.[0-9]+\.self_attn\.rotary_emb\.inv_freq)");
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

std::string model_type(const nlohmann::json& model_block) {
  return model_block.is_object() && model_block.contains("type") && model_block["type"].is_string()
             ? model_block["type"].get<std::string>()
             : "gpt";
}

HfTensor to_hf_tensor(const std::string& type, const std::string& name) {
  if (type == "llama") {
    if (!std::regex_match(name, kLlamaParameter)) throw Error("the Llama has no parameter '" + name + "' that Llama names");
    return {name, false};
  }
  if (!std::regex_match(name, kGptParameter)) throw Error("the GPT has no parameter '" + name + "' that GPT-2 names");
  return {kPrefix + name, conv1d_weight(name)};
}

HfTensor from_hf_tensor(const std::string& type, const std::string& name) {
  if (type == "llama") {
    if (std::regex_match(name, kRotaryBuffer)) return {};
    if (!std::regex_match(name, kLlamaParameter)) throw Error("tensor '" + name + "' is not one of the Llama's");
    return {name, false};
  }
  const std::string bare = name.compare(0, kPrefix.size(), kPrefix) == 0 ? name.substr(kPrefix.size()) : name;
  if (bare == "lm_head.weight" || std::regex_match(bare, kMaskBuffer)) return {};
  if (!std::regex_match(bare, kGptParameter)) throw Error("tensor '" + name + "' is not one of GPT-2's");
  return {bare, conv1d_weight(bare)};
}

size_t parameter_count(const nlohmann::json& model_block) {
  if (model_type(model_block) == "llama")
    return 2 + 9 * static_cast<size_t>(model_block.value("num_hidden_layers", int64_t{0})) +
           (model_block.value("tie_word_embeddings", false) ? 0 : 1);
  return 4 + 12 * static_cast<size_t>(model_block.value("n_layer", int64_t{0}));
}

nlohmann::json hf_config(const nlohmann::json& model_block) {
  if (model_type(model_block) == "llama") {
    const int64_t heads = model_block.at("num_attention_heads").get<int64_t>();
    return {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"vocab_size", model_block.at("vocab_size")},
            {"hidden_size", model_block.at("hidden_size")},
            {"intermediate_size", model_block.at("intermediate_size")},
            {"num_hidden_layers", model_block.at("num_hidden_layers")},
            {"num_attention_heads", heads},
            {"num_key_value_heads", model_block.value("num_key_value_heads", heads)},
            {"max_position_embeddings", model_block.at("max_position_embeddings")},
            {"rms_norm_eps", model_block.value("rms_norm_eps", 1e-6)},
            {"rope_theta", model_block.value("rope_theta", 10000.0)},
            {"rope_scaling", nullptr},
            {"tie_word_embeddings", model_block.value("tie_word_embeddings", false)},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"initializer_range", 0.02},
            {"torch_dtype", "float32"}};
  }
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

namespace {

nlohmann::json llama_block_from_hf(const nlohmann::json& config, const std::string& path) {
  nlohmann::json block = {{"type", "llama"}};
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                          "max_position_embeddings"})
    block[key] = positive_field(config, key, path);
  block["num_key_value_heads"] = config.contains("num_key_value_heads") && !config["num_key_value_heads"].is_null()
                                     ? positive_field(config, "num_key_value_heads", path)
                                     : block["num_attention_heads"].get<int64_t>();
  for (const auto& [key, fallback] : {std::pair{"rms_norm_eps", 1e-6}, std::pair{"rope_theta", 10000.0}}) {
    const nlohmann::json value = config.value(key, nlohmann::json(fallback));
    if (!value.is_number() || value.get<double>() <= 0) throw config_error(path, key, "is " + json_excerpt(value) + ", not a positive number");
    block[key] = value.get<double>();
  }
  const nlohmann::json tied = config.value("tie_word_embeddings", nlohmann::json(false));
  if (!tied.is_boolean()) throw config_error(path, "tie_word_embeddings", "is " + json_excerpt(tied) + ", not a boolean");
  block["tie_word_embeddings"] = tied;
  if (const auto act = config.value("hidden_act", nlohmann::json("silu")); act != "silu")
    throw config_error(path, "hidden_act", "is " + json_excerpt(act) + "; the Llama's MLP computes SiLU");
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (config.value(key, nlohmann::json(false)) != false)
      throw config_error(path, key, "is " + json_excerpt(config[key]) + "; the Llama's projections have no bias");
  if (!config.value("rope_scaling", nlohmann::json()).is_null())
    throw config_error(path, "rope_scaling", "is set; the Llama computes plain RoPE");
  return block;
}

}  // namespace

nlohmann::json model_block_from_hf(const nlohmann::json& config, const std::string& path) {
  if (!config.is_object()) throw Error("config.json is not a JSON object").with_path(path);
  if (config.value("model_type", nlohmann::json()) == "llama") return llama_block_from_hf(config, path);
  if (config.value("model_type", nlohmann::json()) != "gpt2")
    throw config_error(path, "model_type", "is " + json_excerpt(config.value("model_type", nlohmann::json())) +
                                               "; dstrain imports \"gpt2\" and \"llama\"");
  const auto activation = config.value("activation_function", nlohmann::json("gelu_new"));
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
    throw config_error(path, "activation_function", "is " + json_excerpt(activation) +
                                                        "; the GPT computes GELU's tanh approximation (gelu_new)");
  nlohmann::json sizes = {{"type", "gpt"},
                          {"n_layer", positive_field(config, "n_layer", path)},
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

int64_t parse_shard_size(const std::string& text) {
  static const std::vector<std::pair<std::string, int64_t>> units = {
      {"KIB", int64_t{1} << 10}, {"MIB", int64_t{1} << 20}, {"GIB", int64_t{1} << 30},
      {"KB", 1'000},            {"MB", 1'000'000},         {"GB", 1'000'000'000}, {"", 1}};
  std::string upper = text;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const Error bad = Error("max shard size '" + text + "' is not digits and a unit (KB, MB, GB, KiB, MiB, GiB) above 0")
                        .with_key("--max-shard-size");
  for (const auto& [unit, scale] : units) {
    if (upper.size() <= unit.size() || upper.compare(upper.size() - unit.size(), unit.size(), unit) != 0) continue;
    const std::string digits = upper.substr(0, upper.size() - unit.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos) throw bad;
    int64_t value = 0;
    for (char d : digits)
      if (__builtin_mul_overflow(value, 10, &value) || __builtin_add_overflow(value, d - '0', &value)) throw bad;
    if (value == 0 || __builtin_mul_overflow(value, scale, &value)) throw bad;
    return value;
  }
  throw bad;
}

std::vector<size_t> shard_starts(const std::vector<int64_t>& bytes, int64_t max_bytes) {
  std::vector<size_t> starts = {0};
  int64_t filled = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (filled > 0 && filled + bytes[i] > max_bytes) {
      starts.push_back(i);
      filled = 0;
    }
    filled += bytes[i];
  }
  return starts;
}

std::string weights_file_name(size_t shard, size_t count) {
  if (count == 1) return "model.safetensors";
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", shard + 1, count);
  return name;
}

}  // namespace ds::ckpt
