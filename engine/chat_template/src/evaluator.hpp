// Runs the statement tree over a context of variables: Jinja2's scoping (a `for` iteration and a
// macro call each get their own scope; `if` does not), `loop`, break/continue, macros, namespace
// attribute assignment, and the `{% generation %}` spans Hugging Face's AssistantTracker records.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ast.hpp"

namespace ds::chat_template {

struct RenderResult {
  std::string text;
  std::vector<std::pair<size_t, size_t>> generation;  // byte offsets [begin, end) into text
};

// `context` is a JSON object: the template's variables (messages, tools, bos_token, ...).
RenderResult evaluate(const Body& body, const Json& context, const std::string& name);

}  // namespace ds::chat_template
