#include "dstrain/runtime/json_excerpt.hpp"

#include <utility>
#include <vector>

namespace ds {
namespace {

constexpr int kShownLevels = 3;

void append_string(std::string& out, const std::string& text, size_t keep) {
  if (text.size() <= keep) {
    out += nlohmann::json(text).dump();
  } else {
    out += nlohmann::json(text.substr(0, keep)).dump();
    out.insert(out.size() - 1, "...");
    out += " (" + std::to_string(text.size()) + " bytes)";
  }
}

void append(std::string& out, const nlohmann::json& value, int level, size_t max_chars) {
  if (out.size() > max_chars) return;
  if (value.is_string()) return append_string(out, value.get_ref<const std::string&>(), max_chars / 2);
  if (!value.is_structured()) {
    out += value.dump();
    return;
  }
  const bool object = value.is_object();
  out += object ? '{' : '[';
  if (level >= kShownLevels && !value.empty()) {
    out += "...";
  } else {
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!first) out += ',';
      first = false;
      if (out.size() > max_chars) {
        out += "... (" + std::to_string(value.size()) + " entries)";
        break;
      }
      if (object) {
        append_string(out, it.key(), max_chars / 4);
        out += ':';
      }
      append(out, *it, level + 1, max_chars);
    }
  }
  out += object ? '}' : ']';
}

}  // namespace

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) {
  std::string out;
  append(out, value, 0, max_chars);
  return out;
}

size_t json_depth(const nlohmann::json& value, size_t limit) {
  size_t deepest = 0;
  std::vector<std::pair<const nlohmann::json*, size_t>> pending{{&value, 0}};
  while (!pending.empty()) {
    auto [node, depth] = pending.back();
    pending.pop_back();
    if (!node->is_structured()) continue;
    if (depth + 1 > deepest) deepest = depth + 1;
    if (deepest > limit) return deepest;
    for (const auto& child : *node) pending.emplace_back(&child, depth + 1);
  }
  return deepest;
}

}  // namespace ds
