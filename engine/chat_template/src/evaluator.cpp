#include "evaluator.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "builtins.hpp"
#include "error.hpp"
#include "text.hpp"

namespace ds::chat_template {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::map<std::string, Value> vars;
  Value* find(const std::string& name) {
    for (Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

namespace {

using ScopePtr = std::shared_ptr<Scope>;
enum class Flow { normal, break_, continue_ };

[[noreturn]] void type_error(const std::string& msg) { throw std::runtime_error(msg); }

// Bounds that keep a hostile template from taking the machine (real chat templates stay far
// below them): evaluation steps per render, bytes of a string or of the output, nodes of a list
// or dict built by the template.
constexpr size_t kMaxSteps = 20'000'000;
constexpr size_t kMaxBytes = size_t{64} << 20;
constexpr size_t kMaxNodes = 1'000'000;

// Counts nodes up to `budget`; returns whether there are more, or more than 256 levels (which the
// recursive printers could not take).
bool exceeds_nodes(const Json& j, size_t& budget, int depth = 0) {
  if (budget == 0 || depth > 256) return true;
  --budget;
  if (j.is_array() || j.is_object())
    for (const auto& x : j)
      if (exceeds_nodes(x, budget, depth + 1)) return true;
  return false;
}
void check_size(const Value& v) {
  if (!v.is_data()) return;
  if (v.data.is_string() && v.data.get_ref<const std::string&>().size() > kMaxBytes)
    type_error("a string above 64 MiB");
  size_t budget = kMaxNodes;
  if ((v.data.is_array() || v.data.is_object()) && exceeds_nodes(v.data, budget))
    type_error("a list or dict of more than 1000000 values or 256 levels");
}

// Python's int and float arithmetic on 64-bit ints (an overflow is an error, where Python would
// grow the int) and doubles.
struct Num {
  bool is_int;
  int64_t i;
  double d;
};
Num to_num(const Value& v, const char* op) {
  if (v.is_undefined()) type_error("'" + v.name + "' is undefined");
  if (!v.is_plain() || !(v.data.is_number() || v.data.is_boolean()))
    type_error(std::string("unsupported operand type for ") + op + ": '" + type_name(v) + "'");
  const Json& j = v.data;
  if (j.is_boolean()) return {true, j.get<bool>() ? 1 : 0, 0};
  if (j.is_number_float()) return {false, 0, j.get<double>()};
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    type_error("integer beyond 64 bits");
  return {true, j.get<int64_t>(), 0};
}
double as_d(const Num& n) { return n.is_int ? static_cast<double>(n.i) : n.d; }
template <class Op>
Value int_result(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) type_error("integer arithmetic beyond 64 bits");
  return Value::of(r);
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (op == "+" && a.is_plain() && b.is_plain()) {
    if (a.data.is_string() && b.data.is_string()) return Value::of(a.data.get<std::string>() + b.data.get<std::string>());
    if (a.data.is_array() && b.data.is_array()) {
      Json r = a.data;
      for (const auto& x : b.data) r.push_back(x);
      return Value::of(r);
    }
  }
  if (op == "*" && a.is_plain() && b.is_plain()) {
    const Value* seq = a.data.is_string() || a.data.is_array() ? &a : b.data.is_string() || b.data.is_array() ? &b : nullptr;
    if (seq) {
      const Num n = to_num(seq == &a ? b : a, "*");
      if (!n.is_int) type_error("can't multiply sequence by non-int of type 'float'");
      const size_t unit = seq->data.is_string() ? seq->data.get_ref<const std::string&>().size() : seq->data.size();
      if (n.i > 0 && unit > 0 && static_cast<uint64_t>(n.i) > kMaxBytes / unit) type_error("a repetition above 64 MiB");
      Json r = seq->data.is_string() ? Json("") : Json::array();
      for (int64_t k = 0; k < n.i; ++k) {
        if (r.is_string()) {
          r = r.get<std::string>() + seq->data.get<std::string>();
        } else {
          for (const auto& x : seq->data) r.push_back(x);
        }
      }
      return Value::of(r);
    }
  }
  if (op == "%" && a.is_string()) type_error("printf-style string formatting ('%' on a string) is not supported");
  const Num x = to_num(a, op.c_str()), y = to_num(b, op.c_str());
  const bool ints = x.is_int && y.is_int;
  auto add = [](int64_t p, int64_t q, int64_t* r) { return __builtin_add_overflow(p, q, r); };
  auto sub = [](int64_t p, int64_t q, int64_t* r) { return __builtin_sub_overflow(p, q, r); };
  auto mul = [](int64_t p, int64_t q, int64_t* r) { return __builtin_mul_overflow(p, q, r); };
  if (op == "+") return ints ? int_result(add, x.i, y.i) : Value::of(as_d(x) + as_d(y));
  if (op == "-") return ints ? int_result(sub, x.i, y.i) : Value::of(as_d(x) - as_d(y));
  if (op == "*") return ints ? int_result(mul, x.i, y.i) : Value::of(as_d(x) * as_d(y));
  if (op == "/") {
    if (as_d(y) == 0.0) type_error("division by zero");
    return Value::of(as_d(x) / as_d(y));
  }
  if (op == "//" || op == "%") {
    if (ints) {
      if (y.i == 0) type_error("integer division or modulo by zero");
      if (x.i == std::numeric_limits<int64_t>::min() && y.i == -1) type_error("integer arithmetic beyond 64 bits");
      int64_t q = x.i / y.i, m = x.i % y.i;
      if (m != 0 && ((m < 0) != (y.i < 0))) {
        --q;
        m += y.i;
      }
      return Value::of(op == "//" ? q : m);
    }
    const double p = as_d(x), q = as_d(y);
    if (q == 0.0) type_error("float division or modulo by zero");
    // CPython's float_divmod.
    double m = std::fmod(p, q);
    double div = (p - m) / q;
    if (m != 0.0 && ((q < 0) != (m < 0))) {
      m += q;
      div -= 1.0;
    }
    if (op == "%") return Value::of(m != 0.0 ? m : std::copysign(0.0, q));
    double floor_div = 0.0;
    if (div != 0.0) {
      floor_div = std::floor(div);
      if (div - floor_div > 0.5) floor_div += 1.0;
    } else {
      floor_div = std::copysign(0.0, p / q);
    }
    return Value::of(floor_div);
  }
  if (op == "**") {
    if (ints && y.i >= 0) {
      int64_t result = 1;
      for (int64_t k = 0; k < y.i; ++k) {
        if (__builtin_mul_overflow(result, x.i, &result)) type_error("integer arithmetic beyond 64 bits");
        if (result == 0 || result == 1) break;
      }
      return Value::of(result);
    }
    return Value::of(std::pow(as_d(x), as_d(y)));
  }
  type_error("unknown operator " + op);
}

bool equal(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.is_data() && b.is_data()) {
    if (a.seq != Value::Seq::list || b.seq != Value::Seq::list) type_error("comparing a " + type_name(a.seq != Value::Seq::list ? a : b) + " is not supported");
    return py_equal(a.data, b.data);
  }
  if (a.kind == Value::Kind::ns && b.kind == Value::Kind::ns) return a.ns == b.ns;
  if (a.kind == Value::Kind::macro && b.kind == Value::Kind::macro) return a.macro == b.macro;
  return false;
}

bool contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;
  if (!container.is_data()) type_error("argument of type '" + type_name(container) + "' is not iterable");
  if (container.pairs) type_error("'in' on items() compares Python tuples, which is not supported");
  container.consume();
  const Json& c = container.data;
  if (c.is_string()) {
    if (!item.is_string()) type_error("'in <string>' requires string as left operand, not " + type_name(item));
    return c.get_ref<const std::string&>().find(item.data.get_ref<const std::string&>()) != std::string::npos;
  }
  if (c.is_array()) {
    for (const auto& x : c)
      if (equal(item, Value::of(x))) return true;
    return false;
  }
  if (c.is_object()) {
    if (item.is_string()) return c.contains(item.data.get<std::string>());
    if (item.is_plain() && (item.data.is_array() || item.data.is_object())) type_error("unhashable type: '" + type_name(item) + "'");
    return false;
  }
  type_error("argument of type '" + type_name(container) + "' is not iterable");
}

class Evaluator {
 public:
  Evaluator(const Json& context, const std::string& name) : name_(name) {
    for (const auto& [k, v] : context.items()) context_[k] = Value::of(v);
  }

  RenderResult run(const Body& body) {
    auto root = std::make_shared<Scope>();
    exec(body, result_.text, root);
    return std::move(result_);
  }

 private:
  [[noreturn]] void fail(int line, int column, const std::string& msg) const { fail_at(name_, line, column, msg); }

  Flow exec(const Body& body, std::string& out, const ScopePtr& scope) {
    for (const auto& s : body) {
      const Flow f = exec_one(*s, out, scope);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  Flow exec_one(const Stmt& s, std::string& out, const ScopePtr& scope) {
    if (++steps_ > kMaxSteps) fail(s.line, s.column, "the template runs more than 20000000 steps");
    if (out.size() > kMaxBytes) fail(s.line, s.column, "the rendered text is above 64 MiB");
    switch (s.kind) {
      case Stmt::Kind::text:
        out += s.text;
        return Flow::normal;
      case Stmt::Kind::output: {
        const Value v = eval(*s.expr, scope);
        try {
          out += to_str(v);
        } catch (const std::runtime_error& e) {
          fail(s.expr->line, s.expr->column, e.what());
        }
        return Flow::normal;
      }
      case Stmt::Kind::if_:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond, scope))) return exec(body, out, scope);
        return exec(s.else_body, out, scope);
      case Stmt::Kind::for_: return exec_for(s, out, scope);
      case Stmt::Kind::set: {
        Value v = eval(*s.expr, scope);
        if (s.targets.size() == 1) {
          scope->vars[s.targets[0]] = std::move(v);
          return Flow::normal;
        }
        Value* target = lookup_ref(s.targets[0], scope);
        if (!target || target->kind != Value::Kind::ns || target->ns->is_loop)
          fail(s.line, s.column, "cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
        target->ns->attrs[s.targets[1]] = std::make_shared<Value>(std::move(v));
        return Flow::normal;
      }
      case Stmt::Kind::macro: {
        Value m;
        m.kind = Value::Kind::macro;
        m.macro = std::make_shared<MacroDef>(MacroDef{&s});
        m.closure = scope;
        macro_scopes_.push_back(scope);
        m.name = s.name;
        scope->vars[s.name] = std::move(m);
        return Flow::normal;
      }
      case Stmt::Kind::generation: {
        if (&out != &result_.text) fail(s.line, s.column, "{% generation %} inside a macro is not supported");
        const size_t begin = out.size();
        const Flow f = exec(s.body, out, scope);
        // HF's AssistantTracker records a block only when is_active(), i.e. when something was
        // rendered before it or a block was already recorded; we keep that quirk.
        if (begin > 0 || !result_.generation.empty()) result_.generation.emplace_back(begin, out.size());
        return f;
      }
      case Stmt::Kind::break_: return Flow::break_;
      case Stmt::Kind::continue_: return Flow::continue_;
    }
    return Flow::normal;
  }

  void bind_targets(const Stmt& s, Scope& scope, const Json& item) {
    if (s.targets.size() == 1) {
      scope.vars[s.targets[0]] = Value::of(item);
      return;
    }
    std::vector<Json> parts;
    if (item.is_array()) {
      parts.assign(item.begin(), item.end());
    } else if (item.is_string()) {
      for (uint32_t c : text::decode(item.get<std::string>())) {
        std::string ch;
        text::append(ch, c);
        parts.emplace_back(ch);
      }
    } else {
      fail(s.line, s.column, "cannot unpack a non-sequence into " + std::to_string(s.targets.size()) + " loop variables");
    }
    if (parts.size() != s.targets.size())
      fail(s.line, s.column, "cannot unpack " + std::to_string(parts.size()) + " values into " +
                                 std::to_string(s.targets.size()) + " loop variables");
    for (size_t k = 0; k < parts.size(); ++k) scope.vars[s.targets[k]] = Value::of(parts[k]);
  }

  Flow exec_for(const Stmt& s, std::string& out, const ScopePtr& scope) {
    const Value seq = eval(*s.expr, scope);
    std::vector<Json> items;
    try {
      items = iterate(seq, s.targets.size() > 1);
    } catch (const std::runtime_error& e) {
      fail(s.expr->line, s.expr->column, e.what());
    }
    if (s.filter) {
      std::vector<Json> kept;
      for (const auto& item : items) {
        auto probe = std::make_shared<Scope>();
        probe->parent = scope;
        bind_targets(s, *probe, item);
        if (truthy(eval(*s.filter, probe))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      auto iteration = std::make_shared<Scope>();
      iteration->parent = scope;
      auto loop = std::make_shared<Namespace>();
      loop->is_loop = true;
      auto set = [&](const char* key, Json v) { loop->attrs[key] = std::make_shared<Value>(Value::of(std::move(v))); };
      set("index", i + 1);
      set("index0", i);
      set("revindex", n - i);
      set("revindex0", n - i - 1);
      set("first", i == 0);
      set("last", i == n - 1);
      set("length", n);
      set("depth", 1);
      set("depth0", 0);
      if (i > 0) set("previtem", items[i - 1]);
      if (i + 1 < n) set("nextitem", items[i + 1]);
      Value lv;
      lv.kind = Value::Kind::ns;
      lv.ns = loop;
      iteration->vars["loop"] = std::move(lv);
      bind_targets(s, *iteration, items[i]);
      if (exec(s.body, out, iteration) == Flow::break_) break;
    }
    if (n == 0) return exec(s.else_body, out, scope);
    return Flow::normal;
  }

  Value* lookup_ref(const std::string& name, const ScopePtr& scope) {
    if (Value* v = scope->find(name)) return v;
    auto it = context_.find(name);
    return it == context_.end() ? nullptr : &it->second;
  }

  Value lookup(const std::string& name, const ScopePtr& scope) {
    if (Value* v = lookup_ref(name, scope)) return *v;
    if (is_global(name)) {
      Value f;
      f.kind = Value::Kind::function;
      f.name = name;
      return f;
    }
    return Value::undefined(name);
  }

  Args eval_args(const Expr& e, const ScopePtr& scope) {
    Args args;
    for (const auto& a : e.items) args.positional.push_back(eval(*a, scope));
    for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, eval(*a, scope));
    return args;
  }

  // Counts the evaluator's recursion (expressions within statements within macro calls).
  struct Nesting {
    int& depth;
    explicit Nesting(int& d) : depth(d) {
      if (++depth > 1000) type_error("evaluation nested deeper than 1000 levels (macro recursion?)");
    }
    ~Nesting() { --depth; }
  };

  Value eval(const Expr& e, const ScopePtr& scope) {
    try {
      Nesting nesting(nesting_);
      if (++steps_ > kMaxSteps) type_error("the template runs more than 20000000 steps");
      Value v = eval_inner(e, scope);
      if (e.kind == Expr::Kind::list || e.kind == Expr::Kind::dict || e.kind == Expr::Kind::binary ||
          e.kind == Expr::Kind::filter || e.kind == Expr::Kind::call)
        check_size(v);
      return v;
    } catch (const std::runtime_error& err) {
      fail(e.line, e.column, err.what());
    } catch (const nlohmann::json::exception& err) {  // a value of a type the operation cannot take
      fail(e.line, e.column, err.what());
    } catch (const TemplateRaised& raised) {
      fail(e.line, e.column, "raise_exception: " + raised.message);
    }
  }

  Value call_macro(const Value& m, const Args& args) {
    const Stmt& def = *m.macro->stmt;
    if (args.positional.size() > def.params.size())
      type_error("macro '" + def.name + "' takes not more than " + std::to_string(def.params.size()) + " argument(s)");
    auto frame = std::make_shared<Scope>();
    frame->parent = m.closure.lock();
    std::vector<bool> bound(def.params.size(), false);
    for (size_t k = 0; k < args.positional.size(); ++k) {
      frame->vars[def.params[k].first] = args.positional[k];
      bound[k] = true;
    }
    for (const auto& [key, v] : args.keyword) {
      size_t k = 0;
      while (k < def.params.size() && def.params[k].first != key) ++k;
      if (k == def.params.size()) type_error("macro '" + def.name + "' has no argument '" + key + "'");
      if (bound[k]) type_error("macro '" + def.name + "' got multiple values for argument '" + key + "'");
      frame->vars[key] = v;
      bound[k] = true;
    }
    for (size_t k = 0; k < def.params.size(); ++k) {
      if (bound[k]) continue;
      frame->vars[def.params[k].first] =
          def.params[k].second ? eval(*def.params[k].second, frame) : Value::undefined(def.params[k].first);
    }
    if (++macro_depth_ > 64) type_error("macro recursion deeper than 64 calls");
    std::string out;
    exec(def.body, out, frame);
    --macro_depth_;
    return Value::of(out);
  }

  Value eval_inner(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::literal: return Value::of(e.value);
      case Expr::Kind::name: return lookup(e.name, scope);
      case Expr::Kind::list: {
        Json list = Json::array();
        for (const auto& item : e.items) list.push_back(plain(eval(*item, scope), "a list literal"));
        return Value::of(list);
      }
      case Expr::Kind::dict: {
        Json dict = Json::object();
        for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
          const Value key = eval(*e.items[k], scope);
          if (!key.is_string()) type_error("dict keys must be strings here, not " + type_name(key));
          dict[key.data.get<std::string>()] = plain(eval(*e.items[k + 1], scope), "a dict literal");
        }
        return Value::of(dict);
      }
      case Expr::Kind::attr: return get_attr(eval(*e.a, scope), e.name);
      case Expr::Kind::item: return get_item(eval(*e.a, scope), eval(*e.b, scope));
      case Expr::Kind::slice: return slice(eval(*e.a, scope), e, scope);
      case Expr::Kind::call: {
        const Value callee = eval(*e.a, scope);
        const Args args = eval_args(e, scope);
        switch (callee.kind) {
          case Value::Kind::macro: return call_macro(callee, args);
          case Value::Kind::function: return call_global(callee.name, args);
          case Value::Kind::method: return call_method(callee, args);
          case Value::Kind::undefined: type_error("'" + callee.name + "' is undefined");
          default: type_error("'" + type_name(callee) + "' object is not callable");
        }
      }
      case Expr::Kind::filter: {
        const Value v = eval(*e.a, scope);
        return apply_filter(e.name, v, eval_args(e, scope));
      }
      case Expr::Kind::test: {
        const Value v = eval(*e.a, scope);
        return Value::of(apply_test(e.name, v, eval_args(e, scope)) != e.negated);
      }
      case Expr::Kind::unary: {
        const Value v = eval(*e.a, scope);
        if (e.name == "not") return Value::of(!truthy(v));
        const Num n = to_num(v, e.name.c_str());
        if (e.name == "+") return n.is_int ? Value::of(n.i) : Value::of(n.d);
        if (n.is_int) {
          if (n.i == std::numeric_limits<int64_t>::min()) type_error("integer arithmetic beyond 64 bits");
          return Value::of(-n.i);
        }
        return Value::of(-n.d);
      }
      case Expr::Kind::binary: {
        if (e.name == "and") {
          Value a = eval(*e.a, scope);
          return truthy(a) ? eval(*e.b, scope) : a;
        }
        if (e.name == "or") {
          Value a = eval(*e.a, scope);
          return truthy(a) ? a : eval(*e.b, scope);
        }
        const Value a = eval(*e.a, scope);
        const Value b = eval(*e.b, scope);
        if (e.name == "~") return Value::of(to_str(a) + to_str(b));
        return arithmetic(e.name, a, b);
      }
      case Expr::Kind::compare: {
        Value left = eval(*e.a, scope);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.items[k], scope);
          const std::string& op = e.ops[k];
          bool r;
          if (op == "==") {
            r = equal(left, right);
          } else if (op == "!=") {
            r = !equal(left, right);
          } else if (op == "in" || op == "notin") {
            r = contains(right, left) == (op == "in");
          } else {
            for (const Value* v : {&left, &right}) {
              if (v->is_undefined()) type_error("'" + v->name + "' is undefined");
              if (!v->is_plain()) type_error("'" + op + "' not supported for '" + type_name(*v) + "'");
            }
            if (op == "<") r = py_less(left.data, right.data);
            else if (op == ">") r = py_less(right.data, left.data);
            else if (op == "<=") r = !py_less(right.data, left.data);
            else r = !py_less(left.data, right.data);
          }
          if (!r) return Value::of(false);
          left = std::move(right);
        }
        return Value::of(true);
      }
      case Expr::Kind::cond:
        if (truthy(eval(*e.b, scope))) return eval(*e.a, scope);
        return e.c ? eval(*e.c, scope) : Value::undefined("the else branch");
    }
    type_error("unknown expression");
  }

  static Json plain(const Value& v, const char* where) {
    if (!v.is_plain()) type_error(std::string("a ") + type_name(v) + " in " + where + " is not supported");
    return v.data;
  }

  Value slice(const Value& obj, const Expr& e, const ScopePtr& scope) {
    int64_t bound[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (!e.items[k]) continue;
      const Value v = eval(*e.items[k], scope);
      if (v.is_plain() && v.data.is_null()) continue;
      const Num n = to_num(v, "slice");
      if (!n.is_int) type_error("slice indices must be integers or None");
      bound[k] = n.i;
      given[k] = true;
    }
    if (obj.is_undefined()) type_error("'" + obj.name + "' is undefined");
    if (!obj.is_plain() || !(obj.data.is_array() || obj.data.is_string())) return Value::undefined("slice");
    const int64_t step = bound[2];
    if (step == 0) type_error("slice step cannot be zero");
    std::vector<uint32_t> cps;
    if (obj.data.is_string()) cps = text::decode(obj.data.get<std::string>());
    const int64_t len = obj.data.is_string() ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(obj.data.size());
    // CPython's PySlice_AdjustIndices.
    auto adjust = [&](int64_t v, bool has, int64_t dflt) {
      if (!has) return dflt;
      if (v < 0) {
        v += len;
        if (v < 0) v = step < 0 ? -1 : 0;
      } else if (v >= len) {
        v = step < 0 ? len - 1 : len;
      }
      return v;
    };
    const int64_t start = adjust(bound[0], given[0], step < 0 ? len - 1 : 0);
    const int64_t stop = adjust(bound[1], given[1], step < 0 ? -1 : len);
    std::vector<int64_t> picks;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picks.push_back(i);
    if (obj.data.is_string()) {
      std::string s;
      for (int64_t i : picks) text::append(s, cps[static_cast<size_t>(i)]);
      return Value::of(s);
    }
    Json list = Json::array();
    for (int64_t i : picks) list.push_back(obj.data[static_cast<size_t>(i)]);
    return Value::of(list);
  }

  const std::string& name_;
  std::map<std::string, Value> context_;
  RenderResult result_;
  int macro_depth_ = 0;
  size_t steps_ = 0;
  int nesting_ = 0;
  std::vector<ScopePtr> macro_scopes_;  // what macros' weak closures point to
};

}  // namespace

RenderResult evaluate(const Body& body, const Json& context, const std::string& name) {
  return Evaluator(context, name).run(body);
}

}  // namespace ds::chat_template
