#include "base/utf8.h"

namespace cachet {

namespace {

// Bytes in a UTF-8 sequence starting with b, or 0 if b cannot start one.
int utf8_len(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Length of the valid UTF-8 sequence at s[i], or 0 when it is invalid or truncated.
size_t valid_seq(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const int n = utf8_len(b0);
  if (n == 0 || i + n > s.size()) return 0;
  for (int k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  if (n >= 3) {
    const auto b1 = static_cast<unsigned char>(s[i + 1]);
    if (b0 == 0xE0 && b1 < 0xA0) return 0;                 // overlong
    if (b0 == 0xED && b1 >= 0xA0) return 0;                // surrogates
    if (b0 == 0xF0 && b1 < 0x90) return 0;                 // overlong
    if (b0 == 0xF4 && b1 >= 0x90) return 0;                // > U+10FFFF
  }
  return n;
}

}  // namespace

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = valid_seq(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

size_t utf8_complete_prefix(std::string_view s) {
  // Look back at most 3 bytes for the start of a sequence that is cut off.
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const int need = utf8_len(b);
    if (need > static_cast<int>(back)) return n - back;  // lead byte whose sequence is incomplete
    return n;
  }
  return n;
}

}  // namespace cachet
