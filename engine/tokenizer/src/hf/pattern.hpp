// The `pattern` of Split, Replace: {"String": "..."} (a literal) or {"Regex": "..."} (Oniguruma's
// syntax in Rust's tokenizers; PCRE2 reads the patterns the families ship as they are, with
// Unicode classes: \p{L}, \p{N}, \s, (?i:...), lookahead).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hf/json_field.hpp"

namespace ds::tokenizer::hf {

class Pattern {
 public:
  explicit Pattern(const Field& field);  // throws naming the field when PCRE2 rejects the regex
  ~Pattern();
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;

  // The non-empty, non-overlapping matches, leftmost first, as (begin, end) byte offsets.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace ds::tokenizer::hf
