// Values of the Jinja interpreter: what chat templates compute with (Python semantics where templates can
// tell the difference: truthiness, repr, integer vs float arithmetic, dict order = insertion order).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cachet/status.h"
#include "chat/jinja_limits.h"

namespace cachet::jinja {

class Value;
using List = std::vector<Value>;

struct Dict {
  std::vector<std::pair<std::string, Value>> items;  // insertion order
  const Value* find(const std::string& k) const;
  Value* find(const std::string& k);
  void set(const std::string& k, Value v);
};

struct Args;  // call arguments (positional + keyword)
using Function = std::function<Result<Value>(Args&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // undefined
  static Value none() { Value v; v.kind_ = Kind::kNone; return v; }
  Value(bool b) : kind_(Kind::kBool), i_(b) {}                                    // NOLINT
  Value(int v) : kind_(Kind::kInt), i_(v) {}                                      // NOLINT
  Value(int64_t v) : kind_(Kind::kInt), i_(v) {}                                  // NOLINT
  Value(double v) : kind_(Kind::kFloat), f_(v) {}                                 // NOLINT
  // Strings, lists and dicts built during a render are charged to its budget (jinja_limits.h). Lists and
  // dicts are freed without recursion (a template can nest them deeper than the stack allows).
  Value(std::string s);                                                            // NOLINT
  Value(const char* s) : Value(std::string(s)) {}                                 // NOLINT
  Value(List l);                                                                   // NOLINT
  Value(Dict d);                                                                   // NOLINT
  Value(Function fn) : kind_(Kind::kFunction), fn_(std::make_shared<Function>(std::move(fn))) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_callable() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return i_ != 0; }
  // A float as an integer truncates toward zero, saturating (NaN: 0), never undefined (found by fuzz_jinja).
  int64_t as_int() const {
    if (kind_ != Kind::kFloat) return i_;
    if (!(f_ == f_)) return 0;
    if (fits_int64(f_)) return static_cast<int64_t>(f_);
    return f_ > 0 ? INT64_MAX : INT64_MIN;
  }
  // Whether a float converts to int64 without leaving its range (|x| < 2^63; NaN does not).
  static bool fits_int64(double x) { return x > -9.2233720368547758e18 && x < 9.2233720368547758e18; }
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(i_); }
  const std::string& str() const { return *s_; }
  List& list() const { return *l_; }
  Dict& dict() const { return *d_; }
  const Function& fn() const { return *fn_; }

  bool truthy() const;
  // str(): what {{ value }} prints (Python's str; undefined prints nothing).
  std::string to_string() const;
  // repr(): how the value appears inside a printed list or dict.
  std::string repr() const;
  // JSON, as Python's json.dumps with default separators and ensure_ascii=False.
  std::string to_json(int indent = -1, int depth = 0) const;
  bool equals(const Value& o) const;
  const char* type_name() const;
  // True when `c` (a list or dict) is this value or is reachable from it: what a mutation must not create,
  // a cycle (it would never be freed, and printing it would not end).
  bool reaches(const Value& c) const;

 private:
  Kind kind_ = Kind::kUndefined;
  int64_t i_ = 0;
  double f_ = 0.0;
  std::shared_ptr<std::string> s_;
  std::shared_ptr<List> l_;
  std::shared_ptr<Dict> d_;
  std::shared_ptr<Function> fn_;
};

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The i-th positional argument or the keyword `name`, else `fallback`.
  Value get(size_t i, const std::string& name, Value fallback = Value()) const;
};

// Python's float repr (shortest round-trip, always with a '.' or exponent).
std::string format_float(double v);

}  // namespace cachet::jinja
