// Internal: the builtin filters, tests, methods and globals of the Jinja interpreter (jinja_builtins.cc).
#pragma once

#include <string>

#include "chat/jinja_value.h"

namespace cachet::jinja {

// The value at an attribute path ("a.b") of a dict, or v itself when attr is undefined.
Result<Value> attr_of(const Value& v, const Value& attr);
Result<Value> apply_filter(const std::string& name, const Value& v, Args& a, int line);
Result<bool> apply_test(const std::string& name, const Value& v, Args& a, int line);
// obj.m(args) for strings, dicts and lists.
Result<Value> call_method(const Value& obj, const std::string& m, Args& a, int line);
// raise_exception, namespace, dict, range, strftime_now.
void install_globals(Dict& g);

}  // namespace cachet::jinja
