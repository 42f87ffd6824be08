#include "config_auto.hpp"

#include <algorithm>
#include <cctype>
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

namespace {

// A setting of the dstrain block: absent or null is nullopt; the wrong type is an error naming it.
class Settings {
 public:
  explicit Settings(const json& config) {
    const auto block = config.find("dstrain");
    if (block != config.end() && block->is_object()) block_ = &*block;
  }

  std::optional<double> number(const char* name) const {
    const json* value = find(name);
    if (!value) return std::nullopt;
    if (!value->is_number()) throw wrong_type(name, "a number", *value);
    return value->get<double>();
  }

  std::optional<int64_t> integer(const char* name) const {
    const json* value = find(name);
    if (!value) return std::nullopt;
    if (!value->is_number_integer()) throw wrong_type(name, "an integer", *value);
    return value->get<int64_t>();
  }

  std::optional<bool> boolean(const char* name) const {
    const json* value = find(name);
    if (!value) return std::nullopt;
    if (!value->is_boolean()) throw wrong_type(name, "true or false", *value);
    return value->get<bool>();
  }

 private:
  const json* find(const char* name) const {
    if (!block_) return nullptr;
    const auto value = block_->find(name);
    return value == block_->end() || value->is_null() ? nullptr : &*value;
  }
  static Error wrong_type(const char* name, const char* expected, const json& got) {
    return Error(std::string("expected ") + expected + ", got " + json_excerpt(got)).with_key(std::string("dstrain.") + name);
  }

  const json* block_ = nullptr;
};

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// The optimizer's lr as written, when it is a number.
std::optional<double> written_lr(const json& config) {
  const json* lr = nullptr;
  if (const auto optimizer = config.find("optimizer"); optimizer != config.end() && optimizer->is_object())
    if (const auto params = optimizer->find("params"); params != optimizer->end() && params->is_object())
      if (const auto found = params->find("lr"); found != params->end()) lr = &*found;
  if (lr && lr->is_number()) return lr->get<double>();
  return std::nullopt;
}

bool is_sgd(const json& config) {
  const auto optimizer = config.find("optimizer");
  if (optimizer == config.end() || !optimizer->is_object()) return false;
  const auto type = optimizer->find("type");
  return type != optimizer->end() && type->is_string() && lowercase(type->get<std::string>()) == "sgd";
}

}  // namespace

AutoValues::AutoValues(const json& config) {
  const Settings settings(config);
  // Each rule runs on its own, so that a bad setting is an error only where an "auto" needs it.
  auto rule = [&](const std::string& path, auto&& decide) {
    Entry entry;
    try {
      decide(entry);
    } catch (const Error& e) {
      // A bad dstrain setting keeps its own key; the message says which "auto" needed it.
      entry.error = Error(e.message() + (e.key() ? " (needed for \"auto\" at " + path + ")" : ""))
                        .with_key(e.key().value_or(path));
    }
    entries_[path] = std::move(entry);
  };
  auto from = [](Entry& entry, const json& value, std::string source) {
    entry.value = value;
    entry.source = std::move(source);
  };

  // Batch sizes: HF's per_device_train_batch_size and gradient_accumulation_steps; not set, the
  // batch rule derives them (or refuses, naming the key, when nothing is left to derive from).
  rule("train_batch_size", [&](Entry& e) { e.source = "the batch rule"; });
  rule("train_micro_batch_size_per_gpu", [&](Entry& e) {
    if (auto micro = settings.integer("per_device_train_batch_size")) from(e, *micro, "dstrain.per_device_train_batch_size");
    else e.source = "the batch rule";
  });
  rule("gradient_accumulation_steps", [&](Entry& e) {
    if (auto gas = settings.integer("gradient_accumulation_steps")) from(e, *gas, "dstrain.gradient_accumulation_steps");
    else e.source = "the batch rule";
  });
  rule("gradient_clipping", [&](Entry& e) {
    if (auto norm = settings.number("max_grad_norm")) from(e, *norm, "dstrain.max_grad_norm");
    else from(e, 1.0, "HF's default max_grad_norm");
  });

  // Optimizer: the settings, else the optimizer's own defaults (OptimizerConfig).
  const bool sgd = is_sgd(config);
  rule("optimizer.params.lr", [&](Entry& e) {
    if (auto learning_rate = settings.number("learning_rate")) return from(e, *learning_rate, "dstrain.learning_rate");
    if (sgd) throw Error("SGD has no default lr: set dstrain.learning_rate (or --set dstrain.learning_rate=...)");
    e.source = "the optimizer's default";
  });
  rule("optimizer.params.betas", [&](Entry& e) {
    const auto beta1 = settings.number("adam_beta1"), beta2 = settings.number("adam_beta2");
    if (!beta1 && !beta2) return void(e.source = "the optimizer's default");
    const OptimizerConfig defaults;
    from(e, json::array({beta1.value_or(defaults.betas[0]), beta2.value_or(defaults.betas[1])}),
         "dstrain.adam_beta1, dstrain.adam_beta2");
  });
  rule("optimizer.params.eps", [&](Entry& e) {
    if (auto eps = settings.number("adam_epsilon")) from(e, *eps, "dstrain.adam_epsilon");
    else e.source = "the optimizer's default";
  });
  rule("optimizer.params.weight_decay", [&](Entry& e) {
    if (auto decay = settings.number("weight_decay")) from(e, *decay, "dstrain.weight_decay");
    else e.source = "the optimizer's default";
  });

  // Scheduler: total steps are the run's steps (the trainer's --steps is written to dstrain.steps);
  // warmup as HF's get_warmup_steps: warmup_steps when > 0, else ceil(warmup_ratio * total).
  rule("scheduler.params.warmup_min_lr", [&](Entry& e) { from(e, 0.0, "HF's rule: 0"); });
  rule("scheduler.params.warmup_max_lr", [&](Entry& e) {
    if (auto learning_rate = settings.number("learning_rate")) return from(e, *learning_rate, "dstrain.learning_rate");
    if (auto lr = written_lr(config)) return from(e, *lr, "optimizer.params.lr");
    if (sgd) throw Error("SGD has no default lr: set dstrain.learning_rate (or --set dstrain.learning_rate=...)");
    from(e, OptimizerConfig().lr, "the optimizer's default lr");
  });
  rule("scheduler.params.total_num_steps", [&](Entry& e) {
    const auto steps = settings.integer("steps");
    if (!steps) throw Error("\"auto\" is the number of training steps: set dstrain.steps or pass --steps");
    from(e, *steps, "dstrain.steps");
  });
  rule("scheduler.params.warmup_num_steps", [&](Entry& e) {
    const int64_t warmup_steps = settings.integer("warmup_steps").value_or(0);
    if (warmup_steps > 0) return from(e, warmup_steps, "dstrain.warmup_steps");
    const double ratio = settings.number("warmup_ratio").value_or(0.0);
    if (ratio <= 0) return from(e, 0, "HF's default: no warmup");
    const auto steps = settings.integer("steps");
    if (!steps) throw Error("dstrain.warmup_ratio needs the number of training steps: set dstrain.steps or pass --steps");
    from(e, static_cast<int64_t>(std::ceil(ratio * static_cast<double>(*steps))), "ceil(dstrain.warmup_ratio * dstrain.steps)");
  });

  // Precision: HF's fp16 / bf16 flags, false unless set.
  rule("fp16.enabled", [&](Entry& e) {
    if (auto fp16 = settings.boolean("fp16")) from(e, *fp16, "dstrain.fp16");
    else from(e, false, "HF's default");
  });
  rule("bf16.enabled", [&](Entry& e) {
    if (auto bf16 = settings.boolean("bf16")) from(e, *bf16, "dstrain.bf16");
    else from(e, false, "HF's default");
  });
  entries_["bfloat16.enabled"] = entries_["bf16.enabled"];
  // Apex amp: dstrain has no apex, as HF without --fp16_backend apex.
  rule("amp.enabled", [&](Entry& e) { from(e, false, "no apex"); });
  rule("amp.opt_level", [&](Entry& e) { from(e, "O1", "HF's default fp16_opt_level"); });

  for (const std::string& path : kHiddenSizeKeys)
    rule(path, [&](Entry& e) { e.source = "the model's hidden size, left to the memory planner"; });
  rule("pipeline.stages", [&](Entry& e) { e.source = "the engine"; });
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
  static const std::vector<std::string> kSettings = {
      "per_device_train_batch_size", "gradient_accumulation_steps", "max_grad_norm", "learning_rate", "adam_beta1",
      "adam_beta2", "adam_epsilon", "weight_decay", "steps", "warmup_steps", "warmup_ratio", "fp16", "bf16",
  };
  return std::find(kSettings.begin(), kSettings.end(), name) != kSettings.end();
}

}  // namespace ds
