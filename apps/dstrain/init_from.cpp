#include "init_from.hpp"

#include <filesystem>

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
  if (model.value("type", nlohmann::json("gpt")) != "gpt")
    throw Error("init_from loads GPT-2 weights into the GPT, not a model of type " + json_excerpt(model["type"]))
        .with_key("dstrain.model.type");
  const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
  const nlohmann::json sizes = hf_model_sizes(dir);
  for (const auto& [key, value] : sizes.items()) {
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

models::GPT gpt_from_hf(const std::string& dir, const models::GPTConfig& model_config, const Config& config,
                        bool partition, std::shared_ptr<comm::Backend> world) {
  models::GPT model(model_config);
  load_hf_weights(dir, *model);
  if (partition) zero::Init(config, std::move(world)).partition(*model);
  return model;
}

}  // namespace ds::app
