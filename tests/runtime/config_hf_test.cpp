// Hugging Face's mode against transformers' own rules: the key list of
// HfTrainerDeepSpeedConfig.trainer_config_process / trainer_config_finalize (each fill_match and
// fill_only call, with the TrainingArguments field it reads), TrainingArguments' defaults
// (training_args.py) and the batch formula train_batch_size = world * per_device * accumulation,
// transcribed here independently of runtime/src/config_auto.cpp.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/error.hpp"

using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// One fill_match (or fill_only) call of transformers' integrations/deepspeed.py.
struct HfKey {
  std::string ds_key;       // HF's ds_key_long
  std::string hf_key;       // the name HF prints in a mismatch
  json settings;            // the dstrain settings (TrainingArguments fields) for this key
  json from_settings;       // the value HF fills in from them
  json from_defaults;       // the value HF fills in from TrainingArguments' defaults
  json contradicting;       // an explicit value that contradicts the settings
  bool must_match = true;   // false: fill_only
};

const std::vector<HfKey>& hf_keys() {
  static const std::vector<HfKey> keys = {
      {"train_micro_batch_size_per_gpu", "per_device_train_batch_size", {{"per_device_train_batch_size", 4}}, 4, 8, 3},
      {"gradient_accumulation_steps", "gradient_accumulation_steps", {{"gradient_accumulation_steps", 4}}, 4, 1, 3},
      {"gradient_clipping", "max_grad_norm", {{"max_grad_norm", 0.5}}, 0.5, 1.0, 0.25},
      {"optimizer.params.lr", "learning_rate", {{"learning_rate", 3e-4}}, 3e-4, 5e-5, 1e-4},
      {"optimizer.params.betas", "adam_beta1+adam_beta2", {{"adam_beta1", 0.8}, {"adam_beta2", 0.95}},
       {0.8, 0.95}, {0.9, 0.999}, {0.9, 0.95}},
      {"optimizer.params.eps", "adam_epsilon", {{"adam_epsilon", 1e-6}}, 1e-6, 1e-8, 1e-7},
      {"optimizer.params.weight_decay", "weight_decay", {{"weight_decay", 0.1}}, 0.1, 0.0, 0.01},
      {"scheduler.params.warmup_min_lr", "", json::object(), 0, 0, 0.5, false},
      {"scheduler.params.warmup_max_lr", "learning_rate", {{"learning_rate", 3e-4}}, 3e-4, 5e-5, 1e-3},
      {"fp16.enabled", "fp16|fp16_full_eval+fp16_backend(amp)", {{"fp16", true}}, true, false, false},
      {"amp.enabled", "fp16+fp16_backend(apex)", json::object(), false, false, true},
      {"amp.opt_level", "fp16_opt_level", {{"fp16_opt_level", "O2"}}, "O2", "O1", "O3"},
      {"bf16.enabled", "bf16|bf16_full_eval", {{"bf16", true}}, true, false, false},
      // trainer_config_finalize: num_training_steps is dstrain.steps; get_warmup_steps.
      {"scheduler.params.total_num_steps", "num_training_steps (calculated)", {{"steps", 40}}, 40, nullptr, 30},
      {"scheduler.params.warmup_num_steps", "warmup_steps", {{"warmup_steps", 6}}, 6, 0, 5},
  };
  return keys;
}

// A config with every HF key present, "auto" at `key` only, so that the mode is on.
json base_config() {
  return {
      {"train_batch_size", "auto"},
      {"optimizer", {{"type", "AdamW"}, {"params", json::object()}}},
      {"scheduler", {{"type", "WarmupDecayLR"}, {"params", {{"total_num_steps", 40}}}}},
      {"fp16", json::object()},
      {"bf16", json::object()},
      {"amp", json::object()},
      {"dstrain", {{"steps", 40}}},
  };
}

json at(const json& config, const std::string& dotted) {
  std::string pointer = "/" + dotted;
  for (char& c : pointer)
    if (c == '.') c = '/';
  return config.at(json::json_pointer(pointer));
}

void put(json& config, const std::string& dotted, const json& value) {
  std::string pointer = "/" + dotted;
  for (char& c : pointer)
    if (c == '.') c = '/';
  config[json::json_pointer(pointer)] = value;
}

// The value the config holds at `key` once read (and the batch resolved for 2 ranks).
json effective(const json& config, const std::string& key) {
  ds::Config read = ds::Config::from_json(config);
  read.resolve_batch(2);
  json written = read.to_json();
  written["amp"] = read.untyped().at("amp");
  return at(written, key);
}

bool same(const json& a, const json& b) {
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!same(a[i], b[i])) return false;
    return true;
  }
  if (a.is_boolean() || b.is_boolean() || a.is_string() || b.is_string()) return a == b;
  return a.get<double>() == Approx(b.get<double>()).epsilon(1e-12);
}

template <class F>
ds::Error thrown_by(F&& action) {
  try {
    action();
  } catch (const ds::Error& e) {
    return e;
  }
  FAIL("no ds::Error thrown");
  return ds::Error("unreachable");
}

}  // namespace

TEST_CASE("HF mode: every key of HF's list is filled from its argument, else TrainingArguments' default",
          "[config][hf]") {
  for (const HfKey& key : hf_keys()) {
    INFO(key.ds_key);
    json config = base_config();
    put(config, key.ds_key, "auto");
    json with_settings = config;
    with_settings["dstrain"].update(key.settings);
    CHECK(same(effective(with_settings, key.ds_key), key.from_settings));
    if (!key.from_defaults.is_null()) CHECK(same(effective(config, key.ds_key), key.from_defaults));
  }
}

TEST_CASE("HF mode: an explicit value is checked against the argument as fill_match checks it", "[config][hf]") {
  for (const HfKey& key : hf_keys()) {
    INFO(key.ds_key);
    json config = base_config();
    config["dstrain"].update(key.settings);
    put(config, key.ds_key, key.from_settings);
    CHECK_NOTHROW(ds::Config::from_json(config));
    put(config, key.ds_key, key.contradicting);
    if (!key.must_match) {
      CHECK(same(effective(config, key.ds_key), key.contradicting));  // fill_only: "auto" only
      continue;
    }
    const ds::Error error = thrown_by([&] { ds::Config::from_json(config); });
    CHECK(error.key() == key.ds_key);
    CHECK_THAT(error.message(), Contains("- ds " + key.ds_key + "=") && Contains("vs hf " + key.hf_key + "="));
  }
}

TEST_CASE("HF mode: the batch is world x per_device_train_batch_size x gradient_accumulation_steps", "[config][hf]") {
  // The reported case: both batch keys "auto", no accumulation key, 2 ranks.
  json config = {{"train_batch_size", "auto"},
                 {"train_micro_batch_size_per_gpu", "auto"},
                 {"dstrain", {{"per_device_train_batch_size", 4}, {"gradient_accumulation_steps", 4}}}};
  ds::Config read = ds::Config::from_json(config);
  read.resolve_batch(2);
  CHECK(read.train_batch_size() == 2 * 4 * 4);
  CHECK(read.train_micro_batch_size_per_gpu() == 4);
  CHECK(read.gradient_accumulation_steps() == 4);

  // Nothing set: TrainingArguments' per-device batch 8 and accumulation 1.
  read = ds::Config::from_json({{"train_batch_size", "auto"}});
  read.resolve_batch(3);
  CHECK(read.train_batch_size() == 3 * 8 * 1);

  // An explicit train_batch_size: one no world size gives is listed when read; one this world does
  // not give is refused at resolve_batch.
  config = {{"train_batch_size", 12}, {"dstrain", {{"per_device_train_batch_size", 4}, {"gradient_accumulation_steps", 2}}}};
  ds::Error error = thrown_by([&] { ds::Config::from_json(config); });
  CHECK(error.key() == std::string("train_batch_size"));
  CHECK_THAT(error.message(), Contains("- ds train_batch_size=12 vs hf train_batch_size (calculated)"));
  config["train_batch_size"] = 24;
  read = ds::Config::from_json(config);
  error = thrown_by([&] { read.resolve_batch(2); });
  CHECK(error.key() == std::string("train_batch_size"));
  config["train_batch_size"] = 16;
  read = ds::Config::from_json(config);
  read.resolve_batch(2);
  CHECK(read.gradient_accumulation_steps() == 2);
}

TEST_CASE("HF mode: every contradiction is listed in one error", "[config][hf]") {
  // The reported case: train_batch_size 8 and lr 1e-4 against learning_rate 5e-5, micro 2 x accumulation 8.
  const json config = {{"train_batch_size", 8},
                       {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-4}}}}},
                       {"gradient_clipping", 1.0},
                       {"dstrain",
                        {{"learning_rate", 5e-5}, {"gradient_accumulation_steps", 8}, {"per_device_train_batch_size", 2}}}};
  const ds::Error error = thrown_by([&] { ds::Config::from_json(config); });
  CHECK_THAT(error.message(), Contains("- ds train_batch_size=8 vs hf train_batch_size (calculated)") &&
                                  Contains("- ds optimizer.params.lr=0.0001 vs hf learning_rate=5e-05") &&
                                  !Contains("gradient_clipping"));
}

TEST_CASE("HF mode: an \"auto\" nothing decides is an error naming the key", "[config][hf]") {
  json config = base_config();
  config["dstrain"].erase("steps");
  config["scheduler"]["params"]["total_num_steps"] = "auto";
  CHECK(thrown_by([&] { ds::Config::from_json(config); }).key() == std::string("scheduler.params.total_num_steps"));
  config["scheduler"]["params"] = {{"total_num_steps", 10}, {"warmup_num_steps", "auto"}};
  config["dstrain"]["warmup_ratio"] = 0.1;
  CHECK(thrown_by([&] { ds::Config::from_json(config); }).key() == std::string("scheduler.params.warmup_num_steps"));
  config["dstrain"]["steps"] = 10;
  CHECK_NOTHROW(ds::Config::from_json(config));
}

TEST_CASE("A plain DeepSpeed config is read as written: no TrainingArguments defaults, no checks", "[config][hf]") {
  json config = {{"train_batch_size", 8},
                 {"gradient_clipping", 0.5},
                 {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-4}, {"weight_decay", 0.3}}}}},
                 {"fp16", {{"enabled", false}}},
                 {"zero_optimization", {{"stage", 2}, {"reduce_bucket_size", "auto"}}},
                 {"pipeline", {{"stages", "auto"}}},
                 {"dstrain", {{"steps", 5}}}};
  ds::Config read = ds::Config::from_json(config);
  read.resolve_batch(2);
  CHECK(read.optimizer().lr == 1e-4);
  CHECK(read.training().gradient_clipping == 0.5);
  CHECK(read.train_micro_batch_size_per_gpu() == 4);
  CHECK(read.gradient_accumulation_steps() == 1);
}

TEST_CASE("HF mode: a setting of the wrong type names the setting; the written config reads back the same",
          "[config][hf]") {
  for (const char* name : {"learning_rate", "per_device_train_batch_size", "fp16", "fp16_opt_level"}) {
    INFO(name);
    json config = {{"train_batch_size", "auto"}, {"dstrain", {{name, json::array()}}}};
    CHECK(thrown_by([&] { ds::Config::from_json(config); }).key() == "dstrain." + std::string(name));
  }
  json config = base_config();
  config["optimizer"]["params"]["lr"] = "auto";
  config["scheduler"]["params"]["warmup_num_steps"] = "auto";
  config["dstrain"]["learning_rate"] = 2e-4;
  ds::Config read = ds::Config::from_json(config);
  read.resolve_batch(2);
  ds::Config again = ds::Config::from_json(read.to_json());
  again.resolve_batch(2);
  CHECK(again.to_json() == read.to_json());
  for (const std::string& warning : again.warnings()) FAIL_CHECK(warning);
}
