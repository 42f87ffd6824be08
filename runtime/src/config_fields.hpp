// The two walks over a config block. Each section lists its keys once, in a visit(visitor, section)
// function; Reader runs it to parse and check JSON, Writer runs it to produce the effective config,
// so the keys, defaults and ranges of both can never disagree. Private to dstrain_runtime.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dstrain/runtime/error.hpp"

namespace ds::config_detail {

using nlohmann::json;

// A key, and the second spelling DeepSpeed also accepts (e.g. "thread_count" for
// "intra_op_parallelism"). Read under either, written under the first.
struct Key {
  Key(const char* name) : name(name) {}  // NOLINT: implicit, so that visits read v.field("stage", ...)
  Key(const char* name, const char* alias) : name(name), alias(alias) {}
  const char* name;
  const char* alias = nullptr;
};

// The accepted interval of a number, integers included.
struct Range {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;
  bool max_open = false;

  bool contains(double value) const;
  std::string describe() const;  // " >= 0", " > 0", " in [0, 1)", or "" when unbounded
};
Range at_least(double min);
Range positive();
Range between(double min, double max);  // closed
Range fraction();                       // [0, 1)

// The names an enum is written as, in the order it is read.
template <class E>
using EnumNames = std::vector<std::pair<E, const char*>>;

// Logs the warning and keeps it.
void record_warning(std::vector<std::string>& warnings, std::string message);

class AutoValues;

// What the Readers of one from_json share: where warnings go, what "auto" stands for, and which
// keys (full path, first spelling) the config wrote as "auto" or set to a value.
struct ReadContext {
  std::vector<std::string>& warnings;
  const AutoValues& autos;
  std::set<std::string>& auto_keys;
  std::set<std::string>& given_keys;
};

class Reader {
 public:
  static constexpr bool kReading = true;

  Reader(const json& object, std::string path, ReadContext& context)
      : object_(object), path_(std::move(path)), context_(context) {}

  void field(const Key& key, bool& value);
  void field(const Key& key, int& value, Range range = {});
  void field(const Key& key, int64_t& value, Range range = {});
  void field(const Key& key, double& value, Range range = {});
  void field(const Key& key, std::string& value);
  // One of `choices`, compared case-insensitively and stored in the spelling of `choices`.
  void field(const Key& key, std::string& value, const std::vector<std::string>& choices);
  void field(const Key& key, std::array<double, 2>& value, Range range);
  // Any JSON value, kept as written.
  void field(const Key& key, json& value);

  // Stays unset unless given.
  template <class T, class... Checks>
  void field(const Key& key, std::optional<T>& value, const Checks&... checks) {
    if (!given(key)) {
      value_of(key);  // records an "auto" that stays unset
      return;
    }
    T read{};
    field(key, read, checks...);
    value = read;
  }

  template <class E, class = std::enable_if_t<std::is_enum_v<E>>>
  void field(const Key& key, E& value, const EnumNames<E>& names) {
    if (!given(key)) return mark_taken(key);
    std::vector<std::string> choices;
    for (const auto& entry : names) choices.emplace_back(entry.second);
    std::string chosen;
    field(key, chosen, choices);
    for (const auto& entry : names)
      if (chosen == entry.second) value = entry.first;
  }

  // A nested object: `visit_block(child_reader)` reads its keys, then its unknown keys are warned.
  // An absent block reads as {}, so that its derived defaults and required keys apply too.
  template <class F>
  void block(const Key& key, F&& visit_block) {
    static const json kEmpty = json::object();
    const json* value = find(key).second;
    mark_taken(key);
    bool absent = !value || value->is_null();
    if (!absent && !value->is_object()) throw invalid(key, "an object", *value);
    if (!absent) context_.given_keys.insert(path_of(key.name));
    Reader child(absent ? kEmpty : *value, path_of(used_name(key)), context_);
    visit_block(child);
    child.finish();
  }

  template <class Section>
  void section(const Key& key, Section& section) {
    block(key, [&](Reader& child) { visit(child, section); });
  }

  // The value under `key`, marked as known; nullptr when absent. null is returned as written:
  // callers that keep raw JSON want it.
  const json* take(const Key& key);
  // Present, not null, and not an "auto" that leaves the key unset (AutoValues::value_for).
  bool given(const Key& key) const;
  // Throws unless the key is present (null counts as present: the engine derives it).
  void require(const Key& key, const std::string& by);
  // Warns once for each key that no field, block or take asked for.
  void finish() const;

  void warn(const std::string& message) const { record_warning(context_.warnings, message); }
  // "zero_optimization.offload_param" + "device" -> "zero_optimization.offload_param.device".
  std::string path_of(const std::string& name) const;
  // An error naming the key (with its full path) as the user spelt it.
  Error error(const Key& key, const std::string& message) const;
  Error invalid(const Key& key, const std::string& expected, const json& got) const;

 private:
  // The spelling found and its value; both keys present with different values is an error.
  std::pair<const char*, const json*> find(const Key& key) const;
  const char* used_name(const Key& key) const { return find(key).first; }
  void mark_taken(const Key& key);
  // The value to convert, or nullptr when the key is absent or unset; "auto" is replaced by the
  // value it stands for.
  const json* value_of(const Key& key);

  const json& object_;
  std::string path_;
  ReadContext& context_;
  std::set<std::string> taken_;
};

class Writer {
 public:
  static constexpr bool kReading = false;

  // Extra arguments (ranges, choices) only matter when reading.
  template <class T, class... Checks>
  void field(const Key& key, const T& value, const Checks&...) {
    if constexpr (std::is_enum_v<T>) {
      json_[key.name] = to_string(value);
    } else if constexpr (std::is_same_v<T, json>) {
      if (!value.is_null()) json_[key.name] = value;
    } else if constexpr (is_optional<T>::value) {
      // Reading null back leaves the value unset again.
      if (value) json_[key.name] = *value; else json_[key.name] = nullptr;
    } else {
      json_[key.name] = value;
    }
  }

  template <class F>
  void block(const Key& key, F&& visit_block) {
    Writer child;
    visit_block(child);
    json_[key.name] = std::move(child.json_);
  }

  template <class Section>
  void section(const Key& key, Section section) {
    block(key, [&](Writer& child) { visit(child, section); });
  }

  json& result() { return json_; }

 private:
  template <class T> struct is_optional : std::false_type {};
  template <class T> struct is_optional<std::optional<T>> : std::true_type {};

  json json_ = json::object();
};

}  // namespace ds::config_detail
