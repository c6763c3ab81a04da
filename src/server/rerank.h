// POST /v1/rerank and /rerank in the Jina / Cohere shape: "query", "documents" (strings or {"text": ...}),
// "top_n", "return_documents". Each (query, document) pair runs through the reranker's classifier head (rank
// pooling) in the one engine, batched with whatever else it serves; results sorted by relevance, highest first.
#pragma once

#include <httplib.h>

#include "server/server_app.h"

namespace cachet::server {

void handle_rerank(App& app, const httplib::Request& req, httplib::Response& res);

}  // namespace cachet::server
