// What template expressions evaluate to: Jinja2's Undefined, JSON-like data (Python's None, bool,
// int, float, str, list, dict, held as ordered JSON so dicts keep their key order), and the few
// objects templates make: namespace(), the loop variable, macros, globals and bound methods.
// Python's str(), repr(), ==, ordering and truthiness are defined here, as CPython defines them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ds::chat_template {

using Json = nlohmann::ordered_json;

struct Value;
struct MacroDef;
struct Scope;

// namespace() objects and `loop`: attributes by name, shared so that `set ns.x` is seen by every
// holder of the namespace, as in Jinja2.
struct Namespace {
  std::map<std::string, std::shared_ptr<Value>> attrs;
  bool is_loop = false;
};

struct Value {
  enum class Kind { undefined, data, ns, macro, function, method };
  // Lists made by filters or dict methods are Python iterators or views: they iterate like lists
  // but print as `<generator ...>`, so printing, comparing or serializing them is refused.
  enum class Seq { list, view, generator };

  Kind kind = Kind::undefined;
  Json data;                       // data; for method, the object the method is bound to
  Seq seq = Seq::list;
  std::shared_ptr<Namespace> ns;   // ns; for a method of `loop`, the loop
  std::shared_ptr<const MacroDef> macro;
  // macro: the scope it was defined in. Weak, as that scope holds the macro; the evaluator keeps
  // such scopes alive until the render ends.
  std::weak_ptr<Scope> closure;
  std::string name;                // undefined: what was looked up; function, method: its name
  // items() and |items yield Python (key, value) tuples; we hold them as lists, so they may only
  // be unpacked by `for k, v in ...` or counted, where a tuple and a list behave alike.
  bool pairs = false;
  // A generator can be consumed once (Python's iterators are then empty); a second use is refused.
  std::shared_ptr<bool> consumed;

  // Marks a generator used; throws std::runtime_error when it already was.
  void consume() const;

  static Value undefined(std::string what) {
    Value v;
    v.name = std::move(what);
    return v;
  }
  static Value of(Json j, Seq seq = Seq::list) {
    Value v;
    v.kind = Kind::data;
    v.data = std::move(j);
    v.seq = seq;
    return v;
  }
  bool is_undefined() const { return kind == Kind::undefined; }
  bool is_data() const { return kind == Kind::data; }
  bool is_string() const { return is_data() && data.is_string(); }
  bool is_plain() const { return is_data() && seq == Seq::list; }
};

// A short name of the value's Python type for messages, e.g. "dict", "str", "undefined".
std::string type_name(const Value& v);
bool truthy(const Value& v);

// Python str(v): what `{{ v }}` prints and what `~` joins. Throws std::runtime_error for what
// Jinja2 would print as an object address (iterators, macros, namespaces).
std::string to_str(const Value& v);
std::string py_str(const Json& j);
std::string py_repr(const Json& j);

// json.dumps(j, ensure_ascii, indent, separators, sort_keys), as HF's tojson filter calls it.
struct DumpOptions {
  bool ensure_ascii = false;
  int indent = -1;  // -1: None
  std::string item_separator, key_separator;  // empty: json.dumps' defaults
  bool sort_keys = false;
};
std::string py_json_dumps(const Json& j, const DumpOptions& options);

bool py_equal(const Json& a, const Json& b);
// Python's <, for numbers, strings and lists of them; std::runtime_error for other pairs.
bool py_less(const Json& a, const Json& b);

}  // namespace ds::chat_template
