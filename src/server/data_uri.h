// Images as clients send them: OpenAI's `image_url` (a data: URI, RFC 2397, or a remote URL), Anthropic's
// `source` ({"type": "base64", "media_type", "data"} or {"type": "url"}). Only inline data is taken: a server
// fetching URLs a client names is a request-forgery risk and a way to hang a worker, so remote URLs are a 400
// that says so (docs/vision.md). Internal to src/server.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cachet::server {

// Standard base64 (RFC 4648; padding optional, whitespace ignored); nullopt on anything else.
std::optional<std::string> base64_decode(std::string_view in);

// The bytes of a data: URI ("data:[<media type>][;base64],<data>"; percent-encoded data unescaped), or an
// error message.
struct DataUri {
  std::string media_type;
  std::string bytes;  // empty whenever error is set
  std::string error;  // non-empty: not usable
};
DataUri parse_data_uri(std::string_view uri);

}  // namespace cachet::server
