// Every key of docs/config.md's tables given each JSON type (null, true, 7, 2.5, "x", [1], {"x": 1})
// and read as the trainer reads a config before it starts (Config, the dstrain block, placement,
// model, data, monitors, memory budget, batch): the outcome is accepted or a ds::Error naming the
// key, never another exception; and a type the table's type column (or, in the optimizer and
// scheduler tables, the default) does not allow is always a ds::Error naming the key.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dstrain/comm/comms_logger.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/engine/memory_budget.hpp"
#include "dstrain/engine/profiler/flops_profiler_settings.hpp"
#include "dstrain/monitor/monitor_set.hpp"
#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/error.hpp"
#include "gpu_memory_limit.hpp"
#include "model_choice.hpp"
#include "placement.hpp"
#include "trainer_block.hpp"

using nlohmann::json;

namespace {

// One key of the docs' tables: its dotted path, the JSON types it takes ("" when the table does
// not say), and for optimizer and scheduler params the type of block it belongs to.
struct DocumentedKey {
  std::string path;
  std::set<std::string> types;
  std::string optimizer, scheduler;
};

std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::string cell;
  bool in_code = false;
  for (size_t i = 1; i < row.size(); ++i) {
    const char c = row[i];
    if (c == '`') in_code = !in_code;
    if (c == '|' && !in_code) {
      out.push_back(cell);
      cell.clear();
    } else {
      cell += c;
    }
  }
  return out;
}

// The backticked names of a first cell before any "(": "`a`, `b` (also `c`)" -> a, b.
std::vector<std::string> names(const std::string& cell) {
  std::vector<std::string> out;
  const std::string head = cell.substr(0, cell.find('('));
  const std::regex code("`([A-Za-z0-9_.]+)`");
  for (std::sregex_iterator it(head.begin(), head.end(), code), end; it != end; ++it) out.push_back((*it)[1]);
  return out;
}

std::set<std::string> types_of(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::set<std::string> types;
  if (text.find("any") != std::string::npos) return {"null", "boolean", "integer", "float", "string", "array", "object"};
  if (text.find("bool") != std::string::npos) types.insert("boolean");
  if (text.find("int") != std::string::npos) types.insert("integer");
  if (text.find("float") != std::string::npos || text.find("number") != std::string::npos)
    types.insert({"integer", "float"});
  if (text.find("string") != std::string::npos || text.find("auto") != std::string::npos) types.insert("string");
  if (text.find("object") != std::string::npos) types.insert("object");
  if (text.find("list") != std::string::npos) types.insert("array");
  return types;
}

// A default as the tables write it: true/false, [..], "text", 1e-3, 2000.
std::set<std::string> types_of_default(std::string text) {
  text = std::regex_replace(text, std::regex("^\\s+|\\s+$"), "");
  if (text == "true" || text == "false") return {"boolean"};
  if (std::regex_match(text, std::regex("\\[.*\\]"))) return {"array"};
  if (std::regex_match(text, std::regex("`\".*\"`"))) return {"string"};
  if (std::regex_match(text, std::regex("-?[0-9]+"))) return {"integer"};
  if (std::regex_match(text, std::regex("-?[0-9.]+(e-?[0-9]+)?"))) return {"integer", "float"};
  return {};
}

std::string first_of(const std::string& list, const std::vector<std::string>& all) {
  if (list.find("all") != std::string::npos) return all.front();
  if (list.find("1-bit") != std::string::npos) return "OneBitAdam";
  for (const std::string& name : all)
    if (list.find(name) != std::string::npos) return name;
  return all.front();
}

std::vector<DocumentedKey> documented_keys() {
  std::ifstream in(DSTRAIN_SOURCE_DIR "/docs/config.md");
  REQUIRE(in);
  const std::vector<std::string> optimizers = {"Adam", "AdamW", "SGD", "OneBitAdam", "Lamb", "OneBitLamb", "ZeroOneAdam"};
  const std::vector<std::string> schedulers = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"};
  std::vector<DocumentedKey> keys;
  std::string line, section, prefix;
  std::vector<std::string> header;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0 || line.rfind("### ", 0) == 0) {
      const std::vector<std::string> heading = names(line);
      section = heading.empty() ? line : heading.front();
      const bool sub = line.rfind("### ", 0) == 0;
      prefix = heading.empty() ? "" : sub ? "zero_optimization." + section + "." : section + ".";
      if (section == "optimizer" || section == "scheduler") prefix = section + ".params.";
      header.clear();
      continue;
    }
    if (line.rfind("| ", 0) != 0 || section.find("auto") != std::string::npos) continue;
    const std::vector<std::string> row = cells(line);
    if (header.empty()) {
      header = row;
      continue;
    }
    if (line.rfind("| ---", 0) == 0) continue;
    auto column = [&](const std::string& name) -> std::string {
      for (size_t i = 0; i < header.size() && i < row.size(); ++i)
        if (header[i].find(name) != std::string::npos) return row[i];
      return "";
    };
    for (const std::string& name : names(row[0])) {
      DocumentedKey key;
      key.path = (name.find('.') != std::string::npos && prefix.empty() ? "" : prefix) + name;
      if (header.size() > 1 && header[1].find("types") != std::string::npos) {
        key.types = types_of_default(column("default"));
        (section == "optimizer" ? key.optimizer : key.scheduler) =
            first_of(row[1], section == "optimizer" ? optimizers : schedulers);
      } else {
        key.types = types_of(column("type"));
      }
      keys.push_back(key);
    }
  }
  return keys;
}

void put(json& config, const std::string& path, const json& value) {
  json* node = &config;
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    node = &(*node)[path.substr(start, dot == std::string::npos ? std::string::npos : dot - start)];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  *node = value;
}

json base_config(const DocumentedKey& key) {
  json config = {
      {"train_micro_batch_size_per_gpu", 2},
      {"optimizer", {{"type", key.optimizer.empty() ? "AdamW" : key.optimizer}, {"params", {{"lr", 1e-3}}}}},
      {"dstrain",
       {{"model", {{"n_layer", 1}, {"n_head", 1}, {"n_embd", 8}, {"block_size", 8}, {"vocab_size", 16}}},
        {"data", {{"type", "synthetic"}}}}},
  };
  // A TrainingArguments setting turns on Hugging Face's mode, where explicit batch and lr values
  // are checked against the settings: here those keys are "auto", so that only the setting speaks.
  if (key.path.rfind("dstrain.", 0) == 0 && ds::Config::is_auto_setting(key.path.substr(8))) {
    config["train_micro_batch_size_per_gpu"] = "auto";
    config["optimizer"]["params"]["lr"] = "auto";
  }
  if (!key.scheduler.empty()) {
    json params = json::object();
    if (key.scheduler == "OneCycle") params = {{"cycle_min_lr", 1e-4}, {"cycle_max_lr", 1e-3}};
    if (key.scheduler == "WarmupDecayLR" || key.scheduler == "WarmupCosineLR") params = {{"total_num_steps", 10}};
    config["scheduler"] = {{"type", key.scheduler}, {"params", params}};
  }
  return config;
}

// Everything the trainer reads from a config before it starts communicating (train_command.cpp).
void read_as_trainer(json config) {
  ds::app::apply_trainer_defaults(config);
  ds::Config read = ds::Config::from_json(config);
  const json& block = read.dstrain_block();
  const ds::app::TrainerBlock trainer = ds::app::read_trainer_block(block);
  const ds::app::Placement placement = ds::app::placement_from(block);
  ds::app::apply_gpu_memory_limit(block, placement.device);
  ds::comm::CommsLoggerSettings::from_json(read.untyped().value("comms_logger", json()));
  ds::profiler::FlopsProfilerSettings::from_json(read.untyped().value("flops_profiler", json()));
  ds::monitor::MonitorSet monitors(read.untyped(), /*rank=*/1);
  const ds::app::ModelChoice choice = ds::app::choose_model(trainer.model);
  ds::data::make_token_source(trainer.data, choice.vocab_size(), choice.max_sequence_length());
  ds::data::make_validation_source(trainer.data, choice.vocab_size(), choice.max_sequence_length());
  ds::memory_budget(read, 1);
  read.dstrain_flag("gather_in_forward", false);
  read.dstrain_flag("step_in_backward", false);
  read.check_trainable();
  read.resolve_batch(1);
}

std::string type_of(const json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "float";
  return value.type_name();
}

}  // namespace

TEST_CASE("every documented key given every JSON type: accepted, or a ds::Error naming the key", "[config][types]") {
  std::vector<DocumentedKey> keys = documented_keys();
  REQUIRE(keys.size() > 150);
  // Blocks and settings the tables name only in prose.
  for (const char* path : {"optimizer", "optimizer.type", "optimizer.params", "scheduler", "scheduler.type",
                           "zero_optimization", "fp16", "bf16", "aio", "pipeline", "checkpoint", "dstrain.steps",
                           "dstrain.device", "dstrain.backend", "dstrain.data", "dstrain.data.type",
                           "dstrain.data.path", "dstrain.learning_rate", "dstrain.per_device_train_batch_size",
                           "dstrain.gradient_accumulation_steps", "dstrain.fp16", "dstrain.fp16_opt_level",
                           "dstrain.adam_beta1", "dstrain.warmup_ratio", "dstrain.max_grad_norm"})
    keys.push_back({path, {}, "", ""});
  const std::vector<json> values = {nullptr, true, 7, 2.5, "x", json::array({1}), json{{"x", 1}}};
  int refused = 0;
  for (const DocumentedKey& key : keys) {
    for (const json& value : values) {
      json config = base_config(key);
      put(config, key.path, value);
      INFO(key.path << " = " << value.dump());
      const bool allowed = value.is_null() || key.types.empty() || key.types.count(type_of(value)) > 0;
      try {
        read_as_trainer(config);
        CHECK(allowed);
      } catch (const ds::Error& e) {
        ++refused;
        INFO(e.what());
        // null is "not given": the error may be about what that leaves missing.
        if (!value.is_null()) CHECK(((e.key() && e.key()->rfind(key.path, 0) == 0) ||
                                     std::string(e.what()).find("'" + key.path) != std::string::npos));
      } catch (const std::exception& e) {
        FAIL_CHECK("not a ds::Error: " << e.what());
      }
    }
  }
  CHECK(refused > 0);
}
