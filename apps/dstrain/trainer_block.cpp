#include "trainer_block.hpp"

#include <algorithm>
#include <vector>

#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/json_block.hpp"
#include "dstrain/runtime/json_excerpt.hpp"

namespace ds::app {
namespace {

const std::vector<std::string> kKeys = {"model",  "data",    "steps",   "eval_interval",
                                        "eval_iters", "device", "backend", "memory_limit",
                                        "gpu_memory_limit", "gather_in_forward", "step_in_backward"};
const std::vector<std::string> kModelTypes = {"gpt", "llama"};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitution = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitution});
    }
  }
  return row[b.size()];
}

// " (did you mean 'dstrain.steps'?)" for the nearest known key within two edits (one for keys of
// three letters or fewer, so that "x" suggests nothing), else "".
std::string suggestion(const std::string& key) {
  std::string best;
  size_t best_distance = 3;
  for (const std::string& known : kKeys) {
    const size_t distance = edit_distance(key, known);
    if (distance < best_distance && distance <= (known.size() > 3 ? 2u : 1u)) best = known, best_distance = distance;
  }
  return best.empty() ? "" : " (did you mean 'dstrain." + best + "'?)";
}

std::string listed(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

}  // namespace

void check_model_type(const nlohmann::json& model) {
  if (model.is_null()) return;
  if (!model.is_object()) throw Error("must be a JSON object, got " + json_excerpt(model)).with_key("dstrain.model");
  if (!model.contains("type")) return;
  const nlohmann::json& type = model.at("type");
  if (!type.is_string() || std::find(kModelTypes.begin(), kModelTypes.end(), type.get<std::string>()) == kModelTypes.end())
    throw Error("model type " + json_excerpt(type) + " is not built in; supported: " + listed(kModelTypes))
        .with_key("dstrain.model.type");
}

void apply_trainer_defaults(nlohmann::json& config) {
  nlohmann::json& block = config["dstrain"];
  if (block.is_null()) block = nlohmann::json::object();
  if (!block.is_object()) return;  // Config::from_json names the key
  if (!block.contains("gather_in_forward")) block["gather_in_forward"] = true;
  if (!block.contains("step_in_backward")) block["step_in_backward"] = true;
}

TrainerBlock read_trainer_block(const nlohmann::json& block) {
  for (const auto& item : block.items())
    if (std::find(kKeys.begin(), kKeys.end(), item.key()) == kKeys.end() && !Config::is_auto_setting(item.key()))
      throw Error("unknown key" + suggestion(item.key()) + "; the dstrain block holds " + listed(kKeys))
          .with_key("dstrain." + item.key());
  JsonBlock keys(block, "dstrain");
  TrainerBlock trainer;
  trainer.steps = keys.positive_int("steps", trainer.steps);
  trainer.eval_interval = static_cast<int64_t>(keys.non_negative_int("eval_interval", 0));
  trainer.eval_iters = keys.positive_int("eval_iters", trainer.eval_iters);
  trainer.model = block.value("model", nlohmann::json::object());
  trainer.data = block.value("data", nlohmann::json());
  check_model_type(trainer.model);
  const bool has_valid = trainer.data.is_object() && trainer.data.contains("valid");
  if (trainer.eval_interval > 0 && !has_valid)
    throw Error("evaluation needs held-out data: set dstrain.data.valid").with_key("dstrain.eval_interval");
  return trainer;
}

}  // namespace ds::app
