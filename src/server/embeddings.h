// POST /v1/embeddings in OpenAI's shape: "input" as a string, an array of strings, an array of token ids or an
// array of such arrays; "encoding_format" float or base64; "dimensions" (Matryoshka: the first N values,
// renormalized); cachet's "truncate" to cut inputs longer than the context instead of refusing them. The
// inputs run in the one engine, batched with whatever else it serves.
#pragma once

#include <httplib.h>

#include "server/server_app.h"

namespace cachet::server {

constexpr size_t kMaxEmbeddingInputs = 2048;  // per request, as OpenAI's API

void handle_embeddings(App& app, const httplib::Request& req, httplib::Response& res);

}  // namespace cachet::server
