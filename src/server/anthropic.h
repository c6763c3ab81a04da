// Anthropic's Messages API (docs/server.md): POST /v1/messages and /v1/messages/count_tokens, for clients that
// speak it (Claude Code, the official `anthropic` SDK). The request becomes the same GenerationRequest as a chat
// completion (system, text / tool_use / tool_result / thinking blocks, tools with input_schema, tool_choice,
// thinking budget, stop_sequences); the answer comes back as content blocks, streamed as Anthropic's events
// (message_start, content_block_start / delta / stop with text_delta, thinking_delta and input_json_delta,
// message_delta with stop_reason and usage, message_stop). Errors in its shape.
#pragma once

#include <httplib.h>

#include "server/server_app.h"

namespace cachet::server {

void handle_anthropic_messages(App& app, const httplib::Request& req, httplib::Response& res);
void handle_anthropic_count_tokens(App& app, const httplib::Request& req, httplib::Response& res);

}  // namespace cachet::server
