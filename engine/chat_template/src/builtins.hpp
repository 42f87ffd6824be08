// Jinja2's filters and tests, Python's str/dict methods and HF's globals, as the templates of
// docs/chat-templates.md use them. Each receives evaluated arguments; a wrong type or an
// unsupported argument throws std::runtime_error, which the evaluator turns into a ds::Error
// naming the template position.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "value.hpp"

namespace ds::chat_template {

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

bool known_filter(const std::string& name);
bool known_test(const std::string& name);

// Jinja2's environment.getattr / getitem over our values (sandboxed: '_' names are refused).
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);

// The elements `for` iterates (dict: its keys; str: its code points; undefined: none).
// `unpacking`: a `for k, v in` loop, the one place (key, value) pairs may be iterated.
std::vector<Json> iterate(const Value& v, bool unpacking = false);

bool apply_test(const std::string& name, const Value& v, const Args& args);
// `call_filter` lets map() apply a filter by name with the same machinery.
Value apply_filter(const std::string& name, const Value& v, const Args& args);
Value call_method(const Value& method, const Args& args);
// raise_exception, strftime_now, namespace, range.
Value call_global(const std::string& name, const Args& args);
bool is_global(const std::string& name);

// Thrown by raise_exception(): the template's own message.
struct TemplateRaised {
  std::string message;
};

}  // namespace ds::chat_template
