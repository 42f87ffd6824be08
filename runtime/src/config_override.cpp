// Config::apply_override: the trainer's "--set KEY=VALUE".
#include <string>

#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/json_excerpt.hpp"

namespace ds {

void Config::apply_override(nlohmann::json& json, const std::string& assignment) {
  // A config file's strings are UTF-8 (its parser checks); nlohmann::json stores any bytes given
  // directly and throws a bare type_error only when it prints them, in some later message.
  try {
    (void)nlohmann::json(assignment).dump();
  } catch (const nlohmann::json::type_error& e) {
    throw Error(std::string("--set expects UTF-8 text: ") + e.what()).with_key("--set");
  }
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) throw Error("--set expects KEY=VALUE, got '" + assignment + "'");
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  nlohmann::json* node = &json;
  for (size_t start = 0;;) {
    const size_t dot = key.find('.', start);
    const std::string name = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (name.empty()) throw Error("--set: an empty name in the dotted key").with_key(key);
    // nlohmann::json would make null an object; anything else it refuses with a bare type_error.
    if (!node->is_object() && !node->is_null())
      throw Error("--set cannot write '" + name + "' inside '" + key.substr(0, start - 1) + "': that is " +
                  json_excerpt(*node) + ", not an object")
          .with_key(key);
    node = &(*node)[name];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  try {
    *node = nlohmann::json::parse(text);
  } catch (const nlohmann::json::out_of_range& e) {
    throw Error("--set " + key + "=" + text + ": a number out of range (" + e.what() + ")").with_key(key);
  } catch (const nlohmann::json::parse_error&) {
    *node = text;  // not JSON: a string, so that --set dstrain.data.type=synthetic needs no quotes
  }
}

}  // namespace ds
