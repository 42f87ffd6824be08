#include "lexer.hpp"

#include <cctype>

#include "error.hpp"
#include "text.hpp"

namespace ds::chat_template {

std::string normalize_source(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

namespace {

bool ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  Lexer(const std::string& src, const std::string& name) : src_(src), name_(name) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src.size(); ++i)
      if (src[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit(Token::Type::data, src_.substr(pos_), pos_);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (modifier != '-' && modifier != '+') modifier = '\0';
      std::string data = src_.substr(pos_, tag - pos_);
      if (modifier == '-') {
        data = rstrip_unicode(data);
      } else if (modifier != '+' && kind != '{') {
        // lstrip_blocks: the text between the line's start and the tag, if only whitespace, goes.
        const size_t l_pos = data.rfind('\n') == std::string::npos ? 0 : data.rfind('\n') + 1;
        if ((l_pos > 0 || line_starting) && l_pos < data.size() && all_space(data.substr(l_pos)))
          data.resize(l_pos);
      }
      if (!data.empty()) emit(Token::Type::data, data, pos_);
      const size_t open = tag;
      pos_ = tag + 2 + (modifier ? 1 : 0);
      if (kind == '#') {
        line_starting = comment(open);
      } else {
        line_starting = tag_body(open, kind == '{');
      }
    }
    Token eof{Token::Type::eof, "", 0, 0};
    position(src_.size(), eof);
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  static std::string rstrip_unicode(const std::string& s) { return text::strip(s, std::nullopt, false, true); }
  static bool all_space(const std::string& s) {
    for (uint32_t c : text::decode(s))
      if (!text::is_space(c)) return false;
    return true;
  }

  void position(size_t offset, Token& t) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      (line_starts_[mid] <= offset ? lo : hi) = mid;
    }
    t.line = static_cast<int>(lo) + 1;
    t.column = static_cast<int>(text::length(src_.substr(line_starts_[lo], offset - line_starts_[lo]))) + 1;
  }
  void emit(Token::Type type, std::string value, size_t offset) {
    Token t{type, std::move(value), 0, 0};
    position(offset, t);
    tokens_.push_back(std::move(t));
  }
  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    Token t{};
    position(offset, t);
    fail_at(name_, t.line, t.column, message);
  }

  // After the end of a tag: returns whether the consumed text ends with a newline (Jinja2's
  // line_starting, which lets lstrip_blocks act on the next line).
  bool end_tag(size_t after, char modifier, bool trim_newline) {
    pos_ = after;
    if (modifier == '-') {
      while (pos_ < src_.size() && ascii_or_unicode_space_at(pos_)) advance_space();
    } else if (modifier != '+' && trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    return pos_ > 0 && src_[pos_ - 1] == '\n';
  }
  bool ascii_or_unicode_space_at(size_t at) const {
    const auto c = static_cast<unsigned char>(src_[at]);
    if (c < 0x80) return ascii_space(static_cast<char>(c)) || (c >= 0x1C && c <= 0x1F);
    return text::is_space(text::decode(src_.substr(at, c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4))[0]);
  }
  void advance_space() {
    const auto c = static_cast<unsigned char>(src_[pos_]);
    pos_ += c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  }

  bool comment(size_t open) {
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) fail(open, "missing end of comment tag");
    char modifier = close > pos_ && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : '\0';
    return end_tag(close + 2, modifier, true);
  }

  // Tokens inside {{ }} or {% %}; returns line_starting after the closing tag.
  bool tag_body(size_t open, bool variable) {
    emit(variable ? Token::Type::var_begin : Token::Type::block_begin, "", open);
    const std::string close = variable ? "}}" : "%}";
    std::vector<char> balance;
    if (!variable) check_raw(open);
    while (true) {
      while (pos_ < src_.size() && ascii_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) fail(open, std::string("unexpected end of template, expected '") + close + "'");
      if (balance.empty()) {
        for (char modifier : {'-', '+', '\0'}) {
          if (modifier == '+' && variable) continue;
          const size_t at = pos_ + (modifier ? 1 : 0);
          if ((!modifier || src_[pos_] == modifier) && src_.compare(at, 2, close) == 0) {
            emit(variable ? Token::Type::var_end : Token::Type::block_end, "", pos_);
            return end_tag(at + 2, modifier, !variable);
          }
        }
      }
      lex_one(balance);
    }
  }

  void check_raw(size_t open) {
    size_t i = pos_;
    while (i < src_.size() && ascii_space(src_[i])) ++i;
    if (src_.compare(i, 3, "raw") == 0 && (i + 3 >= src_.size() || !std::isalnum(static_cast<unsigned char>(src_[i + 3]))))
      fail(open, "the raw tag is not supported (docs/chat-templates.md)");
  }

  void lex_one(std::vector<char>& balance) {
    const size_t start = pos_;
    const char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
      emit(Token::Type::name, src_.substr(start, pos_ - start), start);
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      number(start);
      return;
    }
    if (c == '\'' || c == '"') {
      string_literal(start);
      return;
    }
    static const char* const two[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : two) {
      if (src_.compare(pos_, 2, op) == 0) {
        pos_ += 2;
        emit(Token::Type::op, op, start);
        return;
      }
    }
    if (std::string("+-/*%~[](){}<>=.:|,;").find(c) == std::string::npos || c == '\0')
      fail(start, std::string("unexpected character '") + (static_cast<unsigned char>(c) < 0x80 ? std::string(1, c) : "non-ASCII") + "'");
    if (c == '(' || c == '[' || c == '{') balance.push_back(c);
    if (c == ')' || c == ']' || c == '}') {
      const char want = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (balance.empty()) fail(start, std::string("unexpected '") + c + "'");
      if (balance.back() != want) fail(start, std::string("unexpected '") + c + "'");
      balance.pop_back();
    }
    ++pos_;
    emit(Token::Type::op, std::string(1, c), start);
  }

  // Digits with '_' separators, an optional fraction and exponent (jinja2.lexer's integer_re and
  // float_re).
  size_t digits(size_t at) const {
    size_t i = at;
    while (i < src_.size() && std::isdigit(static_cast<unsigned char>(src_[i]))) {
      ++i;
      if (i + 1 < src_.size() && src_[i] == '_' && std::isdigit(static_cast<unsigned char>(src_[i + 1]))) ++i;
    }
    return i;
  }
  void number(size_t start) {
    size_t i = digits(start);
    bool floating = false;
    // float_re's (?<!\.): after a '.', as in `x.0.1`, digits are an integer index.
    const bool after_dot = start > 0 && src_[start - 1] == '.';
    if (!after_dot && i + 1 < src_.size() && src_[i] == '.' && std::isdigit(static_cast<unsigned char>(src_[i + 1]))) {
      i = digits(i + 1);
      floating = true;
    }
    if (!after_dot && i < src_.size() && (src_[i] == 'e' || src_[i] == 'E')) {
      size_t j = i + 1;
      if (j < src_.size() && (src_[j] == '+' || src_[j] == '-')) ++j;
      if (j < src_.size() && std::isdigit(static_cast<unsigned char>(src_[j]))) {
        i = digits(j);
        floating = true;
      }
    }
    std::string value;
    for (size_t k = start; k < i; ++k)
      if (src_[k] != '_') value += src_[k];
    pos_ = i;
    emit(floating ? Token::Type::floating : Token::Type::integer, value, start);
  }

  // Python's unicode-escape decoding of the literal's body, as jinja2.lexer does it.
  void string_literal(size_t start) {
    const char quote = src_[start];
    std::string out;
    size_t i = start + 1;
    while (true) {
      if (i >= src_.size()) fail(start, "unterminated string");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) fail(start, "unterminated string");
      const char e = src_[i + 1];
      i += 2;
      auto hex = [&](int n) {
        if (i + n > src_.size()) fail(start, "truncated \\x, \\u or \\U escape");
        uint32_t cp = 0;
        for (int k = 0; k < n; ++k) {
          const char h = src_[i + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) fail(start, "truncated \\x, \\u or \\U escape");
          cp = cp * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        i += n;
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail(start, "escape outside Unicode scalar values");
        text::append(out, cp);
      };
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        case 'N': fail(start, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = e - '0';
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k) cp = cp * 8 + (src_[i++] - '0');
            text::append(out, cp);
          } else {  // an unknown escape keeps its backslash
            out += '\\';
            out += e;
          }
      }
    }
    pos_ = i + 1;
    emit(Token::Type::string, out, start);
  }

  const std::string& src_;
  const std::string& name_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

bool valid_utf8(const std::string& s, size_t& bad) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >= 0xC2 && c < 0xE0) ? 2 : (c >= 0xE0 && c < 0xF0) ? 3 : (c >= 0xF0 && c < 0xF5) ? 4 : 0;
    if (n == 0 || i + n > s.size()) {
      bad = i;
      return false;
    }
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) {
        bad = i;
        return false;
      }
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
      bad = i;
      return false;
    }
    i += n;
  }
  return true;
}

}  // namespace

std::vector<Token> tokenize(const std::string& source, const std::string& name) {
  size_t bad = 0;
  if (!valid_utf8(source, bad)) {
    int line = 1;
    for (size_t i = 0; i < bad; ++i) line += source[i] == '\n';
    fail_at(name, line, 1, "the template is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  }
  return Lexer(source, name).run();
}

}  // namespace ds::chat_template
