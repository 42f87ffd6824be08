// The parsed template: expressions and statements of the subset docs/chat-templates.md lists.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "value.hpp"

namespace ds::chat_template {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,   // value
    name,      // name
    list,      // items
    dict,      // items: key, value, key, value, ...
    attr,      // a.name
    item,      // a[b]
    slice,     // a[items[0]:items[1]:items[2]], absent bounds are null
    call,      // a(items, kwargs)
    filter,    // a | name(items, kwargs)
    test,      // a is [not] name(items)
    unary,     // op a: "-", "+", "not"
    binary,    // a op b: + - * / // % ** ~ and or
    compare,   // a ops[0] items[0] ops[1] items[1] ...: == != < <= > >= in notin
    cond,      // a if b else c (c may be null)
  };
  Kind kind;
  int line = 0, column = 0;
  Json value;
  std::string name;  // name, attribute, filter, test or operator
  bool negated = false;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind { text, output, if_, for_, set, macro, generation, break_, continue_ };
  Kind kind;
  int line = 0, column = 0;
  std::string text;                   // text
  ExprPtr expr;                       // output, set's value, for's iterable
  std::vector<std::pair<ExprPtr, Body>> branches;  // if/elif conditions and bodies
  Body body, else_body;               // for, macro, generation; if's and for's else
  std::vector<std::string> targets;   // for's loop variables; set's name (and attribute)
  ExprPtr filter;                     // for ... if filter
  std::string name;                   // macro name
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters with defaults (or null)
};

// A macro: what `{% macro %}` defines and calls render.
struct MacroDef {
  const Stmt* stmt;
};

}  // namespace ds::chat_template
