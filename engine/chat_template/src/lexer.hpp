// The template's source cut into tokens exactly where Jinja2's lexer cuts it, with Hugging Face's
// settings: trim_blocks (a block or comment tag eats the one newline after it), lstrip_blocks
// (spaces and tabs from a line's start up to a block or comment tag are dropped), whitespace
// control (`{%-`, `-%}`, `{{-`, `-}}`, `{#-`, `-#}` strip all whitespace on that side, `{%+`
// and `+%}` keep it), newlines normalized to "\n" and one trailing newline dropped
// (keep_trailing_newline=False). Comments leave no token. Rule: jinja2/lexer.py, Lexer.tokeniter.
#pragma once

#include <string>
#include <vector>

namespace ds::chat_template {

struct Token {
  enum class Type { data, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };
  Type type;
  std::string value;  // data text, a name, a string literal's decoded value, a number's text, an operator
  int line = 1, column = 1;
};

// The tokens of `source` (already newline-normalized by normalize_source). Throws ds::Error naming
// `name`, the line and the column for what Jinja2 refuses (an unclosed tag, an unknown character).
std::vector<Token> tokenize(const std::string& source, const std::string& name);

// "\r\n" and "\r" become "\n"; one trailing newline goes.
std::string normalize_source(const std::string& source);

}  // namespace ds::chat_template
