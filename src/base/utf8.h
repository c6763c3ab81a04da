// UTF-8 validity: the one rule for invalid input (each byte that does not start a valid sequence becomes
// U+FFFD), and where a byte stream can be cut without splitting a character.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace cachet {

// Replaces each byte that does not start a valid UTF-8 sequence (bad lead, truncated, overlong, surrogate,
// above U+10FFFF) by U+FFFD.
std::string sanitize_utf8(std::string_view s);
// Bytes of the UTF-8 sequence a lead byte starts (1 for bytes that cannot lead one, so scans advance).
inline size_t utf8_seq_len(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}
// Length of the longest prefix of s that does not end inside an incomplete UTF-8 sequence.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace cachet
