// A value inside tokenizer.json with its place: the file and the key path ("pre_tokenizer.
// pretokenizers[1].pattern.Regex"), so that every refusal names both.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "dstrain/runtime/error.hpp"

namespace ds::tokenizer::hf {

struct Field {
  const nlohmann::json& value;
  std::string key;
  const std::string& path;

  Error error(const std::string& message) const {
    Error e(message);
    e.with_path(path);
    if (!key.empty()) e.with_key(key);
    return e;
  }
  bool has(const char* name) const { return value.is_object() && value.contains(name) && !value[name].is_null(); }
  Field operator[](const char* name) const {
    static const nlohmann::json null;
    const std::string child = key.empty() ? name : key + "." + name;
    if (!value.is_object()) throw error("expected an object");
    const auto it = value.find(name);
    return {it == value.end() ? null : *it, child, path};
  }
  Field item(size_t index) const {
    if (!value.is_array() || index >= value.size())
      throw error("expected an array of at least " + std::to_string(index + 1) + " items");
    return {value[index], key + "[" + std::to_string(index) + "]", path};
  }
  size_t size() const { return value.size(); }

  const nlohmann::json& object() const {
    if (!value.is_object()) throw error(value.is_null() ? "missing (expected an object)" : "expected an object");
    return value;
  }
  const nlohmann::json& array() const {
    if (!value.is_array()) throw error(value.is_null() ? "missing (expected an array)" : "expected an array");
    return value;
  }
  std::string string() const {
    if (!value.is_string()) throw error(value.is_null() ? "missing (expected a string)" : "expected a string");
    return value.get<std::string>();
  }
  std::string string_or(const std::string& fallback) const { return value.is_null() ? fallback : string(); }
  bool boolean() const {
    if (!value.is_boolean())
      throw error(value.is_null() ? "missing (expected true or false)" : "expected true or false");
    return value.get<bool>();
  }
  bool boolean_or(bool fallback) const {
    if (value.is_null()) return fallback;
    if (!value.is_boolean()) throw error("expected true or false");
    return value.get<bool>();
  }
  uint32_t id() const {
    if (!value.is_number_unsigned() || value.get<uint64_t>() > 0xFFFFFFFFu)
      throw error("expected a token id (a non-negative 32-bit integer)");
    return value.get<uint32_t>();
  }
  uint32_t count_or(uint32_t fallback) const { return value.is_null() ? fallback : id(); }
};

}  // namespace ds::tokenizer::hf
