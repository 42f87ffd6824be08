#include "init_from.hpp"

#include <filesystem>

#include "dstrain/engine/checkpoint/hf_format.hpp"
#include "dstrain/engine/checkpoint/hf_import.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/json_excerpt.hpp"
#include "dstrain/zero/init.hpp"

namespace ds::app {

std::string take_init_from(nlohmann::json& json) {
  if (!json.is_object() || !json.contains("dstrain") || !json["dstrain"].is_object()) return "";
  nlohmann::json& block = json["dstrain"];
  if (!block.contains("model") || !block["model"].is_object() || !block["model"].contains("init_from")) return "";
  nlohmann::json& model = block["model"];
  if (!model["init_from"].is_string() || model["init_from"].get<std::string>().empty())
    throw Error("init_from is " + json_excerpt(model["init_from"]) + ", not a folder").with_key("dstrain.model.init_from");
  const std::string dir = model["init_from"].get<std::string>();
  if (!std::filesystem::is_directory(dir))
    throw Error("init_from names no folder").with_key("dstrain.model.init_from").with_path(dir);
  const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
  const nlohmann::json given = hf_model_block(dir);
  // A type left out means "gpt" in the block, but here the folder decides.
  if (!model.contains("type") || model["type"].is_null()) model["type"] = given["type"];
  for (const auto& [key, value] : given.items()) {
    if (model.contains(key) && !model[key].is_null() && model[key] != value)
      throw Error("dstrain.model." + key + " is " + json_excerpt(model[key]) + ", init_from's config.json says " +
                  value.dump())
          .with_key("dstrain.model." + key)
          .with_path(config_path);
    model[key] = value;
  }
  model.erase("init_from");
  return dir;
}

CausalLM model_from_hf(const std::string& dir, const ModelChoice& choice, const Config& config, bool partition,
                       std::shared_ptr<comm::Backend> world) {
  CausalLM model = choice.build();
  load_hf_weights(dir, *model, std::holds_alternative<models::LlamaConfig>(choice.config) ? "llama" : "gpt");
  if (partition) zero::Init(config, std::move(world)).partition(*model);
  return model;
}

}  // namespace ds::app
