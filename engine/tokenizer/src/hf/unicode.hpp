// Code points of UTF-8 text, as Rust's `char` sees them (Hugging Face's tokenizers are Rust): the
// White_Space, Alphabetic and Numeric properties come from ICU, the normalization forms too.
#pragma once

#include <string>
#include <string_view>

namespace ds::tokenizer::hf {

// The code point at `at` in valid UTF-8, and `at` moved past it.
char32_t next_code_point(std::string_view text, size_t& at);
void append_utf8(std::string& out, char32_t point);

bool is_whitespace(char32_t point);    // Rust's char::is_whitespace
bool is_word_character(char32_t point);  // the regex crate's \w: Alphabetic, M, Nd, Pc, Join_Control
bool is_numeric(char32_t point);       // Rust's char::is_numeric: general category Nd, Nl or No

// The bytes as text, each maximal invalid subsequence replaced by U+FFFD (Rust's
// String::from_utf8_lossy, the WHATWG decoder's rule too).
std::string utf8_lossy(std::string_view bytes);

// "NFC", "NFD", "NFKC" or "NFKD" of valid UTF-8 (ICU), and lowercasing (Unicode's default mapping).
std::string unicode_normalize(std::string_view text, std::string_view form);
std::string unicode_lowercase(std::string_view text);

}  // namespace ds::tokenizer::hf
