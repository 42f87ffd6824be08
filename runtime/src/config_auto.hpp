// Hugging Face "auto": the keys the HF Trainer fills in (transformers' HfTrainerDeepSpeedConfig,
// trainer_config_process and trainer_config_finalize) and the value each "auto" stands for here,
// taken from the dstrain block's settings of the same names as HF's TrainingArguments.
// docs/config.md ("auto" values) lists the rules per key. Private to dstrain_runtime.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dstrain/runtime/error.hpp"

namespace ds::config_detail {

// The keys whose "auto" HF resolves from the model's hidden size; they stay "auto" in the config
// (Config::is_auto) for whoever knows the model.
extern const std::vector<std::string> kHiddenSizeKeys;

// Whether HF (or DeepSpeed itself, for pipeline.stages) accepts "auto" at this dotted path, in
// any spelling Config reads (bfloat16.enabled, zero_optimization.prefetch_bucket_size).
bool accepts_auto(const std::string& path);

class AutoValues {
 public:
  // `config` is the whole ds_config; its "dstrain" block holds the settings.
  explicit AutoValues(const nlohmann::json& config);

  // What "auto" at this path (canonical spelling) stands for; nullptr where the key stays unset:
  // the batch rule derives it, the optimizer's default applies, or it stays "auto". Throws
  // ds::Error naming the key where nothing decides the value (e.g. total_num_steps without steps).
  const nlohmann::json* value_for(const std::string& path) const;
  // Where the value comes from, for the log line, e.g. "dstrain.learning_rate".
  const std::string& source_of(const std::string& path) const;

 private:
  struct Entry {
    nlohmann::json value;  // null: stays unset
    std::string source;
    std::optional<Error> error;  // "auto" here cannot be decided, and this says why
  };
  const Entry& entry(const std::string& path) const;

  std::map<std::string, Entry> entries_;
};

}  // namespace ds::config_detail
