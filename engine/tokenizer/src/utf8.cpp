#include "dstrain/engine/tokenizer/utf8.hpp"

#include "dstrain/runtime/error.hpp"

#include <cstdio>

namespace ds::tokenizer {

std::optional<size_t> first_invalid_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  for (size_t i = 0; i < size;) {
    const unsigned char lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // The second byte's range depends on the lead (RFC 3629's table): that rules out overlong
    // forms, surrogates and code points above U+10FFFF.
    size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    } else {
      return i;
    }
    if (i + length > size || bytes[i + 1] < low || bytes[i + 1] > high) return i;
    for (size_t k = 2; k < length; ++k)
      if ((bytes[i + k] & 0xC0) != 0x80) return i;
    i += length;
  }
  return std::nullopt;
}

void require_utf8(std::string_view text) {
  if (const auto offset = first_invalid_utf8(text)) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(text[*offset]));
    throw Error(std::string("not UTF-8: byte ") + byte + " does not begin a valid UTF-8 sequence")
        .with_offset(static_cast<int64_t>(*offset));
  }
}

}  // namespace ds::tokenizer
