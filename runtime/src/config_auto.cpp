#include "config_auto.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/json_excerpt.hpp"

namespace ds::config_detail {

using nlohmann::json;

const std::vector<std::string> kHiddenSizeKeys = {
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
};

bool accepts_auto(const std::string& path) {
  static const std::vector<std::string> kAccepted = {
      "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
      "optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps", "optimizer.params.weight_decay",
      "scheduler.params.warmup_min_lr", "scheduler.params.warmup_max_lr", "scheduler.params.total_num_steps",
      "scheduler.params.warmup_num_steps", "fp16.enabled", "bf16.enabled", "bfloat16.enabled", "amp.enabled",
      "amp.opt_level", "zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
      "zero_optimization.prefetch_bucket_size", "zero_optimization.stage3_param_persistence_threshold",
      "zero_optimization.param_persistence_threshold", "pipeline.stages",
  };
  return std::find(kAccepted.begin(), kAccepted.end(), path) != kAccepted.end();
}

const std::vector<TrainingArgument>& training_arguments() {
  // transformers' TrainingArguments defaults (training_args.py).
  static const std::vector<TrainingArgument> kArguments = {
      {"per_device_train_batch_size", 8}, {"gradient_accumulation_steps", 1}, {"learning_rate", 5e-5},
      {"weight_decay", 0.0},              {"adam_beta1", 0.9},                {"adam_beta2", 0.999},
      {"adam_epsilon", 1e-8},             {"max_grad_norm", 1.0},             {"warmup_steps", 0},
      {"warmup_ratio", 0.0},              {"fp16", false},                    {"bf16", false},
      {"fp16_opt_level", "O1"},
  };
  return kArguments;
}

namespace {

constexpr const char* kBatchKeys[] = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"};

// The value at a dotted path, or nullptr where HF's find_config_node finds no node or the value is
// absent or null.
const json* at_path(const json& config, const std::string& path) {
  const json* node = &config;
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    if (!node->is_object()) return nullptr;
    const auto found = node->find(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (found == node->end() || found->is_null()) return nullptr;
    node = &*found;
    if (dot == std::string::npos) return node;
    start = dot + 1;
  }
}

// Python's == between two JSON values, as fill_match compares them: numbers and booleans by value
// (1 == 1.0 == True), lists element by element.
bool python_equal(const json& a, const json& b) {
  const bool a_number = a.is_number() || a.is_boolean(), b_number = b.is_number() || b.is_boolean();
  if (a_number && b_number) {
    auto value = [](const json& v) { return v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>(); };
    return value(a) == value(b);
  }
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!python_equal(a[i], b[i])) return false;
    return true;
  }
  return a == b;
}

// A setting's JSON type, as TrainingArguments declares the field.
void check_setting_type(const std::string& name, const json& value, const json& fallback) {
  const char* expected = nullptr;
  if (fallback.is_boolean() && !value.is_boolean()) expected = "true or false";
  else if (fallback.is_number_integer() && !value.is_number_integer()) expected = "an integer";
  else if (fallback.is_number_float() && !value.is_number()) expected = "a number";
  else if (fallback.is_string() && !value.is_string()) expected = "a string";
  if (expected)
    throw Error(std::string("expected ") + expected + " (TrainingArguments' " + name + "), got " + json_excerpt(value))
        .with_key("dstrain." + name);
}

// An "auto" that only the Hugging Face Trainer fills; DeepSpeed's own pipeline.stages and the
// hidden-size keys (which dstrain's memory planner fills, as it fills them when unset) are not.
bool has_hf_auto(const json& node, const std::string& path) {
  if (node == "auto")
    return path != "pipeline.stages" && !path.empty() &&
           std::find(kHiddenSizeKeys.begin(), kHiddenSizeKeys.end(), path) == kHiddenSizeKeys.end() &&
           path != "zero_optimization.prefetch_bucket_size" && path != "zero_optimization.param_persistence_threshold";
  if (!node.is_object()) return false;
  for (auto it = node.begin(); it != node.end(); ++it)
    if (it.key() != "dstrain" && has_hf_auto(*it, (path.empty() ? "" : path + ".") + it.key())) return true;
  return false;
}

}  // namespace

AutoValues::AutoValues(const json& config) {
  const json* block = at_path(config, "dstrain");
  if (block && !block->is_object()) block = nullptr;  // Config::from_json names the key
  bool any_setting = false;
  for (const TrainingArgument& argument : training_arguments()) {
    const json* value = block ? at_path(*block, argument.name) : nullptr;
    if (value) check_setting_type(argument.name, *value, argument.fallback);
    arguments_[argument.name] = value ? *value : argument.fallback;
    argument_given_[argument.name] = value != nullptr;
    any_setting = any_setting || value;
  }
  hf_mode_ = any_setting || has_hf_auto(config, "");

  // dstrain.steps is HF's num_training_steps (the trainer writes --steps there); it has no default
  // here, as the library does not know the run's length.
  std::optional<int64_t> steps;
  std::optional<Error> steps_error;
  if (const json* value = block ? at_path(*block, "steps") : nullptr) {
    if (value->is_number_integer()) steps = value->get<int64_t>();
    else steps_error = Error("expected an integer, got " + json_excerpt(*value)).with_key("dstrain.steps");
  }
  auto source = [&](const std::string& name) {
    return argument_given_[name] ? "dstrain." + name : "TrainingArguments' default " + name;
  };
  auto set = [&](const std::string& path, json value, std::string from) {
    entries_[path] = Entry{std::move(value), std::move(from), std::nullopt};
  };
  auto refuse = [&](const std::string& path, Error error) {
    if (!error.key()) error.with_key(path);
    entries_[path] = Entry{json(), "", std::move(error)};
  };

  // trainer_config_process.
  const int64_t micro = arguments_["per_device_train_batch_size"].get<int64_t>();
  const int64_t gas = arguments_["gradient_accumulation_steps"].get<int64_t>();
  set("train_micro_batch_size_per_gpu", micro, source("per_device_train_batch_size"));
  set("gradient_accumulation_steps", gas, source("gradient_accumulation_steps"));
  set("train_batch_size", json(), "world x per_device_train_batch_size x gradient_accumulation_steps");
  for (const char* key : kBatchKeys)
    if (!at_path(config, key)) entries_[key].source = "not in the config, so HF's: " + entries_[key].source;
  set("gradient_clipping", arguments_["max_grad_norm"], source("max_grad_norm"));
  set("optimizer.params.lr", arguments_["learning_rate"], source("learning_rate"));
  set("optimizer.params.betas", json::array({arguments_["adam_beta1"], arguments_["adam_beta2"]}),
      source("adam_beta1") + ", " + source("adam_beta2"));
  set("optimizer.params.eps", arguments_["adam_epsilon"], source("adam_epsilon"));
  set("optimizer.params.weight_decay", arguments_["weight_decay"], source("weight_decay"));
  set("scheduler.params.warmup_min_lr", 0, "HF's rule: 0");
  set("scheduler.params.warmup_max_lr", arguments_["learning_rate"], source("learning_rate"));
  set("fp16.enabled", arguments_["fp16"], source("fp16"));
  set("bf16.enabled", arguments_["bf16"], source("bf16"));
  entries_["bfloat16.enabled"] = entries_["bf16.enabled"];
  set("amp.enabled", false, "no apex: HF's fp16 backend here is amp");
  set("amp.opt_level", arguments_["fp16_opt_level"], source("fp16_opt_level"));

  // trainer_config_finalize: total steps are the run's steps; warm-up as TrainingArguments'
  // get_warmup_steps: warmup_steps when > 0, else ceil(warmup_ratio * total).
  if (steps) set("scheduler.params.total_num_steps", *steps, "dstrain.steps");
  else refuse("scheduler.params.total_num_steps",
              steps_error.value_or(Error("\"auto\" is the number of training steps: set dstrain.steps or pass --steps")));
  const int64_t warmup_steps = arguments_["warmup_steps"].get<int64_t>();
  const double ratio = arguments_["warmup_ratio"].get<double>();
  if (warmup_steps > 0) set("scheduler.params.warmup_num_steps", warmup_steps, "dstrain.warmup_steps");
  else if (ratio <= 0) set("scheduler.params.warmup_num_steps", 0, "TrainingArguments' default: no warm-up");
  else if (steps)
    set("scheduler.params.warmup_num_steps", static_cast<int64_t>(std::ceil(ratio * static_cast<double>(*steps))),
        "ceil(dstrain.warmup_ratio * dstrain.steps)");
  else refuse("scheduler.params.warmup_num_steps",
              steps_error.value_or(Error("dstrain.warmup_ratio needs the number of training steps: set dstrain.steps "
                                         "or pass --steps")));

  for (const std::string& path : kHiddenSizeKeys) set(path, json(), "the model's hidden size, left to the memory planner");
  set("pipeline.stages", json(), "the engine");

  if (!hf_mode_) return;
  // fill_match's checks, in trainer_config_process's order, then trainer_config_finalize's.
  check(config, "train_micro_batch_size_per_gpu", micro, "per_device_train_batch_size");
  check(config, "gradient_accumulation_steps", gas, "gradient_accumulation_steps");
  // train_batch_size = world x micro x gas: without the world, a value no world can give.
  if (const json* train = at_path(config, "train_batch_size");
      train && train->is_number_integer() && micro > 0 && gas > 0 && train->get<int64_t>() % (micro * gas) != 0) {
    mismatches_.push_back("- ds train_batch_size=" + train->dump() + " vs hf train_batch_size (calculated)=world x " +
                          std::to_string(micro) + " x " + std::to_string(gas) + ", a multiple of " +
                          std::to_string(micro * gas) + " (" + source("per_device_train_batch_size") + ", " +
                          source("gradient_accumulation_steps") + ")");
    if (first_mismatched_key_.empty()) first_mismatched_key_ = "train_batch_size";
  }
  check(config, "gradient_clipping", arguments_["max_grad_norm"], "max_grad_norm");
  check(config, "optimizer.params.lr", arguments_["learning_rate"], "learning_rate");
  check(config, "optimizer.params.betas", entries_["optimizer.params.betas"].value, "adam_beta1+adam_beta2");
  check(config, "optimizer.params.eps", arguments_["adam_epsilon"], "adam_epsilon");
  check(config, "optimizer.params.weight_decay", arguments_["weight_decay"], "weight_decay");
  check(config, "scheduler.params.warmup_max_lr", arguments_["learning_rate"], "learning_rate");
  check(config, "fp16.enabled", arguments_["fp16"], "fp16|fp16_full_eval+fp16_backend(amp)");
  check(config, "amp.enabled", false, "fp16+fp16_backend(apex)");
  check(config, "amp.opt_level", arguments_["fp16_opt_level"], "fp16_opt_level");
  check(config, "bf16.enabled", arguments_["bf16"], "bf16|bf16_full_eval");
  check(config, "bfloat16.enabled", arguments_["bf16"], "bf16|bf16_full_eval");
  if (steps) check(config, "scheduler.params.total_num_steps", *steps, "num_training_steps (calculated)");
  if (const Entry& warmup = entries_["scheduler.params.warmup_num_steps"]; !warmup.error)
    check(config, "scheduler.params.warmup_num_steps", warmup.value, "warmup_steps");
}

void AutoValues::check(const json& config, const std::string& path, const json& hf_value, const std::string& hf_name) {
  const json* written = at_path(config, path);
  if (!written || *written == "auto" || python_equal(*written, hf_value)) return;
  const std::string argument = hf_name.substr(0, hf_name.find_first_of("+| "));
  const auto given = argument_given_.find(argument);
  const std::string from = hf_name == "num_training_steps (calculated)" ? " (dstrain.steps)"
                           : given == argument_given_.end()          ? ""
                           : given->second                ? " (dstrain." + argument + ")"
                                                          : " (TrainingArguments' default)";
  mismatches_.push_back("- ds " + path + "=" + json_excerpt(*written) + " vs hf " + hf_name + "=" + hf_value.dump() + from);
  if (first_mismatched_key_.empty()) first_mismatched_key_ = path;
}

bool AutoValues::fill_absent_batch_keys(json& config) const {
  bool wrote = false;
  for (const char* key : kBatchKeys)
    if (!at_path(config, key)) config[key] = "auto", wrote = true;
  return wrote;
}

std::string AutoValues::arguments_text() const {
  std::string text;
  for (const TrainingArgument& argument : training_arguments())
    text += std::string(text.empty() ? "" : ", ") + argument.name + "=" + arguments_.at(argument.name).dump() +
            (argument_given_.at(argument.name) ? "" : " (default)");
  return text;
}

const AutoValues::Entry& AutoValues::entry(const std::string& path) const {
  const auto found = entries_.find(path);
  if (found == entries_.end())
    throw Error("\"auto\" is not accepted for this key; the Hugging Face Trainer fills it in for the keys listed in "
                "docs/config.md only")
        .with_key(path);
  return found->second;
}

const json* AutoValues::value_for(const std::string& path) const {
  const Entry& found = entry(path);
  if (found.error) throw *found.error;
  return found.value.is_null() ? nullptr : &found.value;
}

const std::string& AutoValues::source_of(const std::string& path) const { return entry(path).source; }

}  // namespace ds::config_detail

namespace ds {

bool Config::is_auto_setting(const std::string& name) {
  if (name == "steps") return true;
  const auto& arguments = config_detail::training_arguments();
  return std::any_of(arguments.begin(), arguments.end(), [&](const auto& argument) { return name == argument.name; });
}

}  // namespace ds
