#include "chat/jinja_value.h"

#include <algorithm>
#include <cctype>
#include <type_traits>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>

namespace cachet::jinja {

namespace {

// Freeing a list or dict frees its items; a nested one would recurse once per level. Instead the outermost
// free takes the items of every container freed under it onto one stack and lets them go one by one.
thread_local std::vector<Value>* t_freeing = nullptr;

template <typename C>
void free_container(C* c) {
  auto take = [c](std::vector<Value>& to) {
    if constexpr (std::is_same_v<C, List>) {
      for (Value& v : *c) to.push_back(std::move(v));
    } else {
      for (auto& kv : c->items) to.push_back(std::move(kv.second));
    }
  };
  if (t_freeing) {
    take(*t_freeing);
    delete c;
    return;
  }
  std::vector<Value> pending;
  t_freeing = &pending;
  take(pending);
  delete c;
  while (!pending.empty()) {
    Value v = std::move(pending.back());
    pending.pop_back();
  }  // v's last reference to a container goes here, which pushes that container's items
  t_freeing = nullptr;
}

// Nesting of repr / to_json / equals on this thread.
thread_local int t_nesting = 0;
struct Nest {
  bool deep;
  Nest() : deep(++t_nesting > Limits::kMaxValueNesting) {
    if (deep) fail_render(resource_exhausted("chat template value nested deeper than " +
                                             std::to_string(Limits::kMaxValueNesting)));
  }
  ~Nest() { --t_nesting; }
};

}  // namespace

Value::Value(std::string s) : kind_(Kind::kString) {
  charge_built(s.size());
  s_ = std::make_shared<std::string>(std::move(s));
}
Value::Value(List l) : kind_(Kind::kList) {
  charge_built(l.size() * sizeof(Value));
  l_ = std::shared_ptr<List>(new List(std::move(l)), free_container<List>);
}
Value::Value(Dict d) : kind_(Kind::kDict) {
  charge_built(d.items.size() * (sizeof(Value) + 32));
  d_ = std::shared_ptr<Dict>(new Dict(std::move(d)), free_container<Dict>);
}

bool Value::reaches(const Value& c) const {
  const void* target = c.is_list() ? static_cast<const void*>(c.l_.get()) : static_cast<const void*>(c.d_.get());
  if (!c.is_list() && !c.is_dict()) return false;
  std::vector<const Value*> stack{this};
  std::vector<const void*> seen;
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    const void* p = v->is_list() ? static_cast<const void*>(v->l_.get()) : v->is_dict() ? static_cast<const void*>(v->d_.get()) : nullptr;
    if (!p) continue;
    if (p == target) return true;
    if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
    seen.push_back(p);
    if (charge_work(static_cast<int64_t>(seen.size()))) return true;  // over budget: refuse the mutation
    if (v->is_list()) for (const Value& x : *v->l_) stack.push_back(&x);
    else for (const auto& kv : v->d_->items) stack.push_back(&kv.second);
  }
  return false;
}

const Value* Dict::find(const std::string& k) const {
  for (const auto& [key, v] : items)
    if (key == k) return &v;
  return nullptr;
}
Value* Dict::find(const std::string& k) {
  for (auto& [key, v] : items)
    if (key == k) return &v;
  return nullptr;
}
void Dict::set(const std::string& k, Value v) {
  if (Value* e = find(k)) *e = std::move(v);
  else items.emplace_back(k, std::move(v));
}

Value Args::get(size_t i, const std::string& name, Value fallback) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  if (i < positional.size()) return positional[i];
  return fallback;
}

std::string format_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest digits that read back as v (Python's repr), then Python's choice of notation.
  char buf[64];
  int prec = 0;
  for (; prec < 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string e = buf;  // d.ddddde[+-]XX
  const size_t epos = e.find('e');
  const int exp = std::atoi(e.c_str() + epos + 1);
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (std::isdigit(static_cast<unsigned char>(e[i]))) digits += e[i];
  const std::string sign = v < 0 ? "-" : "";
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(static_cast<size_t>(exp + 1 - digits.size()), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return sign + out;
  }
  std::string mant = digits.substr(0, 1);
  if (digits.size() > 1) mant += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return sign + mant + ebuf;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined: case Kind::kNone: return false;
    case Kind::kBool: case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0.0;
    case Kind::kString: return !s_->empty();
    case Kind::kList: return !l_->empty();
    case Kind::kDict: return !d_->items.empty();
    case Kind::kFunction: return true;
  }
  return false;
}

namespace {
std::string py_quote(const std::string& s) {
  // Python prefers single quotes unless the string contains one and no double quote.
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = use_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == static_cast<unsigned char>(q)) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + q;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}
// Printing a value that shares its parts (a list holding another twice, 60 levels deep) can make text far
// beyond any budget from little memory: the printers stop at the value cap and fail the render.
bool too_big(const std::string& s) {
  if (s.size() <= Limits::kMaxValueBytes) return charge_work();
  fail_render(resource_exhausted("chat template prints a value of more than " +
                                 std::to_string(Limits::kMaxValueBytes >> 20) + " MiB"));
  return true;
}
}  // namespace

std::string Value::to_string() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return *s_;
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return i_ ? "True" : "False";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return format_float(f_);
    case Kind::kString: return py_quote(*s_);
    case Kind::kList: {
      Nest nest;
      if (nest.deep) return "[...]";
      std::string s = "[";
      for (size_t i = 0; i < l_->size() && !too_big(s); ++i) s += (i ? ", " : "") + (*l_)[i].repr();
      return s + "]";
    }
    case Kind::kDict: {
      Nest nest;
      if (nest.deep) return "{...}";
      std::string s = "{";
      for (size_t i = 0; i < d_->items.size() && !too_big(s); ++i)
        s += (i ? ", " : "") + py_quote(d_->items[i].first) + ": " + d_->items[i].second.repr();
      return s + "}";
    }
    case Kind::kFunction: return "<function>";
  }
  return "";
}

std::string Value::to_json(int indent, int depth) const {
  std::string out;
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (kind_) {
    case Kind::kUndefined: case Kind::kNone: return "null";
    case Kind::kBool: return i_ ? "true" : "false";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return std::isfinite(f_) ? format_float(f_) : (std::isnan(f_) ? "NaN" : (f_ > 0 ? "Infinity" : "-Infinity"));
    case Kind::kString: json_string(*s_, out); return out;
    case Kind::kList: {
      if (l_->empty()) return "[]";
      Nest nest;
      if (nest.deep) return "[]";
      out += '[';
      for (size_t i = 0; i < l_->size() && !too_big(out); ++i) {
        if (i) out += indent < 0 ? ", " : ",";
        newline(depth + 1);
        out += (*l_)[i].to_json(indent, depth + 1);
      }
      newline(depth);
      return out + ']';
    }
    case Kind::kDict: {
      if (d_->items.empty()) return "{}";
      Nest nest;
      if (nest.deep) return "{}";
      out += '{';
      for (size_t i = 0; i < d_->items.size() && !too_big(out); ++i) {
        if (i) out += indent < 0 ? ", " : ",";
        newline(depth + 1);
        json_string(d_->items[i].first, out);
        out += ": " + d_->items[i].second.to_json(indent, depth + 1);
      }
      newline(depth);
      return out + '}';
    }
    case Kind::kFunction: return "null";
  }
  return "null";
}

bool Value::equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (kind_ == Kind::kInt && o.kind_ == Kind::kInt) return i_ == o.i_;
    return as_float() == o.as_float();
  }
  if ((kind_ == Kind::kBool && o.is_number()) || (is_number() && o.kind_ == Kind::kBool)) return as_float() == o.as_float();
  if (kind_ != o.kind_) return false;
  if (charge_work()) return false;  // over budget: the render fails at its next step
  switch (kind_) {
    case Kind::kUndefined: case Kind::kNone: return true;
    case Kind::kBool: return i_ == o.i_;
    case Kind::kString: return *s_ == *o.s_;
    case Kind::kList: {
      if (l_->size() != o.l_->size()) return false;
      Nest nest;
      if (nest.deep) return false;
      for (size_t i = 0; i < l_->size(); ++i)
        if (!(*l_)[i].equals((*o.l_)[i])) return false;
      return true;
    }
    case Kind::kDict: {
      if (d_->items.size() != o.d_->items.size()) return false;
      Nest nest;
      if (nest.deep) return false;
      for (const auto& [k, v] : d_->items) {
        const Value* ov = o.d_->find(k);
        if (!ov || !v.equals(*ov)) return false;
      }
      return true;
    }
    case Kind::kFunction: return fn_ == o.fn_;
    default: return false;
  }
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kFunction: return "function";
  }
  return "?";
}

}  // namespace cachet::jinja
