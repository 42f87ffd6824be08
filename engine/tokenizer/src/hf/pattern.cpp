#include "hf/pattern.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "hf/unicode.hpp"

namespace ds::tokenizer::hf {

struct Pattern::Compiled {
  pcre2_code* code = nullptr;
  pcre2_match_data* match = nullptr;
  ~Compiled() {
    pcre2_match_data_free(match);
    pcre2_code_free(code);
  }
};

Pattern::Pattern(const Field& field) : compiled_(std::make_unique<Compiled>()) {
  field.object();
  const bool literal = field.has("String");
  if (!literal && !field.has("Regex")) throw field.error("expected {\"String\": ...} or {\"Regex\": ...}");
  const Field source = literal ? field["String"] : field["Regex"];
  const std::string text = source.string();
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  compiled_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                    literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (!compiled_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw source.error("PCRE2 cannot compile the pattern at offset " + std::to_string(error_offset) + ": " +
                       reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);  // the interpreter runs it where JIT is unavailable
  compiled_->match = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
}

Pattern::~Pattern() = default;

std::vector<std::pair<size_t, size_t>> Pattern::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> found;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  for (size_t at = 0; at < text.size();) {
    const int result =
        pcre2_match(compiled_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, compiled_->match, nullptr);
    if (result == PCRE2_ERROR_NOMATCH) break;
    if (result < 0) throw Error("PCRE2 fails on the text (error " + std::to_string(result) + ")");
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(compiled_->match);
    if (span[1] > span[0]) {
      found.emplace_back(span[0], span[1]);
      at = span[1];
    } else {  // an empty match: Rust's find_iter skips it and looks again one character on
      at = span[0];
      if (at >= text.size()) break;
      next_code_point(text, at);
    }
  }
  return found;
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::string out;
  size_t done = 0;
  for (const auto& [begin, end] : find_all(text)) {
    out.append(text.substr(done, begin - done));
    out.append(content);
    done = end;
  }
  out.append(text.substr(done));
  return out;
}

}  // namespace ds::tokenizer::hf
