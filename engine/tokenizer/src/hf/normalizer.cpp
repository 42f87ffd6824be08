#include "hf/normalizer.hpp"

#include <memory>
#include <vector>

#include "hf/pattern.hpp"
#include "hf/unicode.hpp"

namespace ds::tokenizer::hf {
namespace {

std::string strip(const std::string& text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  if (left)
    for (size_t at = 0; at < end;) {
      if (!is_whitespace(next_code_point(text, at))) break;
      begin = at;
    }
  if (right)
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      size_t at = start;
      if (!is_whitespace(next_code_point(text, at))) break;
      end = start;
    }
  return text.substr(begin, end - begin);
}

}  // namespace

Normalizer make_normalizer(const Field& field) {
  if (field.value.is_null()) return {};
  const std::string type = field["type"].string();
  if (type == "Sequence") {
    const Field list = field["normalizers"];
    list.array();
    std::vector<Normalizer> steps;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto step = make_normalizer(list.item(i))) steps.push_back(std::move(step));
    return [steps](std::string text) {
      for (const auto& step : steps) text = step(std::move(text));
      return text;
    };
  }
  if (type == "Replace") {
    auto pattern = std::make_shared<Pattern>(field["pattern"]);
    const std::string content = field["content"].string();
    return [pattern, content](std::string text) { return pattern->replace_all(text, content); };
  }
  if (type == "Prepend") {
    const std::string prepend = field["prepend"].string();
    return [prepend](std::string text) { return text.empty() ? text : prepend + text; };  // Rust: only if non-empty
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD")
    return [type](std::string text) { return unicode_normalize(text, type); };
  if (type == "Lowercase") return [](std::string text) { return unicode_lowercase(text); };
  if (type == "Strip") {
    const bool left = field["strip_left"].boolean_or(false), right = field["strip_right"].boolean_or(false);
    return [left, right](std::string text) { return strip(text, left, right); };
  }
  throw field["type"].error("normalizer \"" + type +
                            "\" is not supported (supported: Sequence, Replace, Prepend, NFC, NFD, NFKC, NFKD, "
                            "Lowercase, Strip)");
}

}  // namespace ds::tokenizer::hf
