#include "dstrain/runtime/config.hpp"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "config_auto.hpp"
#include "config_fields.hpp"
#include "config_sections.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/json_excerpt.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds {

using config_detail::Key;
using config_detail::Reader;
using config_detail::Writer;
using nlohmann::json;

namespace {

// Top-level DeepSpeed keys accepted and kept as written, but not acted on yet (docs/config.md).
const char* const kUntypedKeys[] = {
    "activation_checkpointing", "amp", "autotuning", "comet", "comms_logger", "compile",
    "compression_training", "csv_monitor", "curriculum_learning", "data_efficiency", "data_types",
    "dataloader_drop_last", "disable_python_gc", "elasticity", "expert_parallel", "flops_profiler",
    "gradient_allreduce_op", "graph_harvesting", "hybrid_engine", "log_level", "managed_gradient_accumulation",
    "nebula", "progressive_layer_drop", "quantize_training", "seq_parallel_comm_data_type", "sequence_parallel_size",
    "sparse_attention", "tensor_parallel", "tensorboard", "timers", "torch_autocast",
    "use_data_before_expert_parallelism", "vocabulary_size", "wandb", "weight_quantization",
};

std::string short_key(const std::string& key) { return key.size() <= 64 ? key : key.substr(0, 64) + "..."; }

// DeepSpeed loads ds_config with a hook that rejects duplicate keys; nlohmann::json would keep
// the last one silently. The path to the value being read is kept for the error nlohmann::json
// raises without one: a number that overflows a double (1e999).
json parse_rejecting_duplicates(const std::string& text) {
  struct Open {
    std::set<std::string> keys;
    std::string key;     // an object's key being read
    int64_t index = -1;  // an array's element being read; -1 in an object
  };
  std::vector<Open> open;
  auto path = [&] {
    std::string result;
    for (const Open& level : open)
      result += level.index >= 0 ? "[" + std::to_string(level.index) + "]"
                                 : (result.empty() ? "" : ".") + short_key(level.key);
    return result;
  };
  auto element_done = [&] {
    if (!open.empty() && open.back().index >= 0) ++open.back().index;
  };
  auto on_event = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: open.emplace_back(); break;
      case json::parse_event_t::array_start: open.push_back({{}, "", 0}); break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end: open.pop_back(); element_done(); break;
      case json::parse_event_t::key:
        open.back().key = parsed.get<std::string>();
        if (!open.back().keys.insert(open.back().key).second) throw Error("duplicate key").with_key(path());
        break;
      case json::parse_event_t::value: element_done(); break;
    }
    return true;
  };
  try {
    return json::parse(text, on_event, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::out_of_range& e) {
    throw Error(std::string("a number out of range: ") + e.what()).with_key(path());
  }
}

// Deeper than any DeepSpeed config goes; JSON copies and printing recurse, so deeper values are
// refused before anything else touches them.
constexpr size_t kMaxDepth = 64;

// Before any key is read: the nesting depth, and "auto" where the Hugging Face Trainer would not
// fill it in (it would reach DeepSpeed, which cannot read it).
void check_depth_and_placeholders(const json& input) {
  if (json_depth(input, kMaxDepth) > kMaxDepth) {
    // Find a path to the deep value for the message, one level at a time.
    std::string path;
    const json* node = &input;
    for (size_t level = 0; level < kMaxDepth && node->is_structured() && !node->empty(); ++level) {
      auto deepest = node->begin();
      for (auto it = node->begin(); it != node->end(); ++it)
        if (json_depth(*it, kMaxDepth) > json_depth(*deepest, kMaxDepth)) deepest = it;
      path += node->is_object() ? (path.empty() ? "" : ".") + short_key(deepest.key())
                                : "[" + std::to_string(std::distance(node->begin(), deepest)) + "]";
      node = &*deepest;
    }
    throw Error(log::concat("a value nested more than ", kMaxDepth, " levels deep")).with_key(path + "...");
  }
  std::vector<std::string> placeholders;
  std::vector<std::pair<const json*, std::string>> pending{{&input, ""}};
  while (!pending.empty()) {
    auto [node, path] = pending.back();
    pending.pop_back();
    if (*node == "auto" && !config_detail::accepts_auto(path)) placeholders.push_back(path);
    if (node->is_object())
      for (auto it = node->begin(); it != node->end(); ++it)
        pending.emplace_back(&*it, (path.empty() ? "" : path + ".") + short_key(it.key()));
    else if (node->is_array())
      for (size_t i = 0; i < node->size(); ++i) pending.emplace_back(&(*node)[i], path + "[" + std::to_string(i) + "]");
  }
  if (placeholders.empty()) return;
  std::sort(placeholders.begin(), placeholders.end());
  std::string listed;
  for (const auto& key : placeholders) listed += (listed.empty() ? "" : ", ") + key;
  throw Error("\"auto\" is resolved only where the Hugging Face Trainer resolves it (docs/config.md lists the keys); "
              "give a value instead for each of: " + listed)
      .with_key(placeholders.front());
}

}  // namespace

json Config::parse_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open config file").with_path(path).with_errno(errno);
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error("cannot read config file").with_path(path).with_errno(errno);
  json parsed;
  try {
    parsed = parse_rejecting_duplicates(text.str());
  } catch (const json::parse_error& e) {
    throw Error(std::string("invalid JSON: ") + e.what()).with_path(path).with_offset(static_cast<int64_t>(e.byte));
  } catch (Error& e) {
    e.with_path(path);
    throw;
  }
  // Said here, before --set or the trainer's defaults write into it and blame themselves.
  if (!parsed.is_object())
    throw Error(std::string("the file holds a JSON ") + parsed.type_name() + "; a DeepSpeed config is a JSON object {...}")
        .with_path(path);
  return parsed;
}

Config Config::from_file(const std::string& path) {
  const json parsed = parse_file(path);
  try {
    return from_json(parsed);
  } catch (Error& e) {
    e.with_path(path);
    throw;
  }
}

Config Config::from_json(const json& input) {
  if (!input.is_object())
    throw Error(std::string("a DeepSpeed config is a JSON object, got ") + input.type_name());
  check_depth_and_placeholders(input);
  Config config;
  // DeepSpeed's legacy form "zero_optimization": true / false is stage 1 / stage 0.
  const json* source = &input;
  json rewritten;
  if (const auto zero = input.find("zero_optimization"); zero != input.end() && zero->is_boolean()) {
    rewritten = input;
    rewritten["zero_optimization"] = json{{"stage", zero->get<bool>() ? 1 : 0}};
    config_detail::record_warning(config.warnings_,
                                  std::string("deprecated form 'zero_optimization': ") + (zero->get<bool>() ? "true" : "false") +
                                      ": use \"zero_optimization\": {\"stage\": " + (zero->get<bool>() ? "1" : "0") + "}");
    source = &rewritten;
  }
  const config_detail::AutoValues autos(*source);
  if (autos.hf_mode()) {
    if (source == &input) rewritten = input, source = &rewritten;
    autos.fill_absent_batch_keys(rewritten);
  }
  config_detail::ReadContext context{config.warnings_, autos, config.auto_keys_, config.given_keys_};
  Reader top(*source, "", context);
  top.field("train_batch_size", config.given_train_batch_size_, config_detail::positive());
  top.field("train_micro_batch_size_per_gpu", config.given_micro_batch_size_, config_detail::positive());
  top.field("gradient_accumulation_steps", config.given_accumulation_steps_, config_detail::positive());
  visit(top, config.training_);
  // Unlike the other blocks, an absent optimizer or scheduler is not {}: it means none.
  if (top.given("optimizer")) top.section("optimizer", config.optimizer_); else top.take("optimizer");
  if (top.given("scheduler")) top.section("scheduler", config.scheduler_); else top.take("scheduler");
  top.section("fp16", config.fp16_);
  top.section({"bf16", "bfloat16"}, config.bf16_);
  top.section("zero_optimization", config.zero_);
  top.section("aio", config.aio_);
  top.section("pipeline", config.pipeline_);
  top.section("checkpoint", config.checkpoint_);
  if (const json* block = top.take("dstrain"); block && !block->is_null()) {
    if (!block->is_object()) throw top.invalid("dstrain", "an object", *block);
    config.dstrain_ = *block;
  }
  for (const char* key : kUntypedKeys)
    if (const json* value = top.take(key)) config.untyped_[key] = *value;
  config.resolve_amp_autos(autos);
  top.finish();
  // After the types and ranges, so that a value of the wrong type is named as that first.
  if (!autos.mismatches().empty()) {
    std::string listed;
    for (const std::string& line : autos.mismatches()) listed += "\n" + line;
    throw Error("the config contradicts the Hugging Face Trainer's arguments (the dstrain block's settings, else "
                "TrainingArguments' defaults), as transformers' HfTrainerDeepSpeedConfig checks them:" + listed +
                "\nset these keys to \"auto\", or the dstrain settings to the values written")
        .with_key(autos.first_mismatched_key());
  }
  config.check_cross_section_rules();
  config.check_batch_keys();
  config.log_resolved_autos(autos);
  return config;
}

// The HF Trainer fills amp's "auto" too; the block is kept as written otherwise.
void Config::resolve_amp_autos(const config_detail::AutoValues& autos) {
  const auto amp = untyped_.find("amp");
  if (amp == untyped_.end() || !amp->is_object()) return;
  for (const char* key : {"enabled", "opt_level"}) {
    const auto value = amp->find(key);
    if (value == amp->end() || *value != "auto") continue;
    const std::string path = std::string("amp.") + key;
    auto_keys_.insert(path);
    *value = *autos.value_for(path);
  }
}

// One line per "auto" with the value it became, e.g. `config: optimizer.params.lr "auto" -> 0.0001
// (dstrain.learning_rate)`; the batch keys the batch rule derives are logged by resolve_batch.
void Config::log_resolved_autos(const config_detail::AutoValues& autos) const {
  if (autos.hf_mode()) log::info("config: Hugging Face's mode, with TrainingArguments ", autos.arguments_text());
  const json effective = to_json();
  for (const std::string& path : auto_keys_) {
    const json* value = autos.value_for(path);
    const bool batch_rule = !value && (path == "train_batch_size" || path == "train_micro_batch_size_per_gpu" ||
                                       path == "gradient_accumulation_steps");
    if (batch_rule) continue;
    if (path == "pipeline.stages") {
      log::info("config: pipeline.stages \"auto\" -> 1 (dstrain chooses no stage count: every rank holds the whole "
                "model, data parallel; set pipeline.stages to split it)");
      continue;
    }
    std::string pointer_text = "/" + path;
    std::replace(pointer_text.begin(), pointer_text.end(), '.', '/');
    const json::json_pointer pointer(pointer_text);
    log::info("config: ", path, " \"auto\" -> ", effective.contains(pointer) ? effective.at(pointer).dump() : "unset",
              " (", autos.source_of(path), ")");
  }
}

bool Config::is_auto(const std::string& path) const { return auto_keys_.count(path) > 0; }
bool Config::given(const std::string& path) const { return given_keys_.count(path) > 0; }

bool Config::dstrain_flag(const std::string& key, bool fallback) const {
  const auto it = dstrain_.find(key);
  if (it == dstrain_.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    throw Error("dstrain." + key + " must be true or false, not " + it->dump()).with_key("dstrain." + key);
  return it->get<bool>();
}

void Config::check_cross_section_rules() const {
  if (fp16_.enabled && bf16_.enabled)
    throw Error("fp16 and bf16 cannot both be enabled, got fp16.enabled true and bf16.enabled true")
        .with_key("bf16.enabled");
  auto needs_zero = [&](bool enabled, const char* key) {
    if (enabled && zero_.stage == 0)
      throw Error("needs zero_optimization.stage 1, 2 or 3, got stage 0").with_key(key);
  };
  needs_zero(fp16_.fp16_master_weights_and_grads, "fp16.fp16_master_weights_and_grads");
  needs_zero(bf16_.bf16_master_weights_and_grads, "bf16.bf16_master_weights_and_grads");
  needs_zero(bf16_.bf16_optimizer_states, "bf16.bf16_optimizer_states");
  if (bf16_.bf16_optimizer_states && !bf16_.bf16_master_weights_and_grads)
    throw Error("needs bf16.bf16_master_weights_and_grads true, got false").with_key("bf16.bf16_optimizer_states");
  const OptimizerType type = optimizer_.type;
  const bool onebit = is_onebit(type);
  // The 1-bit family compresses every rank's whole momentum (or gradient): stages 1-2 shard the rest
  // of its state, stage 3 would have no whole gradient to compress (docs/optimizers.md).
  if (onebit && zero_.stage == 3)
    throw Error(std::string(to_string(type)) + " is not supported with ZeRO stage 3 (its exchange needs each rank's "
                "whole gradients, which stage 3 exists not to hold); use stage 0, 1 or 2")
        .with_key("zero_optimization.stage");
  if (onebit && zero_.stage >= 1 && pipeline_.stages && *pipeline_.stages > 1)
    throw Error(std::string(to_string(type)) + " at ZeRO stage " + std::to_string(zero_.stage) +
                " leaves each rank its whole local gradients, where the pipeline engine sums tied weights' and "
                "clips by reduced chunks; with pipeline stages use zero_optimization.stage 0")
        .with_key("zero_optimization.stage");
  if (onebit && zero_.stage >= 1 && zero_.offload_optimizer.device == OffloadDevice::Nvme)
    throw Error(std::string(to_string(type)) + " exchanges its whole momentum at every step, which suits no "
                "optimizer state on NVMe; offload_optimizer.device \"nvme\" needs Adam, AdamW or SGD")
        .with_key("zero_optimization.offload_optimizer.device");
  // At stage 0 offload_optimizer does not act, so its device does not matter there.
  if (zero_.offload_optimizer.device == OffloadDevice::Nvme && zero_.stage >= 1 && type == OptimizerType::Lamb)
    throw Error("offload_optimizer.device \"nvme\" steps sub-groups of the shard, which suits Adam, AdamW and SGD; "
                "Lamb's trust ratio needs each parameter whole")
        .with_key("zero_optimization.offload_optimizer.device");
}

void Config::check_trainable() const {
  if (optimizer_.type == OptimizerType::None)
    throw Error("no optimizer configured: add an \"optimizer\" block").with_key("optimizer");
  if (zero_.offload_param.device == OffloadDevice::Nvme && zero_.stage != 3)
    throw Error("offload_param.device \"nvme\" swaps ZeRO stage 3's parameter partitions; this is stage " +
                std::to_string(zero_.stage) + ": set zero_optimization.stage to 3")
        .with_key("zero_optimization.offload_param.device");
}

json Config::to_json() const {
  Writer out;
  TrainingConfig training = training_;
  visit(out, training);
  if (optimizer_.type != OptimizerType::None) out.section("optimizer", optimizer_);
  if (scheduler_.type != SchedulerType::None) out.section("scheduler", scheduler_);
  out.section("fp16", fp16_);
  out.section("bf16", bf16_);
  out.section("zero_optimization", zero_);
  out.section("aio", aio_);
  out.section("pipeline", pipeline_);
  out.section("checkpoint", checkpoint_);
  json result = std::move(out.result());
  if (batch_resolved()) {
    result["train_batch_size"] = train_batch_size_;
    result["train_micro_batch_size_per_gpu"] = micro_batch_size_;
    result["gradient_accumulation_steps"] = accumulation_steps_;
  } else {
    if (given_train_batch_size_) result["train_batch_size"] = *given_train_batch_size_;
    if (given_micro_batch_size_) result["train_micro_batch_size_per_gpu"] = *given_micro_batch_size_;
    if (given_accumulation_steps_) result["gradient_accumulation_steps"] = *given_accumulation_steps_;
  }
  for (const auto& item : untyped_.items()) result[item.key()] = item.value();
  // Left for whoever knows the model's hidden size; reading this back keeps them "auto".
  for (const std::string& path : config_detail::kHiddenSizeKeys)
    if (is_auto(path)) result["zero_optimization"][path.substr(path.find('.') + 1)] = "auto";
  result["dstrain"] = dstrain_;
  // Hugging Face's settings are spent: the keys hold the values they gave. Written back, they
  // would be checked against the DeepSpeed defaults written here for the keys a user left out.
  for (const auto& argument : config_detail::training_arguments()) result["dstrain"].erase(argument.name);
  return result;
}

}  // namespace ds
