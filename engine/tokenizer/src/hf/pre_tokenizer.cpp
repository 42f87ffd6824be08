#include "hf/pre_tokenizer.hpp"

#include <algorithm>
#include <memory>

#include "dstrain/engine/tokenizer/byte_alphabet.hpp"
#include "hf/pattern.hpp"
#include "hf/unicode.hpp"

namespace ds::tokenizer::hf {
namespace {

// A piece of text cut into spans, each a match of the pattern or not.
struct Span {
  size_t begin, end;
  bool is_match;
};

std::vector<Span> spans_of(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches, bool invert) {
  std::vector<Span> spans;
  size_t done = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > done) spans.push_back({done, begin, invert});
    spans.push_back({begin, end, !invert});
    done = end;
  }
  if (done < text.size() || spans.empty()) spans.push_back({done, text.size(), invert});
  return spans;
}

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Rust's NormalizedString::split: which spans become pieces, merged how.
void split_into(std::string_view text, const std::vector<Span>& spans, Behavior behavior,
                std::vector<std::string>& out) {
  std::vector<std::pair<size_t, size_t>> kept;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const Span& s : spans)
        if (!s.is_match) kept.emplace_back(s.begin, s.end);
      break;
    case Behavior::kIsolated:
      for (const Span& s : spans) kept.emplace_back(s.begin, s.end);
      break;
    case Behavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !kept.empty())
          kept.back().second = s.end;
        else
          kept.emplace_back(s.begin, s.end);
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !kept.empty())
          kept.back().second = s.end;
        else
          kept.emplace_back(s.begin, s.end);
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& s = spans[i];
        if (s.is_match && !previous_match && !kept.empty())
          kept.back().first = s.begin;
        else
          kept.emplace_back(s.begin, s.end);
        previous_match = s.is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const auto& [begin, end] : kept)
    if (end > begin) out.emplace_back(text.substr(begin, end - begin));
}

Behavior behavior_of(const Field& field) {
  const std::string name = field.string();
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  throw field.error("unknown split behavior \"" + name +
                    "\" (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

// Applies `split` to every piece.
template <class Split>
PreTokenizer each_piece(Split split) {
  return [split](std::vector<std::string> pieces, bool first_section) {
    std::vector<std::string> out;
    for (size_t i = 0; i < pieces.size(); ++i) split(pieces[i], first_section && i == 0, out);
    return out;
  };
}

std::string byte_level(std::string_view piece) {
  std::string out;
  for (const unsigned char byte : piece) append_utf8(out, byte_to_code_point(byte));
  return out;
}

// Spans of single characters for which `predicate` holds, as Rust's split on a char predicate.
template <class Predicate>
std::vector<Span> char_spans(std::string_view text, Predicate predicate) {
  std::vector<std::pair<size_t, size_t>> matches;
  for (size_t at = 0; at < text.size();) {
    const size_t begin = at;
    if (predicate(next_code_point(text, at))) matches.emplace_back(begin, at);
  }
  return spans_of(text, matches, false);
}

const nlohmann::json& gpt2_pattern() {
  static const nlohmann::json pattern = {
      {"Regex", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"}};
  return pattern;
}

}  // namespace

PreTokenizer make_pre_tokenizer(const Field& field) {
  if (field.value.is_null()) return {};
  const std::string type = field["type"].string();
  if (type == "Sequence") {
    const Field list = field["pretokenizers"];
    list.array();
    std::vector<PreTokenizer> steps;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto step = make_pre_tokenizer(list.item(i))) steps.push_back(std::move(step));
    return [steps](std::vector<std::string> pieces, bool first_section) {
      for (const auto& step : steps) pieces = step(std::move(pieces), first_section);
      return pieces;
    };
  }
  if (type == "Split") {
    auto pattern = std::make_shared<Pattern>(field["pattern"]);
    const Behavior behavior = behavior_of(field["behavior"]);
    const bool invert = field["invert"].boolean_or(false);
    return each_piece([pattern, behavior, invert](const std::string& piece, bool, std::vector<std::string>& out) {
      split_into(piece, spans_of(piece, pattern->find_all(piece), invert), behavior, out);
    });
  }
  if (type == "ByteLevel") {
    const bool add_prefix_space = field["add_prefix_space"].boolean();  // required, as in Rust
    field["trim_offsets"].boolean_or(true);                             // offsets only: ids do not change
    const bool use_regex = field["use_regex"].boolean_or(true);
    std::shared_ptr<Pattern> pattern;
    if (use_regex) pattern = std::make_shared<Pattern>(Field{gpt2_pattern(), "", field.path});
    return each_piece([pattern, add_prefix_space](const std::string& piece, bool, std::vector<std::string>& out) {
      const std::string text = add_prefix_space && piece.rfind(' ', 0) != 0 ? " " + piece : piece;
      std::vector<std::string> split;
      if (pattern)
        split_into(text, spans_of(text, pattern->find_all(text), false), Behavior::kIsolated, split);
      else
        split.push_back(text);
      for (const std::string& s : split) out.push_back(byte_level(s));
    });
  }
  if (type == "Metaspace") {
    const std::string replacement = field["replacement"].string_or("\xE2\x96\x81");
    std::string scheme = "always";
    if (field.has("prepend_scheme"))
      scheme = field["prepend_scheme"].string();
    else if (field.has("add_prefix_space"))
      scheme = field["add_prefix_space"].boolean_or(true) ? "always" : "never";
    if (scheme != "always" && scheme != "first" && scheme != "never")
      throw field["prepend_scheme"].error("expected \"always\", \"first\" or \"never\", not \"" + scheme + "\"");
    const bool split = field["split"].boolean_or(true);
    if (replacement.empty()) throw field["replacement"].error("must be one character");
    return each_piece([=](const std::string& piece, bool first, std::vector<std::string>& out) {
      std::string text;
      for (const char c : piece) c == ' ' ? text += replacement : text += c;
      if ((scheme == "always" || (scheme == "first" && first)) && text.rfind(replacement, 0) != 0)
        text = replacement + text;
      if (!split) {
        out.push_back(text);
        return;
      }
      std::vector<std::pair<size_t, size_t>> matches;
      for (size_t at = text.find(replacement); at != std::string::npos; at = text.find(replacement, at + 1))
        matches.emplace_back(at, at + replacement.size());
      split_into(text, spans_of(text, matches, false), Behavior::kMergedWithNext, out);
    });
  }
  if (type == "Digits") {
    const bool individual = field["individual_digits"].boolean_or(false);
    return each_piece([individual](const std::string& piece, bool, std::vector<std::string>& out) {
      split_into(piece, char_spans(piece, is_numeric), individual ? Behavior::kIsolated : Behavior::kContiguous, out);
    });
  }
  if (type == "WhitespaceSplit")
    return each_piece([](const std::string& piece, bool, std::vector<std::string>& out) {
      std::vector<Span> spans = char_spans(piece, is_whitespace);
      split_into(piece, spans, Behavior::kRemoved, out);
    });
  throw field["type"].error("pre-tokenizer \"" + type +
                            "\" is not supported (supported: Sequence, Split, ByteLevel, Metaspace, Digits, "
                            "WhitespaceSplit)");
}

}  // namespace ds::tokenizer::hf
