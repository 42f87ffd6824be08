#include "dstrain/engine/tokenizer/byte_alphabet.hpp"

#include <array>

#include "dstrain/engine/tokenizer/utf8.hpp"

namespace ds::tokenizer {
namespace {

bool stands_for_itself(unsigned byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
}

struct Alphabet {
  std::array<char32_t, 256> code_point{};
  std::array<int, 512> byte_of{};  // every code point of the alphabet is below U+0200; -1: none

  Alphabet() {
    byte_of.fill(-1);
    char32_t next = 0x100;
    for (unsigned byte = 0; byte < 256; ++byte) {
      code_point[byte] = stands_for_itself(byte) ? byte : next++;
      byte_of[code_point[byte]] = static_cast<int>(byte);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet instance;
  return instance;
}

}  // namespace

char32_t byte_to_code_point(unsigned char byte) { return alphabet().code_point[byte]; }

std::optional<std::string> bytes_of_token(std::string_view token) {
  if (first_invalid_utf8(token)) return std::nullopt;
  std::string bytes;
  for (size_t i = 0; i < token.size();) {
    const auto lead = static_cast<unsigned char>(token[i]);
    char32_t point;
    if (lead < 0x80) {
      point = lead;
      i += 1;
    } else if (lead < 0xE0) {
      point = (char32_t{lead} & 0x1F) << 6 | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // three- and four-byte characters are all outside the alphabet
    }
    if (point >= alphabet().byte_of.size() || alphabet().byte_of[point] < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(alphabet().byte_of[point]));
  }
  return bytes;
}

}  // namespace ds::tokenizer
