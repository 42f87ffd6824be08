#include "text.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <algorithm>

namespace ds::chat_template::text {

std::vector<uint32_t> decode(const std::string& s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i + n > s.size()) n = 1;  // unreachable for valid UTF-8; keeps a bad byte from overrunning
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string encode(const std::vector<uint32_t>& cps) {
  std::string out;
  for (uint32_t cp : cps) append(out, cp);
  return out;
}

size_t length(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

// One code point's lower or upper case; ß and the few that grow are handled by the callers.
uint32_t to_lower(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}
uint32_t to_upper(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3B1 && c <= 0x3CB) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}
bool is_cased(uint32_t c) { return to_lower(c) != c || to_upper(c) != c || c == 0xDF; }
void append_upper(std::string& out, uint32_t c) {
  if (c == 0xDF) {
    out += "SS";
  } else {
    append(out, to_upper(c));
  }
}

}  // namespace

std::string lower(const std::string& s) {
  std::string out;
  for (uint32_t c : decode(s)) append(out, to_lower(c));
  return out;
}

std::string upper(const std::string& s) {
  std::string out;
  for (uint32_t c : decode(s)) append_upper(out, c);
  return out;
}

std::string capitalize(const std::string& s) {
  std::string out;
  bool first = true;
  for (uint32_t c : decode(s)) {
    if (first) {
      append_upper(out, c);  // CPython uses title case here, equal to upper case in our ranges
    } else {
      append(out, to_lower(c));
    }
    first = false;
  }
  return out;
}

std::string title(const std::string& s) {
  std::string out;
  bool previous_cased = false;
  for (uint32_t c : decode(s)) {
    if (previous_cased) {
      append(out, to_lower(c));
    } else {
      append_upper(out, c);
    }
    previous_cased = is_cased(c);
  }
  return out;
}

std::string strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  const auto cps = decode(s);
  std::vector<uint32_t> set;
  if (chars) set = decode(*chars);
  auto strips = [&](uint32_t c) {
    if (!chars) return is_space(c);
    for (uint32_t x : set)
      if (x == c) return true;
    return false;
  };
  size_t begin = 0, end = cps.size();
  if (left)
    while (begin < end && strips(cps[begin])) ++begin;
  if (right)
    while (end > begin && strips(cps[end - 1])) --end;
  return encode(std::vector<uint32_t>(cps.begin() + begin, cps.begin() + end));
}

std::vector<std::string> split(const std::string& s, const std::optional<std::string>& sep, long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<long>(out.size()) < maxsplit) {
      const size_t at = s.find(*sep, pos);
      if (at == std::string::npos) break;
      out.push_back(s.substr(pos, at - pos));
      pos = at + sep->size();
    }
    out.push_back(s.substr(pos));
    return out;
  }
  const auto cps = decode(s);
  size_t i = 0;
  while (true) {
    while (i < cps.size() && is_space(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<long>(out.size()) == maxsplit) {  // the rest, as it is
      out.push_back(encode(std::vector<uint32_t>(cps.begin() + i, cps.end())));
      break;
    }
    const size_t start = i;
    while (i < cps.size() && !is_space(cps[i])) ++i;
    out.push_back(encode(std::vector<uint32_t>(cps.begin() + start, cps.begin() + i)));
  }
  return out;
}

std::string replace(const std::string& s, const std::string& old, const std::string& with, long count) {
  // The result's size is known before it is built: refuse what a template cannot need.
  const size_t limit = size_t{64} << 20;
  if (!with.empty() && with.size() > old.size()) {
    size_t n = old.empty() ? length(s) + 1 : 0;
    for (size_t at = old.empty() ? std::string::npos : s.find(old); at != std::string::npos; at = s.find(old, at + old.size())) ++n;
    if (count >= 0 && n > static_cast<size_t>(count)) n = static_cast<size_t>(count);
    if (n > 0 && (with.size() - old.size()) > (limit - std::min(limit, s.size())) / n) throw std::runtime_error("a string above 64 MiB");
  }
  std::string out;
  if (old.empty()) {  // Python inserts `with` before every code point and at the end
    long done = 0;
    for (uint32_t c : decode(s)) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      append(out, c);
    }
    if (count < 0 || done < count) out += with;
    return out;
  }
  size_t pos = 0;
  long done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += with;
    pos = at + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::vector<std::string> splitlines(const std::string& s) {
  std::vector<std::string> out;
  const auto cps = decode(s);
  std::vector<uint32_t> line;
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t c = cps[i];
    const bool breaks = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
                        c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!breaks) {
      line.push_back(c);
      continue;
    }
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    out.push_back(encode(line));
    line.clear();
  }
  if (!line.empty()) out.push_back(encode(line));
  return out;
}

namespace {
// str.isprintable(): false for controls, separators other than space, and format characters.
// The ranges are the ones chat text meets; rarer unassigned or private code points print as-is.
bool printable(uint32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000 || c == 0xFEFF)
    return false;
  if (c >= 0xD800 && c <= 0xDFFF) return false;
  if (c >= 0xE000 && c <= 0xF8FF) return false;
  if (c == 0xFFF9 || c == 0xFFFA || c == 0xFFFB) return false;
  return true;
}
}  // namespace

std::string repr(const std::string& s) {
  const auto cps = decode(s);
  bool single = false, dbl = false;
  for (uint32_t c : cps) {
    single |= c == '\'';
    dbl |= c == '"';
  }
  const char quote = single && !dbl ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (uint32_t c : cps) {
    if (c == static_cast<uint32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!printable(c)) {
      std::snprintf(buf, sizeof buf, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", c);
      out += buf;
    } else {
      append(out, c);
    }
  }
  out += quote;
  return out;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  // buf is [-]d[.ddd]e(+|-)XX: take its digits and decimal exponent, then lay them out as repr does.
  std::string mantissa(buf, std::strchr(buf, 'e'));
  const int exponent = std::atoi(std::strchr(buf, 'e') + 1);
  const bool negative = mantissa[0] == '-';
  std::string digits;
  for (char c : mantissa)
    if (c >= '0' && c <= '9') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent >= 0) {
      std::string whole = digits.substr(0, std::min<size_t>(digits.size(), exponent + 1));
      whole.append(exponent + 1 - whole.size(), '0');
      std::string frac = digits.size() > static_cast<size_t>(exponent + 1) ? digits.substr(exponent + 1) : "0";
      out += whole + "." + frac;
    } else {
      out += "0." + std::string(-exponent - 1, '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    std::snprintf(buf, sizeof buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += buf;
  }
  return out;
}

}  // namespace ds::chat_template::text
