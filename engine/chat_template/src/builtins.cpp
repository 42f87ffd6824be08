#include "builtins.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>

#include "text.hpp"

namespace ds::chat_template {
namespace {

[[noreturn]] void type_error(const std::string& msg) { throw std::runtime_error(msg); }

// Positional and keyword arguments matched to parameter names, as Python binds them.
std::vector<std::optional<Value>> bind(const Args& args, const std::vector<std::string>& params, const std::string& fn) {
  if (args.positional.size() > params.size())
    type_error(fn + "() takes at most " + std::to_string(params.size()) + " argument(s)");
  std::vector<std::optional<Value>> out(params.size());
  for (size_t k = 0; k < args.positional.size(); ++k) out[k] = args.positional[k];
  for (const auto& [key, v] : args.keyword) {
    size_t k = 0;
    while (k < params.size() && params[k] != key) ++k;
    if (k == params.size()) type_error(fn + "() got an unexpected keyword argument '" + key + "'");
    if (out[k]) type_error(fn + "() got multiple values for argument '" + key + "'");
    out[k] = v;
  }
  return out;
}

std::string str_arg(const std::optional<Value>& v, const std::string& what) {
  if (!v || !v->is_string()) type_error(what + " must be a string");
  return v->data.get<std::string>();
}
std::optional<std::string> opt_str(const std::optional<Value>& v, const std::string& what) {
  if (!v || (v->is_plain() && v->data.is_null())) return std::nullopt;
  return str_arg(v, what);
}
int64_t int_arg(const std::optional<Value>& v, int64_t dflt, const std::string& what) {
  if (!v || (v->is_plain() && v->data.is_null())) return dflt;
  if (!v->is_plain() || !(v->data.is_number_integer() || v->data.is_boolean())) type_error(what + " must be an integer");
  if (v->data.is_boolean()) return v->data.get<bool>();
  if (v->data.is_number_unsigned() && v->data.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    type_error(what + " is beyond 64 bits");
  return v->data.get<int64_t>();
}
bool bool_arg(const std::optional<Value>& v, bool dflt) { return v ? truthy(*v) : dflt; }

Value generator(Json list) {
  Value g = Value::of(std::move(list), Value::Seq::generator);
  g.consumed = std::make_shared<bool>(false);
  return g;
}
Value method(const Json& obj, const std::string& name) {
  Value m;
  m.kind = Value::Kind::method;
  m.data = obj;
  m.name = name;
  return m;
}

const std::set<std::string> kDictMethods{"clear", "copy", "fromkeys", "get", "items", "keys", "pop", "popitem",
                                         "setdefault", "update", "values"};
const std::set<std::string> kStrMethods{
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format", "format_map",
    "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
    "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans", "partition",
    "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split",
    "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill"};
const std::set<std::string> kListMethods{"append", "clear", "copy", "count", "extend", "index", "insert", "pop",
                                         "remove", "reverse", "sort"};

Json char_at(const std::vector<uint32_t>& cps, size_t i) {
  std::string s;
  text::append(s, cps[i]);
  return s;
}

// Jinja2's make_attrgetter: "a.b.0" looked up part by part with environment.getitem, an
// undefined step replaced by `dflt` when there is one.
Value attr_path(const Json& item, const std::string& path, const std::optional<Value>& dflt = std::nullopt) {
  Value v = Value::of(item);
  for (const auto& part : text::split(path, std::string("."), -1)) {
    bool digits = !part.empty() && part.size() < 18;
    for (char c : part) digits &= c >= '0' && c <= '9';
    v = get_item(v, digits ? Value::of(static_cast<int64_t>(std::atoll(part.c_str()))) : Value::of(part));
    if (dflt && !(dflt->is_plain() && dflt->data.is_null()) && v.is_undefined()) v = *dflt;
  }
  return v;
}

Json plain_or_fail(const Value& v, const std::string& what) {
  if (v.is_undefined()) type_error(what + ": '" + v.name + "' is undefined");
  if (!v.is_plain()) type_error(what + " of a " + type_name(v) + " is not supported");
  return v.data;
}

// Python's int(str, base) for base 10 and float(str): surrounding whitespace, a sign, '_'
// between digits.
std::optional<int64_t> parse_int(const std::string& raw) {
  std::string s = text::strip(raw, std::nullopt, true, true), digits;
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  for (; i < s.size(); ++i) {
    if (s[i] >= '0' && s[i] <= '9') {
      digits += s[i];
    } else if (s[i] == '_' && !digits.empty() && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '9') {
    } else {
      return std::nullopt;
    }
  }
  if (digits.empty()) return std::nullopt;
  errno = 0;
  const long long v = std::strtoll(((negative ? "-" : "") + digits).c_str(), nullptr, 10);
  if (errno == ERANGE) type_error("int() beyond 64 bits");
  return v;
}
std::optional<double> parse_float(const std::string& raw) {
  std::string s = text::strip(raw, std::nullopt, true, true), clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return std::nullopt;
      continue;
    }
    clean += s[i];
  }
  if (clean.empty()) return std::nullopt;
  std::string lowered = text::lower(clean);
  const std::string body = lowered[0] == '+' || lowered[0] == '-' ? lowered.substr(1) : lowered;
  const double sign = lowered[0] == '-' ? -1.0 : 1.0;
  if (body == "inf" || body == "infinity") return sign * std::numeric_limits<double>::infinity();
  if (body == "nan") return std::numeric_limits<double>::quiet_NaN();
  for (char c : body)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-')) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return v;
}

bool is_number(const Value& v) { return v.is_plain() && (v.data.is_number() || v.data.is_boolean()); }

Value mod_value(const Value& v, const Value& n) {
  if (!is_number(v) || !is_number(n)) type_error("odd, even and divisibleby need numbers");
  const bool ints = !v.data.is_number_float() && !n.data.is_number_float();
  if (ints) {
    const int64_t a = v.data.is_boolean() ? v.data.get<bool>() : v.data.get<int64_t>();
    const int64_t b = n.data.is_boolean() ? n.data.get<bool>() : n.data.get<int64_t>();
    if (b == 0) type_error("integer division or modulo by zero");
    if (b == -1) return Value::of(int64_t{0});
    int64_t m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return Value::of(m);
  }
  const double a = v.data.is_boolean() ? v.data.get<bool>() : v.data.get<double>();
  const double b = n.data.is_boolean() ? n.data.get<bool>() : n.data.get<double>();
  if (b == 0.0) type_error("float modulo by zero");
  double m = std::fmod(a, b);
  if (m != 0.0 && ((m < 0) != (b < 0))) m += b;
  return Value::of(m);
}

bool compare_test(const std::string& op, const Value& a, const Value& b) {
  auto eq = [&] {
    if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
    if (!a.is_plain() || !b.is_plain()) return false;
    return py_equal(a.data, b.data);
  };
  if (op == "eq" || op == "equalto" || op == "==") return eq();
  if (op == "ne" || op == "!=") return !eq();
  for (const Value* v : {&a, &b})
    if (!v->is_plain()) type_error("'" + op + "' needs data, got " + type_name(*v));
  if (op == "lt" || op == "<") return py_less(a.data, b.data);
  if (op == "gt" || op == ">") return py_less(b.data, a.data);
  if (op == "le" || op == "<=") return !py_less(b.data, a.data);
  return !py_less(a.data, b.data);  // ge
}

std::string title_filter(const std::string& s) {
  // Jinja2's do_title: words begin after '-', whitespace, '(', '{', '[' or '<'.
  std::string out;
  bool start = true;
  for (uint32_t c : text::decode(s)) {
    std::string ch;
    text::append(ch, c);
    out += start ? text::upper(ch) : text::lower(ch);
    start = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || text::is_space(c);
  }
  return out;
}

std::string indent_filter(std::string s, const std::string& pad, bool first, bool blank) {
  s += "\n";  // Jinja2's quirk for splitlines
  const auto lines = text::splitlines(s);
  std::string rv;
  if (pad.size() * lines.size() > (size_t{64} << 20)) type_error("a string above 64 MiB");
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + pad : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : pad + lines[i]);
  }
  if (first) rv = pad + rv;
  return rv;
}

std::string format_method(const std::string& fmt, const Args& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      type_error("str.format: single '}' encountered");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) type_error("str.format: single '{' encountered");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) type_error("str.format: format specs and conversions are not supported");
    const Value* v = nullptr;
    if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
      const size_t k = field.empty() ? auto_index++ : static_cast<size_t>(std::atoll(field.c_str()));
      if (k >= args.positional.size()) type_error("str.format: replacement index out of range");
      v = &args.positional[k];
    } else {
      for (const auto& [key, val] : args.keyword)
        if (key == field) v = &val;
      if (!v) type_error("str.format: missing keyword '" + field + "'");
    }
    out += to_str(*v);
    i = close;
  }
  return out;
}

Value string_method(const std::string& s, const std::string& name, const Args& args) {
  if (name == "split" || name == "rsplit") {
    auto b = bind(args, {"sep", "maxsplit"}, name);
    auto sep = opt_str(b[0], "split's sep");
    if (sep && sep->empty()) type_error("empty separator");
    const int64_t maxsplit = int_arg(b[1], -1, "maxsplit");
    if (name == "rsplit" && maxsplit >= 0) type_error("rsplit with maxsplit is not supported");
    Json out = Json::array();
    for (auto& part : text::split(s, sep, maxsplit)) out.push_back(part);
    return Value::of(out);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto b = bind(args, {"chars"}, name);
    return Value::of(text::strip(s, opt_str(b[0], name + "'s chars"), name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    auto b = bind(args, {"prefix"}, name);
    if (!b[0]) type_error(name + "() takes exactly one argument");
    const std::string p = str_arg(b[0], name + "'s argument");
    const bool r = p.size() <= s.size() && (name == "startswith" ? s.compare(0, p.size(), p) == 0
                                                                 : s.compare(s.size() - p.size(), p.size(), p) == 0);
    return Value::of(r);
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    bind(args, {}, name);
    return Value::of(name == "upper" ? text::upper(s) : name == "lower" ? text::lower(s)
                     : name == "title" ? text::title(s) : text::capitalize(s));
  }
  if (name == "replace") {
    auto b = bind(args, {"old", "new", "count"}, name);
    return Value::of(text::replace(s, str_arg(b[0], "replace's old"), str_arg(b[1], "replace's new"), int_arg(b[2], -1, "count")));
  }
  if (name == "format") return Value::of(format_method(s, args));
  if (name == "find") {
    auto b = bind(args, {"sub"}, name);
    const size_t at = s.find(str_arg(b[0], "find's argument"));
    return Value::of(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(text::length(s.substr(0, at))));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    auto b = bind(args, {"affix"}, name);
    const std::string a = str_arg(b[0], name + "'s argument");
    if (name == "removeprefix") return Value::of(s.compare(0, a.size(), a) == 0 ? s.substr(a.size()) : s);
    return Value::of(a.size() <= s.size() && s.compare(s.size() - a.size(), a.size(), a) == 0 ? s.substr(0, s.size() - a.size()) : s);
  }
  if (name == "join") {
    auto b = bind(args, {"iterable"}, name);
    if (!b[0]) type_error("join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const auto& item : iterate(*b[0])) {
      if (!item.is_string()) type_error("str.join: expected str instance");
      out += (first ? "" : s) + item.get<std::string>();
      first = false;
      if (out.size() > (size_t{64} << 20)) type_error("a string above 64 MiB");
    }
    return Value::of(out);
  }
  type_error("str." + name + "() is not supported (docs/chat-templates.md)");
}

}  // namespace

bool is_global(const std::string& name) {
  return name == "raise_exception" || name == "strftime_now" || name == "namespace" || name == "range" || name == "dict";
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) type_error("'" + obj.name + "' is undefined");
  if (!name.empty() && name[0] == '_') type_error("access to attribute '" + name + "' is unsafe");
  if (obj.kind == Value::Kind::ns) {
    auto it = obj.ns->attrs.find(name);
    if (it != obj.ns->attrs.end()) return *it->second;
    if (obj.ns->is_loop && (name == "cycle" || name == "changed")) type_error("loop." + name + " is not supported");
    return Value::undefined(name);
  }
  if (obj.kind != Value::Kind::data) type_error("attributes of a " + type_name(obj) + " are not supported");
  if (obj.seq != Value::Seq::list) type_error("attributes of a " + type_name(obj) + " are not supported");
  const Json& j = obj.data;
  if (j.is_object()) {
    if (kDictMethods.count(name)) return method(j, name);
    auto it = j.find(name);
    return it == j.end() ? Value::undefined(name) : Value::of(*it);
  }
  if ((j.is_number() || j.is_boolean()) && (name == "real" || name == "imag" || name == "numerator" ||
                                              name == "denominator" || name == "conjugate" || name == "bit_length"))
    type_error("attributes of numbers are not supported");
  if (j.is_string() && kStrMethods.count(name)) return method(j, name);
  if (j.is_array() && kListMethods.count(name)) return method(j, name);
  return Value::undefined(name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) type_error("'" + obj.name + "' is undefined");
  auto by_name = [&]() { return key.is_string() ? get_attr(obj, key.data.get<std::string>()) : Value::undefined("item"); };
  if (obj.kind == Value::Kind::ns) return by_name();
  if (!obj.is_plain()) return Value::undefined("item");
  const Json& j = obj.data;
  const bool int_key = key.is_plain() && (key.data.is_number_integer() || key.data.is_boolean());
  if ((j.is_array() || j.is_string()) && int_key) {
    const std::vector<uint32_t> cps = j.is_string() ? text::decode(j.get<std::string>()) : std::vector<uint32_t>{};
    const int64_t len = j.is_string() ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(j.size());
    int64_t i = key.data.is_boolean() ? key.data.get<bool>()
                : key.data.is_number_unsigned() && key.data.get<uint64_t>() > static_cast<uint64_t>(len) ? len
                                                                                                          : key.data.get<int64_t>();
    if (i < 0) i += len;
    if (i < 0 || i >= len) return Value::undefined("index");
    return Value::of(j.is_string() ? char_at(cps, static_cast<size_t>(i)) : j[static_cast<size_t>(i)]);
  }
  if (j.is_object() && key.is_string()) {
    auto it = j.find(key.data.get<std::string>());
    if (it != j.end()) return Value::of(*it);
  }
  if (j.is_object() && key.is_plain() && (key.data.is_array() || key.data.is_object()))
    type_error("unhashable type: '" + type_name(key) + "'");
  return by_name();
}

std::vector<Json> iterate(const Value& v, bool unpacking) {
  if (v.is_undefined()) return {};
  if (v.pairs && !unpacking)
    type_error("items() yields Python tuples; use them as `for key, value in ...` (docs/chat-templates.md)");
  v.consume();
  if (!v.is_data()) type_error("'" + type_name(v) + "' object is not iterable");
  const Json& j = v.data;
  std::vector<Json> out;
  if (j.is_array()) {
    out.assign(j.begin(), j.end());
  } else if (j.is_object()) {
    for (const auto& [k, x] : j.items()) out.emplace_back(k);
  } else if (j.is_string()) {
    const auto cps = text::decode(j.get<std::string>());
    for (size_t i = 0; i < cps.size(); ++i) out.push_back(char_at(cps, i));
  } else {
    type_error("'" + type_name(v) + "' object is not iterable");
  }
  return out;
}

bool known_test(const std::string& n) {
  static const std::set<std::string> names{
      "defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number", "integer", "float",
      "boolean", "true", "false", "odd", "even", "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "<",
      "le", "<=", "gt", ">", "ge", ">=", "in", "callable", "lower", "upper", "sameas"};
  return names.count(n) > 0;
}

bool known_filter(const std::string& n) {
  static const std::set<std::string> names{
      "tojson", "join", "default", "d", "map", "select", "reject", "selectattr", "rejectattr", "trim", "length",
      "count", "lower", "upper", "replace", "string", "int", "float", "first", "last", "list", "capitalize",
      "title", "indent", "items", "unique", "reverse", "safe", "abs"};
  return names.count(n) > 0;
}

bool apply_test(const std::string& name, const Value& v, const Args& args) {
  const bool data = v.is_data();
  const Json& j = v.data;
  auto arg = [&](size_t k) -> const Value& {
    if (args.positional.size() <= k || !args.keyword.empty()) type_error("test '" + name + "' needs an argument");
    return args.positional[k];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_plain() && j.is_null();
  if (name == "string") return v.is_plain() && j.is_string();
  if (name == "mapping") return v.is_plain() && j.is_object();
  if (name == "iterable") return v.is_undefined() || (data && (j.is_string() || j.is_array() || j.is_object()));
  if (name == "sequence") return v.is_undefined() || (v.is_plain() && (j.is_string() || j.is_array() || j.is_object()));
  if (name == "number") return is_number(v);
  if (name == "integer") return v.is_plain() && j.is_number_integer();
  if (name == "float") return v.is_plain() && j.is_number_float();
  if (name == "boolean") return v.is_plain() && j.is_boolean();
  if (name == "true") return v.is_plain() && j.is_boolean() && j.get<bool>();
  if (name == "false") return v.is_plain() && j.is_boolean() && !j.get<bool>();
  if (name == "odd" || name == "even") {
    const Value m = mod_value(v, Value::of(int64_t{2}));
    return truthy(m) == (name == "odd");
  }
  if (name == "divisibleby") return !truthy(mod_value(v, arg(0)));
  if (name == "in") {
    const Value& c = arg(0);
    if (c.is_undefined()) return false;
    if (!c.is_data()) type_error("argument of type '" + type_name(c) + "' is not iterable");
    if (c.data.is_string()) {
      if (!v.is_string()) type_error("'in <string>' requires string as left operand");
      return c.data.get<std::string>().find(j.get<std::string>()) != std::string::npos;
    }
    for (const auto& x : iterate(c))
      if (v.is_plain() && py_equal(j, x)) return true;
    return false;
  }
  if (name == "callable") return v.kind == Value::Kind::macro || v.kind == Value::Kind::function || v.kind == Value::Kind::method;
  if (name == "lower" || name == "upper") {
    const std::string s = to_str(v);
    return name == "lower" ? text::lower(s) == s && text::upper(s) != s : text::upper(s) == s && text::lower(s) != s;
  }
  if (name == "sameas") {
    const Value& o = arg(0);
    if (!(o.is_plain() && (o.data.is_null() || o.data.is_boolean())))
      type_error("'sameas' is supported against none, true and false only");
    return v.is_plain() && j.type() == o.data.type() && j == o.data;
  }
  return compare_test(name, v, arg(0));
}

Value apply_filter(const std::string& name, const Value& v, const Args& args) {
  if (name == "default" || name == "d") {
    auto b = bind(args, {"default_value", "boolean"}, name);
    const Value dflt = b[0] ? *b[0] : Value::of("");
    if (v.is_undefined() || (bool_arg(b[1], false) && !truthy(v))) return dflt;
    return v;
  }
  if (name == "tojson") {
    auto b = bind(args, {"ensure_ascii", "indent", "separators", "sort_keys"}, name);
    DumpOptions o;
    o.ensure_ascii = bool_arg(b[0], false);
    o.indent = static_cast<int>(int_arg(b[1], -1, "tojson's indent"));
    if (b[1] && o.indent < 0 && !(b[1]->is_plain() && b[1]->data.is_null())) o.indent = 0;
    if (o.indent > 64) type_error("tojson's indent above 64 is not supported");
    if (b[2] && !(b[2]->is_plain() && b[2]->data.is_null())) {
      if (!b[2]->is_plain() || !b[2]->data.is_array() || b[2]->data.size() != 2 || !b[2]->data[0].is_string() ||
          !b[2]->data[1].is_string())
        type_error("tojson's separators must be a pair of strings");
      o.item_separator = b[2]->data[0].get<std::string>();
      o.key_separator = b[2]->data[1].get<std::string>();
      if (o.item_separator.empty() || o.key_separator.empty()) type_error("empty tojson separators are not supported");
    }
    o.sort_keys = bool_arg(b[3], false);
    if (v.is_undefined()) type_error("Object of type Undefined is not JSON serializable");
    return Value::of(py_json_dumps(plain_or_fail(v, "tojson"), o));
  }
  if (name == "safe") return v;
  if (name == "length" || name == "count") {
    if (v.is_undefined()) return Value::of(int64_t{0});
    if (!v.is_data() || v.seq == Value::Seq::generator) type_error("object of type '" + type_name(v) + "' has no len()");
    if (v.data.is_string()) return Value::of(static_cast<int64_t>(text::length(v.data.get<std::string>())));
    if (v.data.is_array() || v.data.is_object()) return Value::of(static_cast<int64_t>(v.data.size()));
    type_error("object of type '" + type_name(v) + "' has no len()");
  }
  if (name == "string") return Value::of(to_str(v));
  if (name == "trim") {
    auto b = bind(args, {"chars"}, name);
    return Value::of(text::strip(to_str(v), opt_str(b[0], "trim's chars"), true, true));
  }
  if (name == "lower" || name == "upper" || name == "capitalize" || name == "title") {
    bind(args, {}, name);
    const std::string s = to_str(v);
    return Value::of(name == "lower" ? text::lower(s) : name == "upper" ? text::upper(s)
                     : name == "capitalize" ? text::capitalize(s) : title_filter(s));
  }
  if (name == "replace") {
    auto b = bind(args, {"old", "new", "count"}, name);
    if (!b[0] || !b[1]) type_error("replace needs old and new");
    return Value::of(text::replace(to_str(v), to_str(*b[0]), to_str(*b[1]), int_arg(b[2], -1, "replace's count")));
  }
  if (name == "int") {
    auto b = bind(args, {"default", "base"}, name);
    if (int_arg(b[1], 10, "int's base") != 10) type_error("int with a base other than 10 is not supported");
    const Value dflt = b[0] ? *b[0] : Value::of(int64_t{0});
    if (!v.is_plain()) return dflt;
    const Json& j = v.data;
    if (j.is_boolean()) return Value::of(static_cast<int64_t>(j.get<bool>()));
    if (j.is_number_integer()) return v;
    if (j.is_number_float()) {
      const double d = j.get<double>();
      if (!std::isfinite(d)) return dflt;
      if (std::fabs(d) >= 9.2e18) type_error("int() beyond 64 bits");
      return Value::of(static_cast<int64_t>(d));
    }
    if (j.is_string()) {
      if (auto i = parse_int(j.get<std::string>())) return Value::of(*i);
      if (auto f = parse_float(j.get<std::string>())) {
        if (!std::isfinite(*f)) return dflt;
        if (std::fabs(*f) >= 9.2e18) type_error("int() beyond 64 bits");
        return Value::of(static_cast<int64_t>(*f));
      }
    }
    return dflt;
  }
  if (name == "float") {
    auto b = bind(args, {"default"}, name);
    const Value dflt = b[0] ? *b[0] : Value::of(0.0);
    if (!v.is_plain()) return dflt;
    const Json& j = v.data;
    if (j.is_boolean()) return Value::of(j.get<bool>() ? 1.0 : 0.0);
    if (j.is_number()) return Value::of(j.get<double>());
    if (j.is_string())
      if (auto f = parse_float(j.get<std::string>())) return Value::of(*f);
    return dflt;
  }
  if (name == "abs") {
    if (!is_number(v)) type_error("bad operand type for abs(): '" + type_name(v) + "'");
    if (v.data.is_number_float()) return Value::of(std::fabs(v.data.get<double>()));
    const int64_t i = v.data.is_boolean() ? v.data.get<bool>() : v.data.get<int64_t>();
    if (i == std::numeric_limits<int64_t>::min()) type_error("integer arithmetic beyond 64 bits");
    return Value::of(i < 0 ? -i : i);
  }
  if (name == "first") {
    const auto items = iterate(v);
    return items.empty() ? Value::undefined("first item") : Value::of(items.front());
  }
  if (name == "last") {
    if (v.is_data() && v.seq == Value::Seq::generator) type_error("'generator' object is not reversible");
    const auto items = iterate(v);
    return items.empty() ? Value::undefined("last item") : Value::of(items.back());
  }
  if (name == "list") return Value::of(Json(iterate(v)));
  if (name == "reverse") {
    if (v.is_string()) {
      const auto cps = text::decode(v.data.get<std::string>());
      return Value::of(text::encode(std::vector<uint32_t>(cps.rbegin(), cps.rend())));
    }
    auto items = iterate(v);
    return generator(Json(std::vector<Json>(items.rbegin(), items.rend())));
  }
  if (name == "indent") {
    auto b = bind(args, {"width", "first", "blank"}, name);
    std::string pad(4, ' ');
    if (b[0]) {
      if (b[0]->is_string()) {
        pad = b[0]->data.get<std::string>();
      } else {
        const int64_t w = int_arg(b[0], 4, "indent's width");
        if (w < 0 || w > 1000) type_error("indent's width out of range");
        pad.assign(static_cast<size_t>(w), ' ');
      }
    }
    return Value::of(indent_filter(to_str(v), pad, bool_arg(b[1], false), bool_arg(b[2], false)));
  }
  if (name == "items") {
    if (v.is_undefined()) return generator(Json::array());
    if (!v.is_plain() || !v.data.is_object()) type_error("the items filter needs a mapping, got " + type_name(v));
    Json out = Json::array();
    for (const auto& [k, x] : v.data.items()) out.push_back(Json::array({k, x}));
    Value pairs = generator(out);
    pairs.pairs = true;
    return pairs;
  }
  if (name == "join") {
    auto b = bind(args, {"d", "attribute"}, name);
    const std::string sep = b[0] ? to_str(*b[0]) : "";
    const auto attribute = opt_str(b[1], "join's attribute");
    std::string out;
    bool first = true;
    for (const auto& item : iterate(v)) {
      out += (first ? "" : sep) + (attribute ? to_str(attr_path(item, *attribute)) : py_str(item));
      first = false;
      if (out.size() > (size_t{64} << 20)) type_error("a string above 64 MiB");
    }
    return Value::of(out);
  }
  if (name == "unique") {
    auto b = bind(args, {"case_sensitive", "attribute"}, name);
    const bool case_sensitive = bool_arg(b[0], false);
    const auto attribute = opt_str(b[1], "unique's attribute");
    Json out = Json::array();
    std::vector<Json> seen;
    for (const auto& item : iterate(v)) {
      Json key = attribute ? plain_or_fail(attr_path(item, *attribute), "unique's attribute") : item;
      if (!case_sensitive && key.is_string()) key = text::lower(key.get<std::string>());
      bool dup = false;
      for (const auto& s : seen) dup |= py_equal(s, key);
      if (dup) continue;
      seen.push_back(key);
      out.push_back(item);
    }
    return generator(out);
  }
  if (name == "map") {
    Json out = Json::array();
    std::optional<std::string> attribute;
    std::optional<Value> dflt;
    for (const auto& [k, x] : args.keyword) {
      if (k == "attribute") attribute = str_arg(x, "map's attribute");
      else if (k == "default") dflt = x;
      else if (!attribute && args.positional.empty()) type_error("map() got an unexpected keyword argument '" + k + "'");
    }
    if (attribute) {
      if (!args.positional.empty()) type_error("map() takes either an attribute or a filter name");
      for (const auto& item : iterate(v)) {
        const Value x = attr_path(item, *attribute, dflt);
        out.push_back(plain_or_fail(x, "map's result"));
      }
      return generator(out);
    }
    if (args.positional.empty() || !args.positional[0].is_string()) type_error("map() needs a filter name or attribute=");
    const std::string filter = args.positional[0].data.get<std::string>();
    if (!known_filter(filter)) type_error("unknown filter '" + filter + "'");
    Args rest{std::vector<Value>(args.positional.begin() + 1, args.positional.end()), args.keyword};
    for (const auto& item : iterate(v)) out.push_back(plain_or_fail(apply_filter(filter, Value::of(item), rest), "map's result"));
    return generator(out);
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    if (!args.keyword.empty()) type_error(name + "() takes no keyword arguments");
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep_if = name == "select" || name == "selectattr";
    size_t k = 0;
    std::string attribute;
    if (by_attr) {
      if (args.positional.empty()) type_error(name + "() needs an attribute");
      attribute = str_arg(args.positional[k++], name + "'s attribute");
    }
    std::optional<std::string> test;
    if (k < args.positional.size()) test = str_arg(args.positional[k++], name + "'s test");
    if (test && !known_test(*test)) type_error("unknown test '" + *test + "'");
    Args rest{std::vector<Value>(args.positional.begin() + k, args.positional.end()), {}};
    Json out = Json::array();
    for (const auto& item : iterate(v)) {
      const Value x = by_attr ? attr_path(item, attribute) : Value::of(item);
      const bool pass = test ? apply_test(*test, x, rest) : truthy(x);
      if (pass == keep_if) out.push_back(item);
    }
    return generator(out);
  }
  type_error("unknown filter '" + name + "'");
}

Value call_method(const Value& m, const Args& args) {
  const Json& obj = m.data;
  if (obj.is_string()) return string_method(obj.get<std::string>(), m.name, args);
  if (obj.is_object()) {
    if (m.name == "items" || m.name == "keys" || m.name == "values") {
      bind(args, {}, m.name);
      Json out = Json::array();
      for (const auto& [k, x] : obj.items())
        out.push_back(m.name == "items" ? Json::array({k, x}) : m.name == "keys" ? Json(k) : x);
      Value view = Value::of(out, Value::Seq::view);
      view.pairs = m.name == "items";
      return view;
    }
    if (m.name == "get") {
      auto b = bind(args, {"key", "default"}, "get");
      if (!b[0]) type_error("get expected at least 1 argument");
      if (b[0]->is_string()) {
        auto it = obj.find(b[0]->data.get<std::string>());
        if (it != obj.end()) return Value::of(*it);
      }
      return b[1] ? *b[1] : Value::of(nullptr);
    }
  }
  type_error(type_name(Value::of(obj)) + "." + m.name + "() is not supported (the sandbox is immutable; docs/chat-templates.md)");
}

Value call_global(const std::string& name, const Args& args) {
  if (name == "raise_exception") {
    auto b = bind(args, {"message"}, name);
    throw TemplateRaised{b[0] ? to_str(*b[0]) : ""};
  }
  if (name == "strftime_now") {
    auto b = bind(args, {"format"}, name);
    const std::string fmt = str_arg(b[0], "strftime_now's format");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    std::string buf(256 + fmt.size() * 16, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &local);
    if (n == 0 && !fmt.empty()) type_error("strftime_now: the format expands to nothing or too much");
    buf.resize(n);
    return Value::of(buf);
  }
  if (name == "namespace" || name == "dict") {
    if (!args.positional.empty()) type_error(name + "() with positional arguments is not supported");
    if (name == "dict") {
      Json out = Json::object();
      for (const auto& [k, x] : args.keyword) out[k] = plain_or_fail(x, "dict()'s value");
      return Value::of(out);
    }
    Value ns;
    ns.kind = Value::Kind::ns;
    ns.ns = std::make_shared<Namespace>();
    for (const auto& [k, x] : args.keyword) ns.ns->attrs[k] = std::make_shared<Value>(x);
    return ns;
  }
  if (name == "range") {
    if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) type_error("range() takes 1 to 3 integers");
    int64_t start = 0, stop = 0, step = 1;
    if (args.positional.size() == 1) {
      stop = int_arg(args.positional[0], 0, "range's argument");
    } else {
      start = int_arg(args.positional[0], 0, "range's argument");
      stop = int_arg(args.positional[1], 0, "range's argument");
      if (args.positional.size() == 3) step = int_arg(args.positional[2], 1, "range's argument");
    }
    if (step == 0) type_error("range() arg 3 must not be zero");
    Json out = Json::array();
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      if (out.size() >= 100000) type_error("range() longer than 100000 items is not supported");
      out.push_back(i);
      if (__builtin_add_overflow(i, step, &i)) break;
    }
    return Value::of(out, Value::Seq::view);
  }
  type_error("'" + name + "' is undefined");
}

}  // namespace ds::chat_template
