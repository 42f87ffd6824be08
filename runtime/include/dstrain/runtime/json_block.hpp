// JsonBlock: one JSON object of dstrain's own settings ("dstrain.model", "dstrain.data"), read key
// by key. Every error names the full key ("dstrain.model.n_head"), and keys nobody read are
// rejected at the end so that a misspelt setting never passes silently.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <string>

namespace ds {

class JsonBlock {
 public:
  // `block` must be an object or null (an absent block reads as empty). `prefix` is its path,
  // e.g. "dstrain.model".
  JsonBlock(const nlohmann::json& block, std::string prefix);

  bool has(const std::string& key) const;
  int64_t positive_int(const std::string& key);
  int64_t positive_int(const std::string& key, int64_t fallback);
  uint64_t non_negative_int(const std::string& key, uint64_t fallback);
  double fraction(const std::string& key, double fallback);  // in [0, 1)
  bool boolean(const std::string& key, bool fallback);
  std::string string(const std::string& key);
  std::string string(const std::string& key, const std::string& fallback);
  // Marks a key as read by someone else (e.g. "type", read by whoever picked this parser).
  void skip(const std::string& key);

  // Throws ds::Error naming the first key that no accessor read.
  void reject_unknown_keys() const;

  std::string full_key(const std::string& key) const { return prefix_ + "." + key; }

 private:
  const nlohmann::json& required(const std::string& key);

  nlohmann::json block_;
  std::string prefix_;
  std::set<std::string> read_;
};

}  // namespace ds
