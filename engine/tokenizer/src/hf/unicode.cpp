#include "hf/unicode.hpp"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <vector>

#include "dstrain/engine/tokenizer/utf8.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::tokenizer::hf {

char32_t next_code_point(std::string_view text, size_t& at) {
  const auto lead = static_cast<unsigned char>(text[at]);
  const size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  char32_t point = length == 1 ? lead : length == 2 ? lead & 0x1F : length == 3 ? lead & 0x0F : lead & 0x07;
  for (size_t k = 1; k < length && at + k < text.size(); ++k)
    point = point << 6 | (static_cast<unsigned char>(text[at + k]) & 0x3F);
  at += length;
  return point;
}

void append_utf8(std::string& out, char32_t point) {
  if (point < 0x80) {
    out.push_back(static_cast<char>(point));
  } else if (point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | point >> 6));
    out.push_back(static_cast<char>(0x80 | (point & 0x3F)));
  } else if (point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | point >> 12));
    out.push_back(static_cast<char>(0x80 | (point >> 6 & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | point >> 18));
    out.push_back(static_cast<char>(0x80 | (point >> 12 & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (point >> 6 & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (point & 0x3F)));
  }
}

bool is_whitespace(char32_t point) { return u_hasBinaryProperty(static_cast<UChar32>(point), UCHAR_WHITE_SPACE); }

bool is_numeric(char32_t point) {
  const int8_t type = u_charType(static_cast<UChar32>(point));
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

bool is_word_character(char32_t point) {
  const auto c = static_cast<UChar32>(point);
  const int8_t type = u_charType(c);
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL) ||
         type == U_NON_SPACING_MARK || type == U_ENCLOSING_MARK || type == U_COMBINING_SPACING_MARK ||
         type == U_DECIMAL_DIGIT_NUMBER || type == U_CONNECTOR_PUNCTUATION;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  while (!bytes.empty()) {
    const auto bad = first_invalid_utf8(bytes);
    if (!bad) {
      out.append(bytes);
      break;
    }
    out.append(bytes.substr(0, *bad));
    // The maximal subpart: the lead and the continuation bytes that could still have completed it.
    const auto lead = static_cast<unsigned char>(bytes[*bad]);
    size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF)
      length = 2;
    else if (lead >= 0xE0 && lead <= 0xEF)
      length = 3, low = lead == 0xE0 ? 0xA0 : 0x80, high = lead == 0xED ? 0x9F : 0xBF;
    else if (lead >= 0xF0 && lead <= 0xF4)
      length = 4, low = lead == 0xF0 ? 0x90 : 0x80, high = lead == 0xF4 ? 0x8F : 0xBF;
    size_t skip = 1;
    for (size_t k = 1; k < length && *bad + k < bytes.size(); ++k) {
      const auto next = static_cast<unsigned char>(bytes[*bad + k]);
      if (k == 1 ? (next < low || next > high) : (next & 0xC0) != 0x80) break;
      skip = k + 1;
    }
    out.append("\xEF\xBF\xBD");
    bytes.remove_prefix(*bad + skip);
  }
  return out;
}

namespace {

std::u16string to_utf16(std::string_view text) {
  std::u16string out(text.size() + 1, u'\0');
  int32_t length = 0;
  UErrorCode status = U_ZERO_ERROR;
  u_strFromUTF8(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()), &length, text.data(),
                static_cast<int32_t>(text.size()), &status);
  if (U_FAILURE(status)) throw Error(std::string("ICU cannot read the text: ") + u_errorName(status));
  out.resize(static_cast<size_t>(length));
  return out;
}

std::string to_utf8(const std::u16string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    char32_t point = text[i];
    if (point >= 0xD800 && point < 0xDC00 && i + 1 < text.size())
      point = 0x10000 + ((point - 0xD800) << 10) + (text[++i] - 0xDC00);
    append_utf8(out, point);
  }
  return out;
}

// Runs an ICU function that writes UTF-16 into a buffer, growing it once when ICU asks for more.
template <class Transform>
std::string through_utf16(std::string_view text, Transform transform) {
  const std::u16string source = to_utf16(text);
  std::u16string out(source.size() * 3 + 16, u'\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    UErrorCode status = U_ZERO_ERROR;
    const int32_t length = transform(source, out, &status);
    if (status == U_BUFFER_OVERFLOW_ERROR) {
      out.assign(static_cast<size_t>(length), u'\0');
      continue;
    }
    if (U_FAILURE(status)) throw Error(std::string("ICU cannot transform the text: ") + u_errorName(status));
    out.resize(static_cast<size_t>(length));
    return to_utf8(out);
  }
  throw Error("ICU keeps asking for a larger buffer");
}

}  // namespace

std::string unicode_normalize(std::string_view text, std::string_view form) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* normalizer = form == "NFC"    ? unorm2_getNFCInstance(&status)
                                   : form == "NFD"  ? unorm2_getNFDInstance(&status)
                                   : form == "NFKC" ? unorm2_getNFKCInstance(&status)
                                                    : unorm2_getNFKDInstance(&status);
  if (U_FAILURE(status)) throw Error(std::string("ICU has no ") + std::string(form) + " data: " + u_errorName(status));
  return through_utf16(text, [&](const std::u16string& in, std::u16string& out, UErrorCode* error) {
    return unorm2_normalize(normalizer, reinterpret_cast<const UChar*>(in.data()), static_cast<int32_t>(in.size()),
                            reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()), error);
  });
}

std::string unicode_lowercase(std::string_view text) {
  return through_utf16(text, [](const std::u16string& in, std::u16string& out, UErrorCode* error) {
    return u_strToLower(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()),
                        reinterpret_cast<const UChar*>(in.data()), static_cast<int32_t>(in.size()), "", error);
  });
}

}  // namespace ds::tokenizer::hf
