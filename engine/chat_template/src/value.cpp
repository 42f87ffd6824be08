#include "value.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "text.hpp"

namespace ds::chat_template {

void Value::consume() const {
  if (seq != Seq::generator || !consumed) return;
  if (*consumed) throw std::runtime_error("a generator used a second time (Python's would be empty); add |list");
  *consumed = true;
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return "undefined";
    case Value::Kind::ns: return v.ns->is_loop ? "LoopContext" : "Namespace";
    case Value::Kind::macro: return "Macro";
    case Value::Kind::function: return "function";
    case Value::Kind::method: return "method";
    case Value::Kind::data: break;
  }
  if (v.seq == Value::Seq::generator) return "generator";
  if (v.seq == Value::Seq::view) return "dict view";
  const Json& j = v.data;
  if (j.is_null()) return "NoneType";
  if (j.is_boolean()) return "bool";
  if (j.is_number_float()) return "float";
  if (j.is_number()) return "int";
  if (j.is_string()) return "str";
  if (j.is_array()) return "list";
  return "dict";
}

bool truthy(const Value& v) {
  if (v.kind == Value::Kind::undefined) return false;
  if (v.kind != Value::Kind::data || v.seq == Value::Seq::generator) return true;
  const Json& j = v.data;
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_float()) return j.get<double>() != 0.0;
  if (j.is_number_unsigned()) return j.get<uint64_t>() != 0;
  if (j.is_number()) return j.get<int64_t>() != 0;
  if (j.is_string()) return !j.get_ref<const std::string&>().empty();
  return !j.empty();
}

std::string py_repr(const Json& j) {
  if (j.is_string()) return text::repr(j.get<std::string>());
  if (j.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + py_repr(j[i]);
    return out + "]";
  }
  if (j.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : j.items()) {
      out += (first ? "" : ", ") + text::repr(k) + ": " + py_repr(v);
      first = false;
    }
    return out + "}";
  }
  return py_str(j);
}

std::string py_str(const Json& j) {
  if (j.is_null()) return "None";
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_number_float()) return text::float_repr(j.get<double>());
  if (j.is_number_unsigned()) return std::to_string(j.get<uint64_t>());
  if (j.is_number()) return std::to_string(j.get<int64_t>());
  if (j.is_string()) return j.get<std::string>();
  return py_repr(j);
}

std::string to_str(const Value& v) {
  if (v.kind == Value::Kind::undefined) return "";
  if (v.kind != Value::Kind::data || v.seq != Value::Seq::list)
    throw std::runtime_error("printing a " + type_name(v) + " (Jinja2 prints its object address)");
  return py_str(v.data);
}

namespace {

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (uint32_t c : text::decode(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c >= 0x10000) {  // a surrogate pair, as json.dumps writes it
            const uint32_t v = c - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
          }
          out += buf;
        } else {
          text::append(out, c);
        }
    }
  }
  out += '"';
}

void dump(std::string& out, const Json& j, const DumpOptions& o, int level) {
  const std::string item_sep = !o.item_separator.empty() ? o.item_separator : (o.indent >= 0 ? "," : ", ");
  const std::string key_sep = !o.key_separator.empty() ? o.key_separator : ": ";
  auto newline = [&](int depth) {
    if (o.indent >= 0) out += "\n" + std::string(static_cast<size_t>(o.indent) * depth, ' ');
  };
  if (j.is_string()) {
    dump_string(out, j.get_ref<const std::string&>(), o.ensure_ascii);
  } else if (j.is_null()) {
    out += "null";
  } else if (j.is_boolean()) {
    out += j.get<bool>() ? "true" : "false";
  } else if (j.is_number_float()) {
    const double d = j.get<double>();
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : text::float_repr(d);
  } else if (j.is_number()) {
    out += py_str(j);
  } else if (j.is_array()) {
    if (j.empty()) {
      out += "[]";
      return;
    }
    out += "[";
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) out += item_sep;
      newline(level + 1);
      dump(out, j[i], o, level + 1);
    }
    newline(level);
    out += "]";
  } else {
    if (j.empty()) {
      out += "{}";
      return;
    }
    std::vector<std::pair<std::string, const Json*>> items;
    for (const auto& [k, v] : j.items()) items.emplace_back(k, &v);
    if (o.sort_keys)
      std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    out += "{";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += item_sep;
      newline(level + 1);
      dump_string(out, items[i].first, o.ensure_ascii);
      out += key_sep;
      dump(out, *items[i].second, o, level + 1);
    }
    newline(level);
    out += "}";
  }
}

// Python numbers: bool is an int; int and float compare by value.
bool numeric(const Json& j) { return j.is_number() || j.is_boolean(); }
double as_double(const Json& j) {
  if (j.is_boolean()) return j.get<bool>() ? 1.0 : 0.0;
  return j.get<double>();
}
bool integral(const Json& j) { return j.is_boolean() || j.is_number_integer(); }
// int64/uint64 exact comparison (doubles would round above 2**53).
int compare_integers(const Json& a, const Json& b) {
  // Exact for the whole int64 and uint64 ranges (doubles would round above 2**53).
  auto split = [](const Json& j, bool& negative, uint64_t& magnitude) {
    if (j.is_boolean()) {
      negative = false;
      magnitude = j.get<bool>();
    } else if (j.is_number_unsigned()) {
      negative = false;
      magnitude = j.get<uint64_t>();
    } else {
      const int64_t v = j.get<int64_t>();
      negative = v < 0;
      magnitude = negative ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    }
  };
  bool na = false, nb = false;
  uint64_t ma = 0, mb = 0;
  split(a, na, ma);
  split(b, nb, mb);
  if (na != nb) return na ? -1 : 1;
  if (ma == mb) return 0;
  return (ma < mb) != na ? -1 : 1;
}

}  // namespace

std::string py_json_dumps(const Json& j, const DumpOptions& options) {
  std::string out;
  dump(out, j, options, 0);
  return out;
}

bool py_equal(const Json& a, const Json& b) {
  if (numeric(a) && numeric(b)) {
    if (integral(a) && integral(b)) return compare_integers(a, b) == 0;
    return as_double(a) == as_double(b);
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!py_equal(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object()) {  // dict equality ignores order
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a.items()) {
      auto it = b.find(k);
      if (it == b.end() || !py_equal(v, *it)) return false;
    }
    return true;
  }
  return a == b;
}

bool py_less(const Json& a, const Json& b) {
  if (numeric(a) && numeric(b)) {
    if (integral(a) && integral(b)) return compare_integers(a, b) < 0;
    return as_double(a) < as_double(b);
  }
  if (a.is_string() && b.is_string()) return a.get_ref<const std::string&>() < b.get_ref<const std::string&>();
  if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (!py_equal(a[i], b[i])) return py_less(a[i], b[i]);
    }
    return a.size() < b.size();
  }
  throw std::runtime_error("'<' not supported between instances of these types");
}

}  // namespace ds::chat_template
