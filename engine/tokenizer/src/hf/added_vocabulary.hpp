// tokenizer.json's "added_tokens" (and tokenizer_config.json's added_tokens_decoder): strings
// matched in the text before the model sees it, as Rust's AddedVocabulary does. Tokens with
// `normalized: false` are found in the raw text; the rest of the text is normalized and tokens with
// `normalized: true` are found there (their content normalized too). Leftmost match first, the
// longest at one place. `single_word`: only between characters that are not \w; `lstrip` /
// `rstrip`: the whitespace before / after joins the token (and so disappears).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ds::tokenizer::hf {

struct AddedToken {
  uint32_t id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

// A stretch of text: an added token's (id set) or text for the model.
struct Section {
  std::string text;
  std::optional<uint32_t> id;
  size_t offset;  // where it begins in the text it was cut from
};

class AddedMatcher {
 public:
  // `patterns[i]` is what finds `tokens[i]` (its content, normalized for normalized tokens).
  AddedMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);
  std::vector<Section> split(std::string_view text) const;

 private:
  std::vector<AddedToken> tokens_;
  std::vector<std::string> patterns_;
  std::vector<std::vector<size_t>> by_first_byte_;  // token indices, longest pattern first
};

}  // namespace ds::tokenizer::hf
