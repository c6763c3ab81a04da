#include "chat/python_literal.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace cachet {

using json = nlohmann::ordered_json;

namespace {

constexpr int kMaxDepth = 64;

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  return i;
}

void append_utf8(std::string* o, uint32_t cp) {
  if (cp < 0x80) {
    o->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    o->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    o->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    o->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    o->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    o->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    o->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    o->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    o->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    o->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

// n hex digits at s[i...] as a code point; -1: not hex; -2: s ends first.
int64_t hex_at(std::string_view s, size_t i, int n) {
  int64_t v = 0;
  for (int k = 0; k < n; ++k) {
    if (i + k >= s.size()) return -2;
    const char c = s[i + k];
    if (!std::isxdigit(static_cast<unsigned char>(c))) return -1;
    v = v * 16 + (std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10);
  }
  return v;
}

LiteralRead read_string(std::string_view s, size_t i, json* out, size_t* end) {
  const char q = s[i++];
  std::string v;
  while (i < s.size()) {
    const char c = s[i];
    if (c == q) {
      *out = v;
      *end = i + 1;
      return LiteralRead::kDone;
    }
    if (c == '\n') return LiteralRead::kBad;  // a one-quote literal does not span lines
    if (c != '\\') {
      v.push_back(c);
      ++i;
      continue;
    }
    if (i + 1 >= s.size()) return LiteralRead::kMore;
    const char e = s[i + 1];
    i += 2;
    switch (e) {
      case 'n': v.push_back('\n'); break;
      case 't': v.push_back('\t'); break;
      case 'r': v.push_back('\r'); break;
      case 'b': v.push_back('\b'); break;
      case 'f': v.push_back('\f'); break;
      case '0': v.push_back('\0'); break;
      case '\n': break;  // a continued line
      case '\\': case '\'': case '"': case '/': v.push_back(e); break;
      case 'x': case 'u': case 'U': {
        const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        int64_t cp = hex_at(s, i, n);
        if (cp == -2) return LiteralRead::kMore;
        if (cp < 0 || cp > 0x10ffff) return LiteralRead::kBad;
        i += n;
        if (cp >= 0xd800 && cp < 0xdc00) {  // a high surrogate: its low half follows as \uDCxx (as JSON writes)
          if (i < s.size() && s[i] != '\\') return LiteralRead::kBad;
          if (i + 1 < s.size() && s[i + 1] != 'u') return LiteralRead::kBad;
          const int64_t lo = i + 2 > s.size() ? -2 : hex_at(s, i + 2, 4);
          if (lo == -2) return LiteralRead::kMore;
          if (lo < 0xdc00 || lo >= 0xe000) return LiteralRead::kBad;
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          i += 6;
        } else if (cp >= 0xdc00 && cp < 0xe000) {
          return LiteralRead::kBad;
        }
        append_utf8(&v, static_cast<uint32_t>(cp));
        break;
      }
      default:  // Python keeps an unknown escape as written
        v.push_back('\\');
        v.push_back(e);
    }
  }
  return LiteralRead::kMore;
}

LiteralRead read_number(std::string_view s, size_t i, json* out, size_t* end) {
  const size_t b = i;
  if (s[i] == '-' || s[i] == '+') ++i;
  const size_t digits0 = i;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  bool real = false;
  if (i < s.size() && s[i] == '.') {
    real = true;
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    real = true;
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    const size_t e0 = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i == e0 && i < s.size()) return LiteralRead::kBad;
  }
  if (i == s.size()) return LiteralRead::kMore;  // the number may go on
  if (i == digits0 || (i == digits0 + 1 && s[digits0] == '.')) return LiteralRead::kBad;
  const std::string text(s.substr(b, i - b));
  if (!real) {
    errno = 0;
    const long long v = std::strtoll(text.c_str(), nullptr, 10);
    if (errno == 0) {
      *out = static_cast<int64_t>(v);
      *end = i;
      return LiteralRead::kDone;
    }
  }
  *out = std::strtod(text.c_str(), nullptr);
  *end = i;
  return LiteralRead::kDone;
}

LiteralRead read_at(std::string_view s, size_t i, json* out, size_t* end, int depth);

// [a, b], (a, b) or {k: v}: items separated by commas, a trailing comma allowed.
LiteralRead read_container(std::string_view s, size_t i, json* out, size_t* end, int depth) {
  if (depth > kMaxDepth) return LiteralRead::kBad;
  const char open = s[i];
  const char close = open == '[' ? ']' : open == '(' ? ')' : '}';
  json v = open == '{' ? json::object() : json::array();
  i = skip_space(s, i + 1);
  while (true) {
    if (i >= s.size()) return LiteralRead::kMore;
    if (s[i] == close) {
      *out = std::move(v);
      *end = i + 1;
      return LiteralRead::kDone;
    }
    json item;
    size_t e = 0;
    LiteralRead r = read_at(s, i, &item, &e, depth + 1);
    if (r != LiteralRead::kDone) return r;
    i = skip_space(s, e);
    if (open == '{') {
      if (i >= s.size()) return LiteralRead::kMore;
      if (s[i] != ':' || item.is_structured() || item.is_null()) return LiteralRead::kBad;
      json value;
      r = read_at(s, i + 1, &value, &e, depth + 1);
      if (r != LiteralRead::kDone) return r;
      v[item.is_string() ? item.get<std::string>() : item.dump()] = std::move(value);
      i = skip_space(s, e);
    } else {
      v.push_back(std::move(item));
    }
    if (i >= s.size()) return LiteralRead::kMore;
    if (s[i] == ',') {
      i = skip_space(s, i + 1);
    } else if (s[i] != close) {
      return LiteralRead::kBad;
    }
  }
}

LiteralRead read_at(std::string_view s, size_t i, json* out, size_t* end, int depth) {
  i = skip_space(s, i);
  if (i >= s.size()) return LiteralRead::kMore;
  const char c = s[i];
  if (c == '"' || c == '\'') return read_string(s, i, out, end);
  if (c == '[' || c == '(' || c == '{') return read_container(s, i, out, end, depth);
  if (c == '-' || c == '+' || c == '.' || std::isdigit(static_cast<unsigned char>(c))) return read_number(s, i, out, end);
  static const std::pair<const char*, json> kWords[] = {{"True", true},   {"False", false}, {"None", nullptr},
                                                       {"true", true},   {"false", false}, {"null", nullptr}};
  for (const auto& [w, v] : kWords) {
    const std::string_view word(w);
    const size_t n = std::min(word.size(), s.size() - i);
    if (s.compare(i, n, word.substr(0, n)) != 0) continue;
    if (n < word.size()) return LiteralRead::kMore;
    const size_t after = i + word.size();
    if (after == s.size()) return LiteralRead::kMore;  // "None" might be the start of a longer name
    if (std::isalnum(static_cast<unsigned char>(s[after])) || s[after] == '_') return LiteralRead::kBad;
    *out = v;
    *end = after;
    return LiteralRead::kDone;
  }
  return LiteralRead::kBad;
}

}  // namespace

LiteralRead read_python_literal(std::string_view s, size_t i, json* out, size_t* end) {
  return read_at(s, i, out, end, 0);
}

std::string python_call_text(const std::string& name, const json& arguments) {
  std::string t = name + "(";
  bool first = true;
  if (arguments.is_object())
    for (const auto& [k, v] : arguments.items()) {
      t += (first ? "" : ", ") + k + "=" + v.dump();
      first = false;
    }
  return t + ")";
}

}  // namespace cachet
