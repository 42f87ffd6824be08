// Hugging Face's mode: the reconciliation transformers' HfTrainerDeepSpeedConfig does
// (trainer_config_process and trainer_config_finalize, fill_match) between a ds_config and the
// Trainer's TrainingArguments, with the dstrain block's settings of the same names standing for
// those arguments and TrainingArguments' defaults for the ones not set. It is on when the config
// has an "auto" value (other than DeepSpeed's own pipeline.stages) or the dstrain block sets one of
// the arguments; a plain DeepSpeed config is read as written. In the mode, each key HF fills
// takes the argument's value where it is "auto", and an explicit value that differs from it is a
// mismatch (all listed in one error). docs/config.md ("auto" values) lists the rules per key.
// Private to dstrain_runtime.
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

// A TrainingArguments field the dstrain block may set: its name and default.
struct TrainingArgument {
  const char* name;
  nlohmann::json fallback;
};
// The fields HfTrainerDeepSpeedConfig reads, with TrainingArguments' defaults.
const std::vector<TrainingArgument>& training_arguments();

class AutoValues {
 public:
  // `config` is the whole ds_config; its "dstrain" block holds the settings. A setting of the
  // wrong type is a ds::Error naming it.
  explicit AutoValues(const nlohmann::json& config);

  bool hf_mode() const { return hf_mode_; }
  // In Hugging Face's mode the batch is always the arguments' (as HF hands DeepSpeed
  // world x per_device_train_batch_size x gradient_accumulation_steps): the batch keys the config
  // leaves out are written "auto" into `config`. Returns whether it wrote any.
  bool fill_absent_batch_keys(nlohmann::json& config) const;

  // What "auto" at this path (canonical spelling) stands for; nullptr where the key stays unset:
  // the batch rule derives it, or it stays "auto". Throws ds::Error naming the key where nothing
  // decides the value (e.g. total_num_steps without dstrain.steps).
  const nlohmann::json* value_for(const std::string& path) const;
  // Where the value comes from, for the log line, e.g. "dstrain.learning_rate".
  const std::string& source_of(const std::string& path) const;

  // HF's mismatch list, "- ds optimizer.params.lr=0.0001 vs hf learning_rate=5e-05 (...)", one per
  // explicit value that contradicts the arguments; empty outside the mode. train_batch_size is
  // listed here when no world size can make it match; otherwise resolve_batch checks it.
  const std::vector<std::string>& mismatches() const { return mismatches_; }
  const std::string& first_mismatched_key() const { return first_mismatched_key_; }
  // "per_device_train_batch_size=4 (dstrain), learning_rate=5e-05 (default), ...": the arguments used.
  std::string arguments_text() const;

 private:
  struct Entry {
    nlohmann::json value;  // null: stays unset
    std::string source;
    std::optional<Error> error;  // "auto" here cannot be decided, and this says why
  };
  const Entry& entry(const std::string& path) const;
  void check(const nlohmann::json& config, const std::string& path, const nlohmann::json& hf_value,
             const std::string& hf_name);

  bool hf_mode_ = false;
  std::map<std::string, nlohmann::json> arguments_;  // every training_arguments() name: its value
  std::map<std::string, bool> argument_given_;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> mismatches_;
  std::string first_mismatched_key_;
};

}  // namespace ds::config_detail
