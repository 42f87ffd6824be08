#include "dstrain/runtime/json_block.hpp"

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/json_excerpt.hpp"

namespace ds {

JsonBlock::JsonBlock(const nlohmann::json& block, std::string prefix)
    : block_(block.is_null() ? nlohmann::json::object() : block), prefix_(std::move(prefix)) {
  if (!block_.is_object()) throw Error("must be a JSON object, got " + json_excerpt(block)).with_key(prefix_);
}

bool JsonBlock::has(const std::string& key) const { return block_.contains(key); }

const nlohmann::json& JsonBlock::required(const std::string& key) {
  if (!has(key)) throw Error("required key is missing").with_key(full_key(key));
  read_.insert(key);
  return block_.at(key);
}

int64_t JsonBlock::positive_int(const std::string& key) {
  const nlohmann::json& value = required(key);
  if (!value.is_number_integer() || value.get<int64_t>() <= 0) {
    throw Error("must be a positive integer, got " + json_excerpt(value)).with_key(full_key(key));
  }
  return value.get<int64_t>();
}

int64_t JsonBlock::positive_int(const std::string& key, int64_t fallback) {
  return has(key) ? positive_int(key) : fallback;
}

uint64_t JsonBlock::non_negative_int(const std::string& key, uint64_t fallback) {
  if (!has(key)) return fallback;
  const nlohmann::json& value = required(key);
  // nlohmann keeps small literals as signed integers, so check the sign rather than the type.
  const bool negative = value.is_number_integer() && !value.is_number_unsigned() && value.get<int64_t>() < 0;
  if (!value.is_number_integer() || negative) {
    throw Error("must be a non-negative integer, got " + json_excerpt(value)).with_key(full_key(key));
  }
  return value.get<uint64_t>();
}

double JsonBlock::fraction(const std::string& key, double fallback) {
  if (!has(key)) return fallback;
  const nlohmann::json& value = required(key);
  if (!value.is_number() || value.get<double>() < 0.0 || value.get<double>() >= 1.0) {
    throw Error("must be a number in [0, 1), got " + json_excerpt(value)).with_key(full_key(key));
  }
  return value.get<double>();
}

bool JsonBlock::boolean(const std::string& key, bool fallback) {
  if (!has(key)) return fallback;
  const nlohmann::json& value = required(key);
  if (!value.is_boolean()) throw Error("must be true or false, got " + json_excerpt(value)).with_key(full_key(key));
  return value.get<bool>();
}

std::string JsonBlock::string(const std::string& key) {
  const nlohmann::json& value = required(key);
  if (!value.is_string()) throw Error("must be a string, got " + json_excerpt(value)).with_key(full_key(key));
  return value.get<std::string>();
}

std::string JsonBlock::string(const std::string& key, const std::string& fallback) {
  return has(key) ? string(key) : fallback;
}

void JsonBlock::skip(const std::string& key) { read_.insert(key); }

void JsonBlock::reject_unknown_keys() const {
  for (const auto& item : block_.items()) {
    if (!read_.count(item.key())) throw Error("unknown key").with_key(full_key(item.key()));
  }
}

}  // namespace ds
