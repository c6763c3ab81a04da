// Python literals as JSON: the values of LFM2's Python-style tool calls, `[f(city="Paris", days=3)]`.
// Strings in either quote with Python's escapes, ints and floats, True / False / None (and JSON's true / false /
// null, which these models also write), lists, tuples (as arrays) and dicts with string keys.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string_view>

namespace cachet {

enum class LiteralRead { kDone, kMore, kBad };

// Reads one literal at s[i...] (leading whitespace skipped). kDone: *out holds it and *end is just past it;
// kMore: s ends inside it (or a number might still go on); kBad: it is not a literal.
LiteralRead read_python_literal(std::string_view s, size_t i, nlohmann::ordered_json* out, size_t* end);

// One argument of a call as the model writes it, for rendering past calls back: JSON's text for every value
// (JSON strings, numbers, arrays and objects are Python literals; booleans and null are written as JSON's,
// which LFM2 reads and writes too).
std::string python_call_text(const std::string& name, const nlohmann::ordered_json& arguments);

}  // namespace cachet
