#include "hf/added_vocabulary.hpp"

#include <algorithm>

#include "hf/unicode.hpp"

namespace ds::tokenizer::hf {
namespace {

// The last / first character of `text`, if any.
std::optional<char32_t> last_char(std::string_view text) {
  if (text.empty()) return std::nullopt;
  size_t begin = text.size() - 1;
  while (begin > 0 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
  return next_code_point(text, begin);
}
std::optional<char32_t> first_char(std::string_view text) {
  size_t at = 0;
  return text.empty() ? std::nullopt : std::optional<char32_t>(next_code_point(text, at));
}

}  // namespace

AddedMatcher::AddedMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns)
    : tokens_(std::move(tokens)), patterns_(std::move(patterns)), by_first_byte_(256) {
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (!patterns_[i].empty()) by_first_byte_[static_cast<unsigned char>(patterns_[i][0])].push_back(i);
  for (auto& list : by_first_byte_)
    std::stable_sort(list.begin(), list.end(),
                     [&](size_t a, size_t b) { return patterns_[a].size() > patterns_[b].size(); });
}

std::vector<Section> AddedMatcher::split(std::string_view text) const {
  std::vector<Section> sections;
  size_t done = 0;  // the end of the last section
  for (size_t at = 0; at < text.size();) {
    const auto& candidates = by_first_byte_[static_cast<unsigned char>(text[at])];
    const auto found = std::find_if(candidates.begin(), candidates.end(),
                                    [&](size_t i) { return text.compare(at, patterns_[i].size(), patterns_[i]) == 0; });
    if (found == candidates.end()) {
      ++at;
      continue;
    }
    const AddedToken& token = tokens_[*found];
    size_t start = at, stop = at + patterns_[*found].size();
    at = stop;  // the next search starts after this match, taken or not (aho-corasick's find_iter)
    if (token.single_word) {
      const auto before = last_char(text.substr(0, start)), after = first_char(text.substr(stop));
      if ((before && is_word_character(*before)) || (after && is_word_character(*after))) continue;
    }
    if (token.lstrip) {
      while (start > done) {
        size_t begin = start - 1;
        while (begin > done && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
        size_t probe = begin;
        if (!is_whitespace(next_code_point(text, probe))) break;
        start = begin;
      }
    }
    if (token.rstrip)
      for (size_t probe = stop; probe < text.size();) {
        if (!is_whitespace(next_code_point(text, probe))) break;
        stop = probe;
      }
    if (start > done) sections.push_back({std::string(text.substr(done, start - done)), std::nullopt, done});
    sections.push_back({std::string(text.substr(start, stop - start)), token.id, start});
    done = stop;
    at = std::max(at, stop);
  }
  if (done < text.size()) sections.push_back({std::string(text.substr(done)), std::nullopt, done});
  return sections;
}

}  // namespace ds::tokenizer::hf
