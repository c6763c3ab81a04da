// The OpenAI request parser: a body (bytes) -> JSON (depth-checked) -> a validated request, for both
// endpoints; every rejection must be a 400 with a message.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <variant>

#include "server/openai.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cachet::server;
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
