// UTF-8 validity, checked once per document before any tokenizer sees it.
#pragma once

#include <optional>
#include <string_view>

namespace ds::tokenizer {

// The offset of the first byte that does not begin a well-formed UTF-8 sequence (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF, no truncated sequence), or nullopt.
std::optional<size_t> first_invalid_utf8(std::string_view text);

// Throws ds::Error with that offset when there is one.
void require_utf8(std::string_view text);

}  // namespace ds::tokenizer
