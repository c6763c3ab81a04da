// The OpenAI request parser: a body (bytes) -> JSON (depth-checked) -> a validated request, for both
// endpoints (chat's image_url parts: data: URIs, base64); every rejection must be a 400 with a message. The bytes
// as a data: URI too: decoded, or refused with a message.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <variant>

#include "server/data_uri.h"
#include "server/openai.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cachet::server;
  const DataUri d = parse_data_uri(std::string_view(reinterpret_cast<const char*>(data), size));
  if (d.error.empty() == d.bytes.empty()) std::abort();  // bytes, or an error saying why not
  auto body = parse_body(std::string(reinterpret_cast<const char*>(data), size));
  if (auto* e = std::get_if<ApiError>(&body)) {
    if (e->status != 400 || e->message.empty()) std::abort();
    return 0;
  }
  for (Endpoint ep : {Endpoint::kChat, Endpoint::kCompletions}) {
    auto r = parse_generation_request(std::get<nlohmann::json>(body), ep, 49152);
    if (auto* e = std::get_if<ApiError>(&r)) {
      if (e->status != 400 || e->message.empty()) std::abort();
      (void)e->body().dump();
    }
  }
  return 0;
}
