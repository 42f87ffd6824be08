#include "dstrain/engine/profiler/flops_profiler_settings.hpp"

#include <nlohmann/json.hpp>

#include <set>

#include "dstrain/runtime/error.hpp"

namespace ds::profiler {
namespace {

std::string key_of(const char* key) { return std::string("flops_profiler.") + key; }

const nlohmann::json* value_of(const nlohmann::json& block, const char* key) {
  return block.contains(key) && !block[key].is_null() ? &block[key] : nullptr;
}

bool read_bool(const nlohmann::json& block, const char* key, bool fallback) {
  const nlohmann::json* value = value_of(block, key);
  if (!value) return fallback;
  if (!value->is_boolean()) throw Error("must be true or false, got " + value->dump()).with_key(key_of(key));
  return value->get<bool>();
}

int64_t read_int(const nlohmann::json& block, const char* key, int64_t fallback, int64_t minimum) {
  const nlohmann::json* value = value_of(block, key);
  if (!value) return fallback;
  if (!value->is_number_integer() || value->get<int64_t>() < minimum)
    throw Error("must be an integer >= " + std::to_string(minimum) + ", got " + value->dump()).with_key(key_of(key));
  return value->get<int64_t>();
}

}  // namespace

FlopsProfilerSettings FlopsProfilerSettings::from_json(const nlohmann::json& block) {
  FlopsProfilerSettings settings;
  if (block.is_null()) return settings;
  if (!block.is_object()) throw Error("must be an object, got " + block.dump()).with_key("flops_profiler");
  static const std::set<std::string> known = {"enabled",  "profile_step", "module_depth",        "top_modules",
                                              "detailed", "output_file",  "recompute_fwd_factor"};
  for (const auto& item : block.items())
    if (!known.count(item.key()))
      throw Error("unknown key (known: enabled, profile_step, module_depth, top_modules, detailed, output_file, "
                  "recompute_fwd_factor)")
          .with_key(key_of(item.key().c_str()));
  settings.enabled = read_bool(block, "enabled", settings.enabled);
  settings.profile_step = read_int(block, "profile_step", settings.profile_step, 0);
  settings.module_depth = static_cast<int>(read_int(block, "module_depth", settings.module_depth, -1));
  settings.top_modules = static_cast<int>(read_int(block, "top_modules", settings.top_modules, 1));
  settings.detailed = read_bool(block, "detailed", settings.detailed);
  if (const nlohmann::json* file = value_of(block, "output_file")) {
    if (!file->is_string()) throw Error("must be a path or null, got " + file->dump()).with_key(key_of("output_file"));
    settings.output_file = file->get<std::string>();
  }
  if (const nlohmann::json* factor = value_of(block, "recompute_fwd_factor")) {
    if (!factor->is_number() || factor->get<double>() < 0)
      throw Error("must be a number >= 0, got " + factor->dump()).with_key(key_of("recompute_fwd_factor"));
    settings.recompute_fwd_factor = factor->get<double>();
  }
  return settings;
}

}  // namespace ds::profiler
