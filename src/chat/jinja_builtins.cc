// The builtins templates call: filters, tests, string / dict / list methods and the global functions.
#include <algorithm>
#include <cstdint>
#include <cmath>
#include <ctime>

#include "chat/jinja_builtins.h"

namespace cachet::jinja {

namespace {

Status render_error(int line, const std::string& what) {
  return invalid_argument("chat template line " + std::to_string(line) + ": " + what);
}

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  auto is_strip = [&](unsigned char c) {
    return chars.empty() ? (std::isspace(c) != 0) : chars.find(static_cast<char>(c)) != std::string::npos;
  };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && is_strip(static_cast<unsigned char>(s[b]))) ++b;
  if (right)
    while (e > b && is_strip(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Builds the result in one pass (replacing in place is quadratic), checked against the render's budget.
Result<std::string> replace_all(const std::string& s, const std::string& from, const std::string& to,
                                int64_t count = -1) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0, hit;
  while (count != 0 && (hit = s.find(from, pos)) != std::string::npos) {
    CACHET_RETURN_IF_ERROR(reserve_bytes(out.size() + (hit - pos) + to.size()));
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    if (count > 0) --count;
  }
  CACHET_RETURN_IF_ERROR(reserve_bytes(out.size() + s.size() - pos));
  out.append(s, pos, std::string::npos);
  return out;
}

// sep.join(parts), checked against the render's budget before it is built.
Result<std::string> join_checked(const std::vector<std::string>& parts, const std::string& sep) {
  size_t n = 0;
  for (const auto& p : parts) n += p.size();
  if (!parts.empty()) {
    if (!sep.empty() && parts.size() - 1 > Limits::kMaxValueBytes / sep.size()) CACHET_RETURN_IF_ERROR(reserve_bytes(SIZE_MAX));
    n += sep.size() * (parts.size() - 1);
  }
  CACHET_RETURN_IF_ERROR(reserve_bytes(n));
  std::string r;
  r.reserve(n);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) r += sep;
    r += parts[i];
  }
  return r;
}

std::string title_case(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      c = static_cast<char>(start ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
      start = false;
    } else {
      start = true;
    }
  }
  return out;
}

}  // namespace

Result<Value> attr_of(const Value& v, const Value& attr) {
  if (attr.is_undefined()) return v;
  Value cur = v;
  // "a.b" attribute paths, as jinja2's attribute= arguments allow.
  std::string path = attr.to_string();
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (cur.is_dict()) {
      const Value* x = cur.dict().find(part);
      cur = x ? *x : Value();
    } else {
      cur = Value();
    }
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

Result<Value> apply_filter(const std::string& f, const Value& v, Args& a, int line) {
  if (f == "trim") return Value(strip_chars(v.to_string(), a.get(0, "chars").is_string() ? a.get(0, "chars").str() : "", true, true));
  if (f == "length" || f == "count") {
    if (v.is_string()) {
      int64_t n = 0;  // characters, not bytes
      for (unsigned char c : v.str()) n += (c & 0xC0) != 0x80;
      return Value(n);
    }
    if (v.is_list()) return Value(static_cast<int64_t>(v.list().size()));
    if (v.is_dict()) return Value(static_cast<int64_t>(v.dict().items.size()));
    return Value(int64_t{0});
  }
  if (f == "tojson") {
    Value indent = a.get(0, "indent");
    return Value(v.to_json(indent.is_number() ? static_cast<int>(indent.as_int()) : -1));
  }
  if (f == "upper" || f == "lower") {
    std::string s = v.to_string();
    for (char& c : s) c = static_cast<char>(f == "upper" ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
    return Value(s);
  }
  if (f == "capitalize") {
    std::string s = v.to_string();
    for (size_t i = 0; i < s.size(); ++i)
      s[i] = static_cast<char>(i == 0 ? std::toupper(static_cast<unsigned char>(s[i])) : std::tolower(static_cast<unsigned char>(s[i])));
    return Value(s);
  }
  if (f == "title") return Value(title_case(v.to_string()));
  if (f == "default" || f == "d") {
    const bool boolean = a.get(1, "boolean", Value(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return a.get(0, "default_value", Value(""));
    return v;
  }
  if (f == "first" || f == "last") {
    if (v.is_list()) {
      if (v.list().empty()) return Value();
      return f == "first" ? v.list().front() : v.list().back();
    }
    if (v.is_string() && !v.str().empty()) return Value(std::string(1, f == "first" ? v.str().front() : v.str().back()));
    return Value();
  }
  if (f == "join") {
    const std::string sep = a.get(0, "d", Value("")).to_string();
    Value attr = a.get(1, "attribute");
    std::vector<std::string> parts;
    if (v.is_list())
      for (const Value& item : v.list()) {
        CACHET_ASSIGN_OR_RETURN(Value x, attr_of(item, attr));
        parts.push_back(x.to_string());
        CACHET_RETURN_IF_ERROR(reserve_bytes(parts.back().size()));
      }
    CACHET_ASSIGN_OR_RETURN(std::string r, join_checked(parts, sep));
    return Value(std::move(r));
  }
  if (f == "replace") {
    CACHET_ASSIGN_OR_RETURN(std::string r, replace_all(v.to_string(), a.get(0, "old").to_string(),
                                                       a.get(1, "new").to_string(), a.get(2, "count", Value(-1)).as_int()));
    return Value(std::move(r));
  }
  if (f == "string") return Value(v.to_string());
  if (f == "int") {
    if (v.is_string()) return Value(static_cast<int64_t>(std::strtoll(v.str().c_str(), nullptr, 10)));
    return Value(v.as_int());
  }
  if (f == "float") return Value(v.is_string() ? std::strtod(v.str().c_str(), nullptr) : v.as_float());
  if (f == "abs")
    return v.kind() == Value::Kind::kInt && v.as_int() != INT64_MIN ? Value(static_cast<int64_t>(std::llabs(v.as_int())))
                                                                     : Value(std::fabs(v.as_float()));
  if (f == "list") {
    if (v.is_list()) return v;
    List out;
    if (v.is_string()) for (char c : v.str()) out.push_back(Value(std::string(1, c)));
    if (v.is_dict()) for (const auto& [k, x] : v.dict().items) out.push_back(Value(k));
    return Value(out);
  }
  if (f == "items" || f == "dictsort") {
    List out;
    if (v.is_dict())
      for (const auto& [k, x] : v.dict().items) out.push_back(Value(List{Value(k), x}));
    if (f == "dictsort")
      std::stable_sort(out.begin(), out.end(), [](const Value& x, const Value& y) { return x.list()[0].str() < y.list()[0].str(); });
    return Value(out);
  }
  if (f == "reverse") {
    if (v.is_string()) return Value(std::string(v.str().rbegin(), v.str().rend()));
    if (v.is_list()) return Value(List(v.list().rbegin(), v.list().rend()));
    return v;
  }
  if (f == "sort") {
    if (!v.is_list()) return v;
    List out = v.list();
    Value attr = a.get(1, "attribute");
    const bool rev = a.get(0, "reverse", Value(false)).truthy();
    std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
      Value ax = attr_of(x, attr).value(), ay = attr_of(y, attr).value();
      bool lt = ax.is_number() && ay.is_number() ? ax.as_float() < ay.as_float() : ax.to_string() < ay.to_string();
      return rev ? (!lt && !ax.equals(ay)) : lt;
    });
    return Value(out);
  }
  if (f == "unique") {
    if (!v.is_list()) return v;
    List out;
    for (const auto& x : v.list())
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return y.equals(x); })) out.push_back(x);
    return Value(out);
  }
  if (f == "selectattr" || f == "rejectattr" || f == "select" || f == "reject") {
    if (!v.is_list()) return Value(List{});
    const bool by_attr = f == "selectattr" || f == "rejectattr";
    const bool keep_if = f == "selectattr" || f == "select";
    Value attr = by_attr ? a.get(0, "attribute") : Value();
    const size_t test_at = by_attr ? 1 : 0;
    Value test = test_at < a.positional.size() ? a.positional[test_at] : Value();
    Args targs;
    for (size_t k = test_at + 1; k < a.positional.size(); ++k) targs.positional.push_back(a.positional[k]);
    List out;
    for (const auto& x : v.list()) {
      CACHET_ASSIGN_OR_RETURN(Value target, attr_of(x, attr));
      bool r;
      if (test.is_undefined()) {
        r = target.truthy();
      } else {
        CACHET_ASSIGN_OR_RETURN(r, apply_test(test.to_string(), target, targs, line));
      }
      if (r == keep_if) out.push_back(x);
    }
    return Value(out);
  }
  if (f == "map") {
    if (!v.is_list()) return Value(List{});
    List out;
    Value attr = a.get(99, "attribute");
    for (const auto& x : v.list()) {
      if (!attr.is_undefined()) {
        CACHET_ASSIGN_OR_RETURN(Value y, attr_of(x, attr));
        out.push_back(y.is_undefined() ? a.get(99, "default") : y);
      } else if (!a.positional.empty()) {
        Args fa;
        for (size_t k = 1; k < a.positional.size(); ++k) fa.positional.push_back(a.positional[k]);
        CACHET_ASSIGN_OR_RETURN(Value y, apply_filter(a.positional[0].to_string(), x, fa, line));
        out.push_back(y);
      }
    }
    return Value(out);
  }
  if (f == "sum") {
    double s = 0;
    bool all_int = true;
    if (v.is_list())
      for (const auto& x : v.list()) {
        s += x.as_float();
        all_int &= x.kind() == Value::Kind::kInt;
      }
    return all_int && Value::fits_int64(s) ? Value(static_cast<int64_t>(s)) : Value(s);
  }
  if (f == "round") {
    const int64_t prec = a.get(0, "precision", Value(int64_t{0})).as_int();
    const double m = std::pow(10.0, static_cast<double>(prec));
    return Value(std::nearbyint(v.as_float() * m) / m);
  }
  if (f == "indent") {
    const int64_t w = a.get(0, "width", Value(int64_t{4})).as_int();
    const bool first = a.get(1, "first", Value(false)).truthy();
    const std::string s = v.to_string();
    const size_t lines = static_cast<size_t>(std::count(s.begin(), s.end(), '\n')) + 1;
    const uint64_t width = static_cast<uint64_t>(std::max<int64_t>(0, w));
    if (width > Limits::kMaxValueBytes / lines) CACHET_RETURN_IF_ERROR(reserve_bytes(SIZE_MAX));
    CACHET_RETURN_IF_ERROR(reserve_bytes(s.size() + width * lines));
    const std::string pad(width, ' ');
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      out += s[i];
      if (s[i] == '\n' && i + 1 < s.size() && s[i + 1] != '\n') out += pad;
    }
    return Value(first ? pad + out : out);
  }
  if (f == "safe" || f == "e" || f == "escape" || f == "forceescape") {
    if (f == "safe") return v;
    std::string s = v.to_string(), out;
    for (char c : s) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
      }
    }
    return Value(out);
  }
  if (f == "wordcount") {
    int64_t n = 0;
    bool in = false;
    for (unsigned char c : v.to_string()) {
      bool w = std::isalnum(c) || c == '_' || c >= 0x80;
      if (w && !in) ++n;
      in = w;
    }
    return Value(n);
  }
  return render_error(line, "unsupported filter '" + f + "'");
}

Result<bool> apply_test(const std::string& t, const Value& v, Args& a, int line) {
  if (t == "defined") return !v.is_undefined();
  if (t == "undefined") return v.is_undefined();
  if (t == "none") return v.is_none();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") return v.kind() == Value::Kind::kInt;
  if (t == "float") return v.kind() == Value::Kind::kFloat;
  if (t == "boolean") return v.kind() == Value::Kind::kBool;
  if (t == "true") return v.kind() == Value::Kind::kBool && v.as_bool();
  if (t == "false") return v.kind() == Value::Kind::kBool && !v.as_bool();
  if (t == "mapping") return v.is_dict();
  if (t == "sequence") return v.is_list() || v.is_string();
  if (t == "iterable") return v.is_list() || v.is_string() || v.is_dict();
  if (t == "callable") return v.is_callable();
  if (t == "odd" || t == "even") return v.kind() == Value::Kind::kInt && ((v.as_int() % 2 != 0) == (t == "odd"));
  if (t == "divisibleby") {
    int64_t d = a.get(0, "num", Value(int64_t{1})).as_int();
    return d != 0 && (d == -1 || v.as_int() % d == 0);  // INT64_MIN % -1 overflows
  }
  if (t == "eq" || t == "equalto" || t == "==" || t == "sameas") return v.equals(a.get(0, "other"));
  if (t == "ne" || t == "!=") return !v.equals(a.get(0, "other"));
  if (t == "lt" || t == "gt" || t == "le" || t == "ge" || t == "lessthan" || t == "greaterthan") {
    Value o = a.get(0, "other");
    double x = v.as_float(), y = o.as_float();
    if (t == "lt" || t == "lessthan") return x < y;
    if (t == "gt" || t == "greaterthan") return x > y;
    return t == "le" ? x <= y : x >= y;
  }
  if (t == "in") {
    Value c = a.get(0, "seq");
    if (c.is_list()) return std::any_of(c.list().begin(), c.list().end(), [&](const Value& x) { return x.equals(v); });
    if (c.is_string()) return c.str().find(v.to_string()) != std::string::npos;
    if (c.is_dict()) return c.dict().find(v.to_string()) != nullptr;
    return false;
  }
  if (t == "lower" || t == "upper") {
    if (!v.is_string()) return false;
    for (unsigned char c : v.str())
      if (std::isalpha(c) && (t == "lower" ? std::isupper(c) : std::islower(c))) return false;
    return true;
  }
  return render_error(line, "unsupported test '" + t + "'");
}

Result<Value> call_method(const Value& obj, const std::string& m, Args& a, int line) {
  if (obj.is_string()) {
    const std::string& s = obj.str();
    if (m == "strip" || m == "lstrip" || m == "rstrip") {
      Value chars = a.get(0, "chars");
      std::string cs = chars.is_string() ? chars.str() : "";
      return Value(strip_chars(s, cs, m != "rstrip", m != "lstrip"));
    }
    if (m == "upper" || m == "lower") {
      std::string r = s;
      for (char& c : r) c = static_cast<char>(m == "upper" ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
      return Value(r);
    }
    if (m == "title") return Value(title_case(s));
    if (m == "capitalize") return apply_filter("capitalize", obj, a, line);
    if (m == "startswith" || m == "endswith") {
      Value p = a.get(0, "prefix");
      List options = p.is_list() ? p.list() : List{p};
      for (const auto& o : options) {
        const std::string t = o.to_string();
        bool hit = m == "startswith" ? s.compare(0, t.size(), t) == 0
                                     : s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
        if (hit) return Value(true);
      }
      return Value(false);
    }
    if (m == "replace") {
      CACHET_ASSIGN_OR_RETURN(std::string r, replace_all(s, a.get(0, "old").to_string(), a.get(1, "new").to_string(),
                                                         a.get(2, "count", Value(-1)).as_int()));
      return Value(std::move(r));
    }
    if (m == "split" || m == "rsplit") {
      Value sep = a.get(0, "sep");
      int64_t maxsplit = a.get(1, "maxsplit", Value(-1)).as_int();
      List parts;
      if (sep.is_undefined() || sep.is_none()) {
        size_t i = 0;
        while (i < s.size()) {
          while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
          if (i >= s.size()) break;
          size_t j = i;
          while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
          if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) j = s.size();
          parts.push_back(Value(s.substr(i, j - i)));
          i = j;
        }
        return Value(parts);
      }
      const std::string d = sep.to_string();
      if (d.empty()) return render_error(line, "empty separator");
      size_t pos = 0;
      for (;;) {
        size_t hit = s.find(d, pos);
        if (hit == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
          parts.push_back(Value(s.substr(pos)));
          break;
        }
        parts.push_back(Value(s.substr(pos, hit - pos)));
        pos = hit + d.size();
      }
      return Value(parts);
    }
    if (m == "find") return Value(static_cast<int64_t>(s.find(a.get(0, "sub").to_string()) == std::string::npos
                                                         ? -1 : static_cast<int64_t>(s.find(a.get(0, "sub").to_string()))));
    if (m == "count") {
      const std::string t = a.get(0, "sub").to_string();
      int64_t c = 0;
      for (size_t p = 0; !t.empty() && (p = s.find(t, p)) != std::string::npos; p += t.size()) ++c;
      return Value(c);
    }
    if (m == "join") {
      Value items = a.get(0, "iterable");
      std::vector<std::string> parts;
      if (items.is_list())
        for (const Value& item : items.list()) {
          parts.push_back(item.to_string());
          CACHET_RETURN_IF_ERROR(reserve_bytes(parts.back().size()));
        }
      CACHET_ASSIGN_OR_RETURN(std::string r, join_checked(parts, s));
      return Value(std::move(r));
    }
    if (m == "isdigit" || m == "isalpha" || m == "isspace") {
      if (s.empty()) return Value(false);
      for (unsigned char c : s) {
        bool ok = m == "isdigit" ? std::isdigit(c) : m == "isalpha" ? std::isalpha(c) : std::isspace(c);
        if (!ok) return Value(false);
      }
      return Value(true);
    }
  } else if (obj.is_dict()) {
    if (m == "items" || m == "keys" || m == "values") {
      List out;
      for (const auto& [k, v] : obj.dict().items) {
        if (m == "items") out.push_back(Value(List{Value(k), v}));
        else out.push_back(m == "keys" ? Value(k) : v);
      }
      return Value(out);
    }
    if (m == "get") {
      const Value* v = obj.dict().find(a.get(0, "key").to_string());
      return v ? *v : a.get(1, "default", Value::none());
    }
  } else if (obj.is_list()) {
    if (m == "append") {
      Value item = a.get(0, "item");
      if (item.reaches(obj)) {
        if (RenderBudget* b = RenderBudget::current()) CACHET_RETURN_IF_ERROR(b->check());  // over budget
        return render_error(line, "cannot append a list to one it is inside (a cycle)");
      }
      CACHET_RETURN_IF_ERROR(reserve_bytes(sizeof(Value)));
      charge_built(sizeof(Value));
      obj.list().push_back(std::move(item));
      return Value::none();
    }
    if (m == "index") {
      Value x = a.get(0, "value");
      for (size_t i = 0; i < obj.list().size(); ++i)
        if (obj.list()[i].equals(x)) return Value(static_cast<int64_t>(i));
      return render_error(line, "value not in list");
    }
    if (m == "count") {
      int64_t c = 0;
      for (const auto& x : obj.list()) c += x.equals(a.get(0, "value"));
      return Value(c);
    }
  }
  return render_error(line, std::string("unsupported method '") + m + "' on a " + obj.type_name());
}

void install_globals(Dict& g) {
  g.set("raise_exception", Value(Function([](Args& a) -> Result<Value> {
          return invalid_argument("chat template raised an error: " + a.get(0, "message").to_string());
        })));
  g.set("namespace", Value(Function([](Args& a) -> Result<Value> {
          Dict d;
          if (!a.positional.empty() && a.positional[0].is_dict()) d = a.positional[0].dict();
          for (auto& [k, v] : a.keyword) d.set(k, v);
          return Value(d);
        })));
  g.set("dict", Value(Function([](Args& a) -> Result<Value> {
          Dict d;
          for (auto& [k, v] : a.keyword) d.set(k, v);
          return Value(d);
        })));
  g.set("range", Value(Function([](Args& a) -> Result<Value> {
          int64_t start = 0, stop = 0, step = 1;
          if (a.positional.size() == 1) stop = a.positional[0].as_int();
          if (a.positional.size() >= 2) start = a.positional[0].as_int(), stop = a.positional[1].as_int();
          if (a.positional.size() >= 3) step = a.positional[2].as_int();
          if (step == 0) return invalid_argument("range() step must not be zero");
          // The length first (in 128-bit arithmetic: the bounds are any int64), refused past the limit before
          // anything is built, as jinja2's sandbox does (MAX_RANGE); then one exact allocation.
          const __int128 span = step > 0 ? __int128{stop} - start : __int128{start} - stop;
          const __int128 mag = step > 0 ? __int128{step} : -__int128{step};
          const __int128 count = span <= 0 ? 0 : (span + mag - 1) / mag;
          if (count > Limits::kMaxRange)
            return resource_exhausted("range() of " + std::to_string(static_cast<long double>(count)) +
                                      " items: the limit is " + std::to_string(Limits::kMaxRange));
          List out;
          out.reserve(static_cast<size_t>(count));
          for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) out.push_back(Value(start + k * step));
          return Value(std::move(out));
        })));
  g.set("strftime_now", Value(Function([](Args& a) -> Result<Value> {
          std::time_t now = std::time(nullptr);
          std::tm tm{};
          localtime_r(&now, &tm);
          char buf[256];
          size_t n = std::strftime(buf, sizeof buf, a.get(0, "format").to_string().c_str(), &tm);
          return Value(std::string(buf, n));
        })));
}

}  // namespace cachet::jinja
