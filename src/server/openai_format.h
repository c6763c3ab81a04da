// OpenAI's shapes of a generation (server/generation.h): chat.completion and text_completion bodies, their
// streamed chunks (role first; reasoning_content and reasoning, content, tool_calls deltas; usage; [DONE]).
#pragma once

#include <memory>

#include "server/generation.h"

namespace cachet::server {

std::unique_ptr<ApiShape> openai_shape();

}  // namespace cachet::server
