// Python's str semantics on UTF-8 text: templates index, slice, strip, split and case-map strings
// by code point, as CPython does. Case mapping covers ASCII, Latin-1, basic Greek and Cyrillic;
// other letters are left as they are (docs/chat-templates.md lists this).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ds::chat_template::text {

// Code points of valid UTF-8 (the lexer and the JSON reader have already refused invalid text).
std::vector<uint32_t> decode(const std::string& s);
std::string encode(const std::vector<uint32_t>& cps);
void append(std::string& out, uint32_t cp);
size_t length(const std::string& s);  // in code points

bool is_space(uint32_t cp);  // str.isspace()
std::string lower(const std::string& s);
std::string upper(const std::string& s);
std::string capitalize(const std::string& s);  // str.capitalize()
std::string title(const std::string& s);       // str.title()

// str.strip/lstrip/rstrip: chars unset strips whitespace, else any of chars' code points.
std::string strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep=None, maxsplit=-1) and str.rsplit.
std::vector<std::string> split(const std::string& s, const std::optional<std::string>& sep, long maxsplit);
std::string replace(const std::string& s, const std::string& old, const std::string& with, long count);
std::vector<std::string> splitlines(const std::string& s);  // str.splitlines()

// Python's repr() of a str: quotes chosen as CPython chooses them, non-printables escaped.
std::string repr(const std::string& s);
// Python's repr() of a float (the shortest string that reads back as the same double).
std::string float_repr(double v);

}  // namespace ds::chat_template::text
