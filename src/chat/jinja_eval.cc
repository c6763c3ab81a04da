// Jinja evaluator: scopes, statements, operators with Python semantics, and the builtin filters, tests,
// methods and globals that chat templates use.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>

#include "chat/jinja.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_limits.h"

namespace cachet::jinja {

namespace {

Status render_error(int line, const std::string& what) {
  return invalid_argument("chat template line " + std::to_string(line) + ": " + what);
}

// Python-style index normalization for lists and strings.
bool norm_index(int64_t& i, int64_t n) {
  if (i < 0) i += n;
  return i >= 0 && i < n;
}

Value slice_of(const Value& v, const Value& start, const Value& stop, const Value& step) {
  int64_t st = step.is_undefined() || step.is_none() ? 1 : step.as_int();
  if (st == 0) st = 1;
  const int64_t n = v.is_string() ? static_cast<int64_t>(v.str().size()) : static_cast<int64_t>(v.list().size());
  auto clamp = [&](const Value& x, int64_t dflt) {
    if (x.is_undefined() || x.is_none()) return dflt;
    int64_t i = x.as_int();
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = clamp(start, st > 0 ? 0 : n - 1), e = clamp(stop, st > 0 ? n : -1);
  // A step past the bounds ends the walk (a huge step must not overflow the index).
  auto next = [st](int64_t& i) { return !__builtin_add_overflow(i, st, &i); };
  if (v.is_string()) {
    std::string out;
    for (int64_t i = b; st > 0 ? i < e : i > e;) {
      out += v.str()[i];
      if (!next(i)) break;
    }
    return Value(out);
  }
  List out;
  for (int64_t i = b; st > 0 ? i < e : i > e;) {
    out.push_back(v.list()[i]);
    if (!next(i)) break;
  }
  return Value(out);
}

class Renderer {
 public:
  Renderer(const Dict& ctx, RenderBudget& budget) : budget_(budget) {
    scopes_.emplace_back();
    install_globals(scopes_.back());
    for (const auto& [k, v] : ctx.items) scopes_.back().set(k, v);
  }

  Status render(const Body& body, std::string* out) { return exec_body(body, out); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (const Value* v = it->find(name)) return *v;
    return Value();
  }

  Status exec_body(const Body& body, std::string* out) {
    for (const auto& n : body) {
      CACHET_RETURN_IF_ERROR(exec(*n, out));
      if (flow_ != Flow::kNormal) return Status::ok();
    }
    return Status::ok();
  }

  // Every statement and expression: one step of the budget, one level of nesting.
  struct Enter {
    RenderBudget& b;
    explicit Enter(RenderBudget& budget) : b(budget) { ++b.depth; }
    ~Enter() { --b.depth; }
  };
  Status enter_check(int line) {
    CACHET_RETURN_IF_ERROR(budget_.step());
    if (budget_.depth > Limits::kMaxRenderDepth)
      return render_limit(line, "nested deeper than " + std::to_string(Limits::kMaxRenderDepth) + " levels");
    return Status::ok();
  }
  static Status render_limit(int line, const std::string& what) {
    return resource_exhausted("chat template line " + std::to_string(line) + ": " + what);
  }
  Status append(std::string* out, const std::string& s, int line) {
    if (out->size() + s.size() > Limits::kMaxOutputBytes)
      return render_limit(line, "output longer than " + std::to_string(Limits::kMaxOutputBytes >> 20) + " MiB");
    *out += s;
    return Status::ok();
  }

  Status exec(const Node& n, std::string* out) {
    Enter enter(budget_);
    CACHET_RETURN_IF_ERROR(enter_check(n.line));
    switch (n.kind) {
      case Node::Kind::kText: return append(out, n.text, n.line);
      case Node::Kind::kOutput: {
        CACHET_ASSIGN_OR_RETURN(Value v, eval(*n.expr));
        std::string text = v.to_string();
        CACHET_RETURN_IF_ERROR(budget_.check());  // printing stops early when over budget
        return append(out, text, n.line);
      }
      case Node::Kind::kIf:
        for (size_t i = 0; i < n.branches.size(); ++i) {
          if (i < n.conds.size()) {
            CACHET_ASSIGN_OR_RETURN(Value c, eval(*n.conds[i]));
            if (!c.truthy()) continue;
          }
          return exec_body(n.branches[i], out);
        }
        return Status::ok();
      case Node::Kind::kFor: return exec_for(n, out);
      case Node::Kind::kSet: {
        CACHET_ASSIGN_OR_RETURN(Value v, eval(*n.expr));
        return assign(n, v);
      }
      case Node::Kind::kSetBlock: {
        std::string captured;  // bounded as output is
        CACHET_RETURN_IF_ERROR(exec_body(n.branches[0], &captured));
        return assign(n, Value(captured));
      }
      case Node::Kind::kMacro: define_macro(n); return Status::ok();
      case Node::Kind::kBreak: flow_ = Flow::kBreak; return Status::ok();
      case Node::Kind::kContinue: flow_ = Flow::kContinue; return Status::ok();
      case Node::Kind::kBlock: return exec_body(n.branches[0], out);
    }
    return Status::ok();
  }

  Status assign(const Node& n, const Value& v) {
    if (n.attr_target) {
      // set ns.attr = value
      Value ns = lookup(n.targets[0]);
      if (!ns.is_dict()) return render_error(n.line, "cannot set an attribute of '" + n.targets[0] + "' (not a namespace)");
      if (v.reaches(ns)) {
        CACHET_RETURN_IF_ERROR(budget_.check());  // reaches() gives up (true) when over budget
        return render_error(n.line, "cannot set '" + n.targets[0] + "." + n.targets[1] + "' to a value holding '" + n.targets[0] + "' (a cycle)");
      }
      ns.dict().set(n.targets[1], v);
      return Status::ok();
    }
    if (n.targets.size() == 1) {
      scopes_.back().set(n.targets[0], v);
      return Status::ok();
    }
    if (!v.is_list() || v.list().size() != n.targets.size())
      return render_error(n.line, "cannot unpack into " + std::to_string(n.targets.size()) + " names");
    for (size_t i = 0; i < n.targets.size(); ++i) scopes_.back().set(n.targets[i], v.list()[i]);
    return Status::ok();
  }

  Status exec_for(const Node& n, std::string* out) {
    CACHET_ASSIGN_OR_RETURN(Value seq, eval(*n.expr));
    // A list is iterated where it is, not copied (`seq` keeps it alive). The body can only grow it (`append` is
    // the one mutating method), so items are read by index through the list object, never through a pointer
    // into its storage, over the length it had when the loop began.
    List built;
    if (seq.is_dict()) for (const auto& [k, v] : seq.dict().items) built.push_back(Value(k));
    else if (seq.is_string()) for (char c : seq.str()) built.push_back(Value(std::string(1, c)));
    else if (!seq.is_list() && !seq.is_undefined() && !seq.is_none())
      return render_error(n.line, std::string("cannot iterate over a ") + seq.type_name());
    const List* items_p = seq.is_list() ? &seq.list() : &built;
    // The "if" filter of the loop applies before loop.index and friends are counted.
    if (n.filter) {
      List kept;
      for (const auto& it : *items_p) {
        scopes_.emplace_back();
        bind_targets(n, it);
        auto c = eval(*n.filter);
        scopes_.pop_back();
        if (!c.is_ok()) return c.status();
        if (c->truthy()) kept.push_back(it);
      }
      built.swap(kept);
      items_p = &built;
    }
    const List& items = *items_p;
    if (items.empty()) {
      if (n.branches.size() > 1) return exec_body(n.branches[1], out);
      return Status::ok();
    }
    // One `loop` object for the whole loop, updated in place each iteration (as jinja2's LoopContext is), and
    // one scope whose variables are cleared between iterations: no allocation per iteration but the body's own.
    const int64_t len = static_cast<int64_t>(items.size());
    auto index = std::make_shared<int64_t>(0);
    Dict loop;
    for (const char* k : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "previtem", "nextitem"})
      loop.set(k, Value());
    loop.set("cycle", Value(Function([index](Args& a) -> Result<Value> {
               if (a.positional.empty()) return Value();
               return a.positional[*index % static_cast<int64_t>(a.positional.size())];
             })));
    const Value loop_v(std::move(loop));
    auto& f = loop_v.dict().items;
    scopes_.emplace_back();
    Status st = Status::ok();
    for (int64_t i = 0; i < len; ++i) {
      st = budget_.step();  // an iteration is a step even when the body is empty
      if (!st.is_ok()) break;
      *index = i;
      f[0].second = Value(i + 1);
      f[1].second = Value(i);
      f[2].second = Value(len - i);
      f[3].second = Value(len - i - 1);
      f[4].second = Value(i == 0);
      f[5].second = Value(i == len - 1);
      f[6].second = Value(len);
      f[7].second = i > 0 ? items[i - 1] : Value();
      f[8].second = i + 1 < len ? items[i + 1] : Value();
      scopes_.back().items.clear();
      scopes_.back().set("loop", loop_v);
      bind_targets(n, items[i]);
      st = exec_body(n.branches[0], out);
      if (!st.is_ok()) break;
      if (flow_ == Flow::kBreak) {
        flow_ = Flow::kNormal;
        break;
      }
      flow_ = Flow::kNormal;
    }
    scopes_.pop_back();
    return st;
  }

  void bind_targets(const Node& n, const Value& item) {
    if (n.targets.size() == 1) {
      scopes_.back().set(n.targets[0], item);
    } else if (item.is_list()) {
      for (size_t k = 0; k < n.targets.size(); ++k)
        scopes_.back().set(n.targets[k], k < item.list().size() ? item.list()[k] : Value());
    }
  }

  void define_macro(const Node& n) {
    const Node* node = &n;
    std::vector<Value> defaults;
    for (const auto& d : n.defaults) {
      auto v = eval(*d);
      defaults.push_back(v.is_ok() ? *v : Value());
    }
    scopes_.back().set(n.name, Value(Function([this, node, defaults](Args& a) -> Result<Value> {
      if (budget_.call_depth >= Limits::kMaxCallDepth)
        return render_limit(node->line, "macro '" + node->name + "' called " + std::to_string(Limits::kMaxCallDepth) +
                                            " levels deep");
      ++budget_.call_depth;
      scopes_.emplace_back();
      const size_t n_params = node->params.size(), first_default = n_params - defaults.size();
      for (size_t i = 0; i < n_params; ++i) {
        Value dflt = i >= first_default ? defaults[i - first_default] : Value();
        scopes_.back().set(node->params[i], a.get(i, node->params[i], dflt));
      }
      std::string out;
      Status st = exec_body(node->branches[0], &out);
      scopes_.pop_back();
      --budget_.call_depth;
      flow_ = Flow::kNormal;
      if (!st.is_ok()) return st;
      return Value(out);
    })));
  }

  Result<Args> eval_args(const Expr& e) {
    Args a;
    const size_t n_kw = e.kw_names.size(), n_pos = e.items.size() - n_kw;
    for (size_t i = 0; i < e.items.size(); ++i) {
      CACHET_ASSIGN_OR_RETURN(Value v, eval(*e.items[i]));
      if (i < n_pos) a.positional.push_back(v);
      else a.keyword.emplace_back(e.kw_names[i - n_pos], v);
    }
    return a;
  }

  Result<Value> eval(const Expr& e) {
    Enter enter(budget_);
    CACHET_RETURN_IF_ERROR(enter_check(e.line));
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.literal;
      case Expr::Kind::kName: return lookup(e.name);
      case Expr::Kind::kList: {
        List l;
        for (const auto& x : e.items) {
          CACHET_ASSIGN_OR_RETURN(Value v, eval(*x));
          l.push_back(v);
        }
        return Value(l);
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          CACHET_ASSIGN_OR_RETURN(Value k, eval(*e.items[i]));
          CACHET_ASSIGN_OR_RETURN(Value v, eval(*e.items[i + 1]));
          d.set(k.to_string(), v);
        }
        return Value(d);
      }
      case Expr::Kind::kAttr: {
        CACHET_ASSIGN_OR_RETURN(Value obj, eval(*e.a));
        return get_item(obj, Value(e.name), e.line);
      }
      case Expr::Kind::kIndex: {
        CACHET_ASSIGN_OR_RETURN(Value obj, eval(*e.a));
        CACHET_ASSIGN_OR_RETURN(Value key, eval(*e.b));
        return get_item(obj, key, e.line);
      }
      case Expr::Kind::kSlice: {
        CACHET_ASSIGN_OR_RETURN(Value obj, eval(*e.a));
        Value parts[3];
        for (int k = 0; k < 3; ++k)
          if (e.items[k]) {
            CACHET_ASSIGN_OR_RETURN(parts[k], eval(*e.items[k]));
          }
        if (!obj.is_list() && !obj.is_string()) return render_error(e.line, std::string("cannot slice a ") + obj.type_name());
        return slice_of(obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::kCall: return eval_call(e);
      case Expr::Kind::kFilter: {
        CACHET_ASSIGN_OR_RETURN(Value v, eval(*e.a));
        CACHET_ASSIGN_OR_RETURN(Args a, eval_args(e));
        return apply_filter(e.name, v, a, e.line);
      }
      case Expr::Kind::kTest: {
        CACHET_ASSIGN_OR_RETURN(Value v, eval(*e.a));
        CACHET_ASSIGN_OR_RETURN(Args a, eval_args(e));
        CACHET_ASSIGN_OR_RETURN(bool r, apply_test(e.name, v, a, e.line));
        return Value(e.negated ? !r : r);
      }
      case Expr::Kind::kUnary: {
        CACHET_ASSIGN_OR_RETURN(Value v, eval(*e.a));
        if (e.name == "not") return Value(!v.truthy());
        if (!v.is_number()) return render_error(e.line, std::string("bad operand for unary ") + e.name + ": " + v.type_name());
        if (e.name == "+") return v;
        if (v.kind() == Value::Kind::kInt && v.as_int() != INT64_MIN) return Value(-v.as_int());
        return Value(-v.as_float());  // a float, or the one integer whose negation leaves int64
      }
      case Expr::Kind::kBinary: return eval_binary(e);
      case Expr::Kind::kCond: {
        CACHET_ASSIGN_OR_RETURN(Value c, eval(*e.b));
        if (c.truthy()) return eval(*e.a);
        if (e.c) return eval(*e.c);
        return Value();
      }
    }
    return Value();
  }

  Result<Value> get_item(const Value& obj, const Value& key, int line) {
    if (obj.is_dict()) {
      const Value* v = obj.dict().find(key.to_string());
      return v ? *v : Value();
    }
    if (obj.is_list() || obj.is_string()) {
      if (!key.is_number()) return Value();  // e.g. a method name: resolved by eval_call
      int64_t i = key.as_int();
      const int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list().size()) : static_cast<int64_t>(obj.str().size());
      if (!norm_index(i, n)) return Value();
      return obj.is_list() ? obj.list()[i] : Value(std::string(1, obj.str()[i]));
    }
    if (obj.is_undefined()) return render_error(line, "'" + key.to_string() + "' of an undefined value");
    return Value();
  }

  Result<Value> eval_call(const Expr& e) {
    CACHET_ASSIGN_OR_RETURN(Args a, eval_args(e));
    if (e.a->kind == Expr::Kind::kAttr) {
      CACHET_ASSIGN_OR_RETURN(Value obj, eval(*e.a->a));
      const std::string& m = e.a->name;
      if (obj.is_string() || obj.is_list() || (obj.is_dict() && !obj.dict().find(m)))
        return call_method(obj, m, a, e.line);
      CACHET_ASSIGN_OR_RETURN(Value fn, get_item(obj, Value(m), e.line));
      if (!fn.is_callable()) return render_error(e.line, "'" + m + "' is not callable");
      return fn.fn()(a);
    }
    CACHET_ASSIGN_OR_RETURN(Value fn, eval(*e.a));
    if (!fn.is_callable()) {
      std::string what = e.a->kind == Expr::Kind::kName ? "'" + e.a->name + "'" : "value";
      return render_error(e.line, what + " is not a function" + (fn.is_undefined() ? " (undefined)" : ""));
    }
    return fn.fn()(a);
  }

  Result<Value> eval_binary(const Expr& e) {
    const std::string& op = e.name;
    CACHET_ASSIGN_OR_RETURN(Value l, eval(*e.a));
    if (op == "and") {
      if (!l.truthy()) return l;
      return eval(*e.b);
    }
    if (op == "or") {
      if (l.truthy()) return l;
      return eval(*e.b);
    }
    CACHET_ASSIGN_OR_RETURN(Value r, eval(*e.b));
    if (op == "==") return Value(l.equals(r));
    if (op == "!=") return Value(!l.equals(r));
    if (op == "in" || op == "not in") {
      bool hit = false;
      if (r.is_string()) hit = r.str().find(l.to_string()) != std::string::npos;
      else if (r.is_list()) hit = std::any_of(r.list().begin(), r.list().end(), [&](const Value& x) { return x.equals(l); });
      else if (r.is_dict()) hit = r.dict().find(l.to_string()) != nullptr;
      else if (!r.is_undefined() && !r.is_none()) return render_error(e.line, std::string("'in' needs a string, list or dict, not a ") + r.type_name());
      return Value(op == "in" ? hit : !hit);
    }
    if (op == "~") {
      std::string ls = l.to_string(), rs = r.to_string();
      CACHET_RETURN_IF_ERROR(reserve_bytes(ls.size() + rs.size()));
      return Value(ls + rs);
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int c;
      if (l.is_number() && r.is_number()) c = l.as_float() < r.as_float() ? -1 : l.as_float() > r.as_float() ? 1 : 0;
      else if (l.is_string() && r.is_string()) c = l.str().compare(r.str());
      else return render_error(e.line, std::string("cannot compare ") + l.type_name() + " and " + r.type_name());
      return Value(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
    if (op == "+") {
      if (l.is_string() && r.is_string()) {
        CACHET_RETURN_IF_ERROR(reserve_bytes(l.str().size() + r.str().size()));
        return Value(l.str() + r.str());
      }
      if (l.is_list() && r.is_list()) {
        CACHET_RETURN_IF_ERROR(reserve_bytes((l.list().size() + r.list().size()) * sizeof(Value)));
        List out = l.list();
        out.insert(out.end(), r.list().begin(), r.list().end());
        return Value(out);
      }
    }
    if (op == "*" && ((l.is_string() && r.kind() == Value::Kind::kInt) || (r.is_string() && l.kind() == Value::Kind::kInt))) {
      const std::string& s = l.is_string() ? l.str() : r.str();
      const int64_t n = std::max<int64_t>(0, l.is_string() ? r.as_int() : l.as_int());
      if (!s.empty() && static_cast<uint64_t>(n) > Limits::kMaxValueBytes / s.size())
        return render_limit(e.line, "string repeated " + std::to_string(n) + " times (over " +
                                        std::to_string(Limits::kMaxValueBytes >> 20) + " MiB)");
      CACHET_RETURN_IF_ERROR(reserve_bytes(s.size() * n));
      std::string out;
      out.reserve(s.size() * n);
      for (int64_t i = 0; i < n; ++i) out += s;
      return Value(out);
    }
    if (!(l.is_number() || l.kind() == Value::Kind::kBool) || !(r.is_number() || r.kind() == Value::Kind::kBool))
      return render_error(e.line, "unsupported operands for " + op + ": " + l.type_name() + " and " + r.type_name());
    const bool ints = l.kind() != Value::Kind::kFloat && r.kind() != Value::Kind::kFloat;
    if (op == "/") {
      if (r.as_float() == 0.0) return render_error(e.line, "division by zero");
      return Value(l.as_float() / r.as_float());
    }
    if (op == "//" || op == "%") {
      if (r.as_float() == 0.0) return render_error(e.line, "division by zero");
      if (ints && !(l.as_int() == INT64_MIN && r.as_int() == -1)) {
        int64_t a = l.as_int(), b = r.as_int();
        int64_t q = a / b;
        if ((a % b != 0) && ((a < 0) != (b < 0))) --q;  // floor division
        return op == "//" ? Value(q) : Value(a - q * b);
      }
      double q = std::floor(l.as_float() / r.as_float());
      return op == "//" ? Value(q) : Value(l.as_float() - q * r.as_float());
    }
    // Integers are int64 (Python's are unbounded): a result that leaves int64 becomes a float, never wraps
    // (fuzz_jinja found `111119111111*111111110`, a signed overflow).
    if (op == "**") {
      const double p = std::pow(l.as_float(), r.as_float());
      if (ints && r.as_int() >= 0 && Value::fits_int64(p)) return Value(static_cast<int64_t>(std::llround(p)));
      return Value(p);
    }
    if (ints) {
      int64_t out = 0;
      if (op == "+" && !__builtin_add_overflow(l.as_int(), r.as_int(), &out)) return Value(out);
      if (op == "-" && !__builtin_sub_overflow(l.as_int(), r.as_int(), &out)) return Value(out);
      if (op == "*" && !__builtin_mul_overflow(l.as_int(), r.as_int(), &out)) return Value(out);
    }
    if (op == "+") return Value(l.as_float() + r.as_float());
    if (op == "-") return Value(l.as_float() - r.as_float());
    if (op == "*") return Value(l.as_float() * r.as_float());
    return render_error(e.line, "unsupported operator " + op);
  }

  RenderBudget& budget_;
  std::vector<Dict> scopes_;
  Flow flow_ = Flow::kNormal;
};

}  // namespace

Result<std::string> render_body(const Body& body, const Dict& context, RenderStats* stats) {
  RenderBudget budget;
  Renderer r(context, budget);
  std::string out;
  Status st = r.render(body, &out);
  if (st.is_ok()) st = budget.check();  // work past the budget at the very end (a last comparison)
  if (stats) *stats = {budget.steps(), budget.bytes_built()};
  if (!st.is_ok()) return st;
  return out;
}

Result<Template> Template::parse(const std::string& source) {
  CACHET_ASSIGN_OR_RETURN(Body body, parse_template(source));
  Template t;
  t.body_ = std::make_shared<const Body>(std::move(body));
  return t;
}

Result<std::string> Template::render(const Dict& context, RenderStats* stats) const {
  return render_body(*body_, context, stats);
}

}  // namespace cachet::jinja
