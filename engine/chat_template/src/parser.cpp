#include "parser.hpp"

#include <cerrno>
#include <cstdlib>

#include "builtins.hpp"
#include "error.hpp"

namespace ds::chat_template {
namespace {

using T = Token::Type;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& name) : toks_(tokens), name_(name) {}

  Body parse() {
    std::string end;
    Body body = statements({}, end);
    return body;
  }

 private:
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool is_op(const char* op) const { return cur().type == T::op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == T::name && cur().value == n; }
  [[noreturn]] void fail(const Token& t, const std::string& msg) const { fail_at(name_, t.line, t.column, msg); }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(cur(), std::string("expected '") + op + "', found " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != T::name) fail(cur(), "expected a name, found " + describe(cur()));
    return next().value;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::eof: return "the end of the template";
      case T::block_end: return "the end of the tag";
      case T::var_end: return "the end of the print statement";
      case T::data: return "text";
      default: return "'" + t.value + "'";
    }
  }
  void expect_block_end() {
    if (cur().type != T::block_end) fail(cur(), "expected the end of the tag, found " + describe(cur()));
    next();
  }

  template <class N>
  std::unique_ptr<N> node(typename N::Kind kind, const Token& at) {
    auto n = std::make_unique<N>();
    n->kind = kind;
    n->line = at.line;
    n->column = at.column;
    return n;
  }

  // Statements until a block tag whose keyword is in `ends` (its keyword is returned in `end`,
  // the tag's `{%` and keyword consumed), or the end of the template when `ends` is empty.
  Body statements(const std::vector<std::string>& ends, std::string& end) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == T::eof) {
        if (!ends.empty()) fail(t, "unexpected end of template, expected '" + ends.back() + "'");
        return body;
      }
      if (t.type == T::data) {
        auto s = node<Stmt>(Stmt::Kind::text, t);
        s->text = next().value;
        body.push_back(std::move(s));
      } else if (t.type == T::var_begin) {
        next();
        auto s = node<Stmt>(Stmt::Kind::output, t);
        s->expr = expression();
        if (cur().type != T::var_end) fail(cur(), "expected '}}', found " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else {  // block_begin
        next();
        const Token& kw = cur();
        if (kw.type != T::name) fail(kw, "expected a tag name, found " + describe(kw));
        for (const auto& e : ends) {
          if (kw.value == e) {
            end = e;
            next();
            return body;
          }
        }
        body.push_back(statement());
      }
    }
  }

  // Nesting beyond this is refused: the parser and evaluator recurse, and no template needs it.
  struct Depth {
    Parser& p;
    explicit Depth(Parser& parser, const Token& at) : p(parser) {
      if (++p.depth_ > 200) p.fail(at, "nesting deeper than 200 levels");
    }
    ~Depth() { --p.depth_; }
  };

  std::unique_ptr<Stmt> statement() {
    const Token& kw = cur();
    Depth guard(*this, kw);
    const std::string& k = kw.value;
    if (k == "if") return if_stmt();
    if (k == "for") return for_stmt();
    if (k == "set") return set_stmt();
    if (k == "macro") return macro_stmt();
    if (k == "generation") {
      next();
      expect_block_end();
      auto s = node<Stmt>(Stmt::Kind::generation, kw);
      std::string end;
      s->body = statements({"endgeneration"}, end);
      expect_block_end();
      return s;
    }
    if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) fail(kw, "'" + k + "' outside of a for loop");
      next();
      expect_block_end();
      return node<Stmt>(k == "break" ? Stmt::Kind::break_ : Stmt::Kind::continue_, kw);
    }
    if (k == "elif" || k == "else" || k.rfind("end", 0) == 0) fail(kw, "unexpected '" + k + "' tag");
    fail(kw, "the '" + k + "' tag is not supported (docs/chat-templates.md lists what is)");
  }

  std::unique_ptr<Stmt> if_stmt() {
    auto s = node<Stmt>(Stmt::Kind::if_, cur());
    next();
    while (true) {
      ExprPtr cond = expression();
      expect_block_end();
      std::string end;
      Body body = statements({"elif", "else", "endif"}, end);
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        s->else_body = statements({"endif"}, end);
      }
      expect_block_end();
      return s;
    }
  }

  std::unique_ptr<Stmt> for_stmt() {
    auto s = node<Stmt>(Stmt::Kind::for_, cur());
    next();
    s->targets.push_back(expect_name());
    while (is_op(",")) {
      next();
      s->targets.push_back(expect_name());
    }
    if (!is_name("in")) fail(cur(), "expected 'in', found " + describe(cur()));
    next();
    s->expr = or_expr();
    if (is_op(",")) fail(cur(), "tuples are not supported (docs/chat-templates.md)");
    if (is_name("if")) {
      next();
      s->filter = expression();
    }
    if (is_name("recursive")) fail(cur(), "recursive loops are not supported");
    expect_block_end();
    ++loop_depth_;
    std::string end;
    s->body = statements({"else", "endfor"}, end);
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      s->else_body = statements({"endfor"}, end);
    }
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> set_stmt() {
    auto s = node<Stmt>(Stmt::Kind::set, cur());
    next();
    s->targets.push_back(expect_name());
    if (is_op(".")) {
      next();
      s->targets.push_back(expect_name());
    }
    if (is_op(",")) fail(cur(), "tuple assignment is not supported");
    if (cur().type == T::block_end) fail(cur(), "block assignment ({% set x %}...{% endset %}) is not supported");
    expect_op("=");
    s->expr = expression();
    if (is_op(",")) fail(cur(), "tuples are not supported (docs/chat-templates.md)");
    expect_block_end();
    return s;
  }

  std::unique_ptr<Stmt> macro_stmt() {
    auto s = node<Stmt>(Stmt::Kind::macro, cur());
    next();
    s->name = expect_name();
    expect_op("(");
    bool defaults = false;
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      const Token& p = cur();
      std::string param = expect_name();
      ExprPtr def;
      if (is_op("=")) {
        next();
        def = expression();
        defaults = true;
      } else if (defaults) {
        fail(p, "a parameter without a default follows one with a default");
      }
      s->params.emplace_back(std::move(param), std::move(def));
    }
    next();
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    s->body = statements({"endmacro"}, end);
    loop_depth_ = saved;
    if (cur().type == T::name) next();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  // ---- expressions ----
  ExprPtr expression() {
    Depth guard(*this, cur());
    ExprPtr e = or_expr();
    while (is_name("if")) {
      auto c = node<Expr>(Expr::Kind::cond, cur());
      next();
      c->a = std::move(e);
      c->b = or_expr();
      if (is_name("else")) {
        next();
        c->c = expression();
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const Token& at, const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = node<Expr>(Expr::Kind::binary, at);
    e->name = op;
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      const Token& at = next();
      e = binary(at, "or", std::move(e), and_expr());
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      const Token& at = next();
      e = binary(at, "and", std::move(e), not_expr());
    }
    return e;
  }
  ExprPtr not_expr() {
    Depth guard(*this, cur());
    if (is_name("not")) {
      auto e = node<Expr>(Expr::Kind::unary, next());
      e->name = "not";
      e->a = not_expr();
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr first = math1();
    ExprPtr e;
    while (true) {
      std::string op;
      const Token& at = cur();
      if (cur().type == T::op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                  cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        op = next().value;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == T::name && peek().value == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!e) {
        e = node<Expr>(Expr::Kind::compare, at);
        e->a = std::move(first);
      }
      e->ops.push_back(op);
      e->items.push_back(math1());
    }
    return e ? std::move(e) : std::move(first);
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      e = binary(at, at.value, std::move(e), concat());
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (is_op("~")) {
      const Token& at = next();
      e = binary(at, "~", std::move(e), math2());
    }
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      e = binary(at, at.value, std::move(e), power());
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary(true);
    while (is_op("**")) {
      const Token& at = next();
      e = binary(at, "**", std::move(e), unary(true));
    }
    return e;
  }
  ExprPtr unary(bool with_filter) {
    Depth guard(*this, cur());
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node<Expr>(Expr::Kind::unary, cur());
      e->name = next().value;
      e->a = unary(false);
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filters(std::move(e));
    return e;
  }

  ExprPtr primary() {
    const Token& t = cur();
    if (t.type == T::name) {
      next();
      auto e = node<Expr>(Expr::Kind::literal, t);
      if (t.value == "true" || t.value == "True") {
        e->value = true;
      } else if (t.value == "false" || t.value == "False") {
        e->value = false;
      } else if (t.value == "none" || t.value == "None") {
        e->value = nullptr;
      } else {
        e->kind = Expr::Kind::name;
        e->name = t.value;
      }
      return e;
    }
    if (t.type == T::string) {
      auto e = node<Expr>(Expr::Kind::literal, t);
      std::string s;
      while (cur().type == T::string) s += next().value;  // adjacent literals concatenate
      e->value = s;
      return e;
    }
    if (t.type == T::integer || t.type == T::floating) {
      next();
      auto e = node<Expr>(Expr::Kind::literal, t);
      errno = 0;
      if (t.type == T::integer) {
        const long long v = std::strtoll(t.value.c_str(), nullptr, 10);
        if (errno == ERANGE) fail(t, "integer literal out of range");
        e->value = static_cast<int64_t>(v);
      } else {
        e->value = std::strtod(t.value.c_str(), nullptr);
      }
      return e;
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) fail(t, "tuples are not supported (docs/chat-templates.md)");
      ExprPtr e = expression();
      if (is_op(",")) fail(cur(), "tuples are not supported (docs/chat-templates.md)");
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto e = node<Expr>(Expr::Kind::list, t);
      while (!is_op("]")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("]")) break;
        e->items.push_back(expression());
      }
      next();
      return e;
    }
    if (is_op("{")) {
      next();
      auto e = node<Expr>(Expr::Kind::dict, t);
      while (!is_op("}")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("}")) break;
        e->items.push_back(expression());
        expect_op(":");
        e->items.push_back(expression());
      }
      next();
      return e;
    }
    fail(t, "unexpected " + describe(t));
  }

  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const Token& at = next();
        if (cur().type == T::name) {
          auto a = node<Expr>(Expr::Kind::attr, at);
          a->name = next().value;
          a->a = std::move(e);
          e = std::move(a);
        } else if (cur().type == T::integer) {
          auto a = node<Expr>(Expr::Kind::item, at);
          a->a = std::move(e);
          a->b = primary();
          e = std::move(a);
        } else {
          fail(cur(), "expected an attribute name, found " + describe(cur()));
        }
      } else if (is_op("[")) {
        e = subscript(std::move(e));
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr obj) {
    const Token& at = next();
    ExprPtr parts[3];
    int colons = 0;
    while (true) {
      if (is_op(":")) {
        if (++colons > 2) fail(cur(), "too many ':' in a slice");
        next();
        continue;
      }
      if (is_op("]")) break;
      if (is_op(",")) fail(cur(), "tuple subscripts are not supported");
      if (parts[colons]) fail(cur(), "expected ':' or ']', found " + describe(cur()));
      parts[colons] = expression();
    }
    next();
    if (colons == 0) {
      if (!parts[0]) fail(at, "empty subscript");
      auto e = node<Expr>(Expr::Kind::item, at);
      e->a = std::move(obj);
      e->b = std::move(parts[0]);
      return e;
    }
    auto e = node<Expr>(Expr::Kind::slice, at);
    e->a = std::move(obj);
    for (auto& p : parts) e->items.push_back(std::move(p));
    return e;
  }

  void arguments(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (!e.items.empty() || !e.kwargs.empty()) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail(cur(), "*args and **kwargs are not supported");
      if (cur().type == T::name && peek().type == T::op && peek().value == "=") {
        std::string key = next().value;
        next();
        e.kwargs.emplace_back(std::move(key), expression());
      } else {
        if (!e.kwargs.empty()) fail(cur(), "a positional argument follows a keyword argument");
        e.items.push_back(expression());
      }
    }
    next();
  }

  ExprPtr call(ExprPtr callee) {
    auto e = node<Expr>(Expr::Kind::call, cur());
    e->line = callee->line;  // errors point at what is called, e.g. raise_exception
    e->column = callee->column;
    e->a = std::move(callee);
    arguments(*e);
    return e;
  }

  ExprPtr filters(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        next();
        const Token& at = cur();
        auto f = node<Expr>(Expr::Kind::filter, at);
        f->name = expect_name();
        if (is_op(".")) fail(cur(), "dotted filter names are not supported");
        if (!known_filter(f->name)) fail(at, "unknown filter '" + f->name + "' (docs/chat-templates.md lists the supported ones)");
        f->a = std::move(e);
        if (is_op("(")) arguments(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        next();
        auto t = node<Expr>(Expr::Kind::test, cur());
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        const Token& at = cur();
        t->name = expect_name();
        if (!known_test(t->name)) fail(at, "unknown test '" + t->name + "' (docs/chat-templates.md lists the supported ones)");
        t->a = std::move(e);
        if (is_op("(")) {
          arguments(*t);
        } else if ((cur().type == T::name || cur().type == T::string || cur().type == T::integer ||
                    cur().type == T::floating || is_op("[") || is_op("{")) &&
                   !(is_name("else") || is_name("or") || is_name("and"))) {
          if (is_name("is")) fail(cur(), "unexpected 'is'");
          t->items.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& toks_;
  const std::string& name_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse_template(const std::vector<Token>& tokens, const std::string& name) {
  return Parser(tokens, name).parse();
}

}  // namespace ds::chat_template
