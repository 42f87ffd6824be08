// Tokens to the statement tree, with Jinja2's grammar and precedence (jinja2/parser.py):
// or < and < not < comparisons < + - < ~ < * / // % < ** < unary - + < postfix . [] () and
// filters | and tests `is`. A tag, filter-free construct or syntax outside docs/chat-templates.md's
// list is a ds::Error naming the template, line and column.
#pragma once

#include <string>
#include <vector>

#include "ast.hpp"
#include "lexer.hpp"

namespace ds::chat_template {

Body parse_template(const std::vector<Token>& tokens, const std::string& name);

}  // namespace ds::chat_template
