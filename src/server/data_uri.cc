#include "server/data_uri.h"

#include <array>

namespace cachet::server {

std::optional<std::string> base64_decode(std::string_view in) {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(abc[i])] = static_cast<int8_t>(i);
    return t;
  }();
  std::string out;
  out.reserve(in.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0, pad = 0;
  for (char ch : in) {
    if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t') continue;
    if (ch == '=') {
      ++pad;
      continue;
    }
    const int v = table[static_cast<unsigned char>(ch)];
    if (v < 0 || pad > 0) return std::nullopt;  // a stray character, or data after padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  // What is left must be the zero bits of an incomplete last group (2 or 4 of them), never a lone character.
  if (bits >= 6 || pad > 2 || (acc & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

namespace {

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

DataUri parse_data_uri(std::string_view uri) {
  DataUri d;
  if (uri.substr(0, 5) != "data:") {
    d.error = uri.substr(0, 7) == "http://" || uri.substr(0, 8) == "https://"
                  ? "remote image URLs are not fetched: send the image inline as a data: URI (base64)"
                  : "an image URL must be a data: URI (data:image/png;base64,...)";
    return d;
  }
  const size_t comma = uri.find(',');
  if (comma == std::string_view::npos) {
    d.error = "a data: URI needs a ',' before its data";
    return d;
  }
  std::string_view meta = uri.substr(5, comma - 5), data = uri.substr(comma + 1);
  bool b64 = false;
  if (meta.size() >= 7 && meta.substr(meta.size() - 7) == ";base64") {
    b64 = true;
    meta.remove_suffix(7);
  }
  d.media_type = std::string(meta.substr(0, meta.find(';')));
  if (b64) {
    auto bytes = base64_decode(data);
    if (!bytes) {
      d.error = "the data: URI's base64 data is malformed";
      return d;
    }
    d.bytes = std::move(*bytes);
  } else {
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i] != '%') {
        d.bytes.push_back(data[i]);
        continue;
      }
      const int h = i + 2 < data.size() ? hex(data[i + 1]) : -1, l = h >= 0 ? hex(data[i + 2]) : -1;
      if (l < 0) {
        d.error = "the data: URI has a malformed %-escape";
        d.bytes.clear();  // bytes only when usable
        return d;
      }
      d.bytes.push_back(static_cast<char>(h * 16 + l));
      i += 2;
    }
  }
  if (d.bytes.empty()) d.error = "the image is empty";
  return d;
}

}  // namespace cachet::server
