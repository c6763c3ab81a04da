// OpenAI's Responses API, stateless (docs/server.md): POST /v1/responses with input as text or items (messages,
// function_call, function_call_output), instructions, function tools, text.format json_schema, reasoning
// effort. The output is reasoning, message and function_call items; streamed as its semantic events
// (response.created, output_item.added, output_text.delta, function_call_arguments.delta, reasoning_text.delta,
// ... response.completed). Nothing is stored: previous_response_id is refused.
#pragma once

#include <httplib.h>

#include "server/server_app.h"

namespace cachet::server {

void handle_responses(App& app, const httplib::Request& req, httplib::Response& res);

}  // namespace cachet::server
