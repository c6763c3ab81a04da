// A generation request made ready for the engine, for every API (docs/tools.md, docs/structured-output.md): the
// prompt (a chat through the template, with tools, tool results and the template's kwargs), the grammar that
// constrains the output (response_format, grammar, tool_choice, thinking budget), and how the chat's output is
// split (reasoning markers, tools). Errors are the 400s that name what is wrong or not enforceable.
#pragma once

#include <memory>
#include <optional>
#include <variant>
#include <vector>

#include "grammar/grammar.h"
#include "vision/prompt_image.h"
#include "server/generation.h"
#include "server/openai.h"
#include "server/server_app.h"

namespace cachet::server {

struct Prepared {
  std::vector<int32_t> prompt;
  std::optional<OutputSpec> output;  // chat: the output's split
  std::shared_ptr<const Grammar> grammar;
  std::vector<PromptImage> images;  // where the prompt's images go (chat with image_url parts)
};

std::variant<Prepared, ApiError> prepare_generation(App& app, GenerationRequest& r);

// Submits a prepared request and answers in the API's shape, streamed (SSE) or whole; cancels when the client
// goes away. id_prefix names the response ("chatcmpl-", "msg_", ...). (server.cc)
void run_generation(App& app, const httplib::Request& req, httplib::Response& res, GenerationRequest r, Prepared p,
                    std::shared_ptr<ApiShape> shape, const std::string& id_prefix, Clock::time_point t0);

}  // namespace cachet::server
