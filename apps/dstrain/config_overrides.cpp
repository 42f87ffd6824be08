#include "config_overrides.hpp"

#include "dstrain/runtime/config.hpp"

namespace ds::app {

void add_override_options(CLI::App& command, ConfigOverrides& overrides) {
  // The trainer's message for the trainer's flag: "--steps: must be >= 1, got 0".
  const CLI::Validator at_least_one(
      [](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "must be a number >= 1, got '" + text + "'";
        return value >= 1 ? "" : "must be >= 1, got " + text;
      },
      ">= 1");
  command.add_option("--steps", overrides.steps, "optimizer steps to train (default: dstrain.steps of the config)")
      ->check(at_least_one);
  command.add_option("--set", overrides.sets,
                     "override a config key: --set dstrain.model.n_layer=4 --set zero_optimization.stage=2");
}

nlohmann::json config_with_overrides(const std::string& path, const ConfigOverrides& overrides) {
  nlohmann::json json = Config::parse_file(path);
  for (const std::string& assignment : overrides.sets) Config::apply_override(json, assignment);
  if (overrides.steps > 0) Config::apply_override(json, "dstrain.steps=" + std::to_string(overrides.steps));
  return json;
}

}  // namespace ds::app
