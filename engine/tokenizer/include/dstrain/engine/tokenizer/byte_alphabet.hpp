// GPT-2's byte-to-unicode map (bytes_to_unicode() in OpenAI's encoder.py): every byte gets a
// printable code point, so vocab.json and merges.txt can spell any byte string as text. The
// printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other 68 bytes, in
// order, become U+0100, U+0101, ...
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ds::tokenizer {

// The code point that stands for `byte`.
char32_t byte_to_code_point(unsigned char byte);

// The bytes that a vocab.json or merges.txt token (UTF-8 text in the alphabet) spells, or
// nullopt when it holds a character outside the alphabet or is not UTF-8.
std::optional<std::string> bytes_of_token(std::string_view token);

}  // namespace ds::tokenizer
