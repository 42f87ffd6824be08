#include "config_fields.hpp"

#include "config_auto.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "dstrain/runtime/json_excerpt.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds::config_detail {
namespace {

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

std::string format_number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// JSON writes 5e8 as a float; DeepSpeed accepts it for integer keys, and so do we when it is whole.
bool to_integer(const json& value, int64_t& out) {
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    out = static_cast<int64_t>(value.get<uint64_t>());
    return true;
  }
  if (value.is_number_integer()) {
    out = value.get<int64_t>();
    return true;
  }
  if (value.is_number_float()) {
    double number = value.get<double>();
    // 2^63 itself is out of range, hence the strict comparison.
    if (!std::isfinite(number) || number != std::floor(number) || std::fabs(number) >= 9.2233720368547758e18) return false;
    out = static_cast<int64_t>(number);
    return true;
  }
  return false;
}

}  // namespace

bool Range::contains(double value) const {
  bool above = min_open ? value > min : value >= min;
  bool below = max_open ? value < max : value <= max;
  return above && below;
}

std::string Range::describe() const {
  bool has_min = std::isfinite(min), has_max = std::isfinite(max);
  if (has_min && has_max)
    return " in " + std::string(min_open ? "(" : "[") + format_number(min) + ", " + format_number(max) +
           (max_open ? ")" : "]");
  if (has_min) return (min_open ? " > " : " >= ") + format_number(min);
  if (has_max) return (max_open ? " < " : " <= ") + format_number(max);
  return "";
}

Range at_least(double min) { return Range{min}; }
Range positive() { return Range{0.0, std::numeric_limits<double>::infinity(), true}; }
Range between(double min, double max) { return Range{min, max}; }
Range fraction() { return Range{0.0, 1.0, false, true}; }

void record_warning(std::vector<std::string>& warnings, std::string message) {
  log::warn("config: ", message);
  warnings.push_back(std::move(message));
}

std::pair<const char*, const json*> Reader::find(const Key& key) const {
  auto name = object_.find(key.name);
  auto alias = key.alias ? object_.find(key.alias) : object_.end();
  if (name != object_.end() && alias != object_.end() && *name != *alias)
    throw Error(std::string("also given as '") + key.alias + "' with a different value " + json_excerpt(*alias) +
                ", got " + json_excerpt(*name))
        .with_key(path_of(key.name));
  if (name != object_.end()) return {key.name, &*name};
  if (alias != object_.end()) return {key.alias, &*alias};
  return {key.name, nullptr};
}

void Reader::mark_taken(const Key& key) {
  taken_.insert(key.name);
  if (key.alias) taken_.insert(key.alias);
}

const json* Reader::value_of(const Key& key) {
  mark_taken(key);
  const json* value = find(key).second;
  if (!value || value->is_null()) return nullptr;
  const std::string path = path_of(key.name);
  if (*value == "auto") {
    context_.auto_keys.insert(path);
    return context_.autos.value_for(path);
  }
  context_.given_keys.insert(path);
  return value;
}

const json* Reader::take(const Key& key) {
  mark_taken(key);
  const json* value = find(key).second;
  if (value && !value->is_null()) context_.given_keys.insert(path_of(key.name));
  return value;
}

bool Reader::given(const Key& key) const {
  const json* value = find(key).second;
  if (!value || value->is_null()) return false;
  return *value != "auto" || context_.autos.value_for(path_of(key.name)) != nullptr;
}

void Reader::require(const Key& key, const std::string& by) {
  if (!find(key).second) throw error(key, "required by " + by);
}

void Reader::field(const Key& key, bool& value) {
  const json* given = value_of(key);
  if (!given) return;
  if (!given->is_boolean()) throw invalid(key, "true or false", *given);
  value = given->get<bool>();
}

void Reader::field(const Key& key, int64_t& value, Range range) {
  const json* given = value_of(key);
  if (!given) return;
  int64_t read = 0;
  if (!to_integer(*given, read) || !range.contains(static_cast<double>(read)))
    throw invalid(key, "an integer" + range.describe(), *given);
  value = read;
}

void Reader::field(const Key& key, int& value, Range range) {
  int64_t read = value;
  field(key, read, range);
  if (read < std::numeric_limits<int>::min() || read > std::numeric_limits<int>::max())
    throw invalid(key, "a 32-bit integer" + range.describe(), *find(key).second);
  value = static_cast<int>(read);
}

void Reader::field(const Key& key, double& value, Range range) {
  const json* given = value_of(key);
  if (!given) return;
  if (!given->is_number() || !std::isfinite(given->get<double>()) || !range.contains(given->get<double>()))
    throw invalid(key, "a number" + range.describe(), *given);
  value = given->get<double>();
}

void Reader::field(const Key& key, std::string& value) {
  const json* given = value_of(key);
  if (!given) return;
  if (!given->is_string()) throw invalid(key, "a string", *given);
  value = given->get<std::string>();
}

void Reader::field(const Key& key, std::string& value, const std::vector<std::string>& choices) {
  const json* given = value_of(key);
  if (!given) return;
  std::string listed;
  for (const auto& choice : choices) {
    listed += (listed.empty() ? "" : ", ") + choice;
    if (given->is_string() && lowercase(given->get<std::string>()) == lowercase(choice)) {
      value = choice;
      return;
    }
  }
  throw invalid(key, "one of " + listed, *given);
}

void Reader::field(const Key& key, std::array<double, 2>& value, Range range) {
  const json* given = value_of(key);
  if (!given) return;
  bool valid = given->is_array() && given->size() == 2;
  for (size_t i = 0; valid && i < 2; ++i)
    valid = (*given)[i].is_number() && range.contains((*given)[i].get<double>());
  if (!valid) throw invalid(key, "two numbers" + range.describe(), *given);
  value = {(*given)[0].get<double>(), (*given)[1].get<double>()};
}

// The blocks kept as written (zeropp_loco_param, zenflow, leaf_module, checkpoint's parallel_write
// and writer) are objects in DeepSpeed's models too.
void Reader::field(const Key& key, json& value) {
  const json* given = take(key);
  if (!given || given->is_null()) return;
  if (!given->is_object()) throw invalid(key, "an object", *given);
  value = *given;
}

namespace {

// The blocks DeepSpeed (v0.19.5) reads into pydantic models that forbid extra keys
// (DeepSpeedZeroConfig, DeepSpeedZeroOffloadParamConfig, DeepSpeedZeroOffloadOptimizerConfig,
// DeepSpeedFP16Config, DeepSpeedBF16Config) or passes as keyword arguments to a constructor that
// takes no others (the optimizer's and the scheduler's params): an unknown key is an error there,
// as in DeepSpeed. DeepSpeed reads the other blocks with dict.get and ignores what it does not
// know; there an unknown key is a warning.
bool forbids_unknown_keys(const std::string& path) {
  static const char* const kForbidding[] = {
      "zero_optimization", "zero_optimization.offload_param", "zero_optimization.offload_optimizer",
      "fp16",              "bf16",                            "bfloat16",
      "optimizer.params",  "scheduler.params",
  };
  return std::find(std::begin(kForbidding), std::end(kForbidding), path) != std::end(kForbidding);
}

}  // namespace

void Reader::finish() const {
  for (const auto& item : object_.items()) {
    if (taken_.count(item.key())) continue;
    if (forbids_unknown_keys(path_))
      throw Error("unknown key; DeepSpeed refuses it too ('" + path_ + "' takes only the keys docs/config.md lists), got " +
                  json_excerpt(item.value()))
          .with_key(path_of(item.key()));
    warn("unknown key '" + path_of(item.key()) + "'");
  }
}

std::string Reader::path_of(const std::string& name) const { return path_.empty() ? name : path_ + "." + name; }

Error Reader::error(const Key& key, const std::string& message) const {
  return Error(message).with_key(path_of(used_name(key)));
}

Error Reader::invalid(const Key& key, const std::string& expected, const json& got) const {
  return error(key, "expected " + expected + ", got " + json_excerpt(got));
}

}  // namespace ds::config_detail
