#include "server/rerank.h"

#include <algorithm>
#include <numeric>
#include <nlohmann/json.hpp>
#include <variant>

#include "server/embeddings.h"

namespace cachet::server {

namespace {

using json = nlohmann::json;

struct RerankRequest {
  std::string model, query;
  std::vector<std::string> documents;
  size_t top_n = 0;  // 0: all
  bool return_documents = true;
};

ApiError bad(const std::string& msg, const std::string& param) {
  return {400, msg, "invalid_request_error", param, ""};
}

std::variant<RerankRequest, ApiError> parse(const json& body) {
  if (!body.is_object()) return bad("the request body must be a JSON object", "");
  RerankRequest r;
  bool has_query = false, has_documents = false;
  for (const auto& [key, v] : body.items()) {
    if (key == "query") {
      if (!v.is_string()) return bad("'query' must be a string", "query");
      r.query = v.get<std::string>();
      has_query = true;
    } else if (key == "documents") {
      if (!v.is_array()) return bad("'documents' must be an array of strings", "documents");
      if (v.empty()) return bad("'documents' must not be empty", "documents");
      if (v.size() > kMaxEmbeddingInputs)
        return bad("'documents' has " + std::to_string(v.size()) + " items; at most " +
                       std::to_string(kMaxEmbeddingInputs) + " per request",
                   "documents");
      for (const json& d : v) {
        if (d.is_string()) {
          r.documents.push_back(d.get<std::string>());
        } else if (d.is_object() && d.contains("text") && d["text"].is_string()) {
          r.documents.push_back(d["text"].get<std::string>());
        } else {
          return bad("'documents' items must be strings or objects with a string 'text'", "documents");
        }
      }
      has_documents = true;
    } else if (key == "top_n") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1) return bad("'top_n' must be a positive integer", "top_n");
      r.top_n = static_cast<size_t>(std::min<int64_t>(v.get<int64_t>(), int64_t{1} << 30));
    } else if (key == "return_documents") {
      if (!v.is_boolean()) return bad("'return_documents' must be a boolean", "return_documents");
      r.return_documents = v.get<bool>();
    } else if (key == "model") {
      if (!v.is_string()) return bad("'model' must be a string", "model");
      r.model = v.get<std::string>();
    } else if (key == "user") {
      if (!v.is_string()) return bad("'user' must be a string", "user");
    } else {
      return bad("unknown field '" + key + "'", key);
    }
  }
  if (!has_query) return bad("'query' is required", "query");
  if (!has_documents) return bad("'documents' is required", "documents");
  if (r.query.empty()) return bad("'query' is an empty string", "query");
  for (size_t i = 0; i < r.documents.size(); ++i)
    if (r.documents[i].empty()) return bad("'documents' item " + std::to_string(i) + " is an empty string", "documents");
  return r;
}

}  // namespace

void handle_rerank(App& app, const httplib::Request& req, httplib::Response& res) {
  const std::optional<json> body = accept_json_body(app, req, res);
  if (!body) return;
  auto parsed = parse(*body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  RerankRequest r = std::move(std::get<RerankRequest>(parsed));
  if (!r.model.empty() && r.model != app.model_id)
    return send_error(res, {404, "The model '" + r.model + "' does not exist; this server serves '" + app.model_id + "'",
                            "invalid_request_error", "model", "model_not_found"});
  const ModelInfo info = app.llm->info();
  if (info.pooling != Pooling::kRank && app.opts.pooling != Pooling::kRank)
    return send_error(res, bad("this model is not a reranker (its file names no rank pooling and no classifier "
                               "head): serve a reranking model to use /v1/rerank",
                               "model"));
  if (!app.tok) return send_error(res, bad("this model has no tokenizer", "query"));
  // The pairs as the model reads them; a pair longer than the context is refused, never cut.
  std::vector<std::vector<int32_t>> ids;
  int64_t tokens = 0;
  for (size_t i = 0; i < r.documents.size(); ++i) {
    if (r.query.size() + r.documents[i].size() > static_cast<size_t>(info.n_ctx_train) * app.max_token_bytes + 4096)
      return send_error(res, {400, "document " + std::to_string(i) + " with the query cannot fit in the model's context",
                              "invalid_request_error", "documents", "context_length_exceeded"});
    auto t = app.llm->rerank_tokens(r.query, r.documents[i]);
    if (!t.is_ok()) return send_error(res, error_of(t.status()));
    if (static_cast<int64_t>(t->size()) > info.n_ctx_train)
      return send_error(res, {400,
                              "document " + std::to_string(i) + " with the query is " + std::to_string(t->size()) +
                                  " tokens, more than the model's context of " + std::to_string(info.n_ctx_train),
                              "invalid_request_error", "documents", "context_length_exceeded"});
    tokens += static_cast<int64_t>(t->size());
    ids.push_back(std::move(*t));
  }
  EmbedParams p;
  p.pooling = Pooling::kRank;
  p.normalize = false;
  p.cache_namespace = std::hash<std::string>{}(req.get_header_value("Authorization"));
  ++app.in_flight;
  auto out = app.llm->embed(ids, p);
  --app.in_flight;
  if (!out.is_ok()) return send_error(res, error_of(out.status()));
  app.metrics.prompt_tokens += tokens;
  std::vector<size_t> order(out->size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Highest score first; ties keep document order.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return (*out)[a][0] > (*out)[b][0]; });
  if (r.top_n > 0 && r.top_n < order.size()) order.resize(r.top_n);
  json results = json::array();
  for (size_t i : order) {
    json e = {{"index", i}, {"relevance_score", (*out)[i][0]}};
    if (r.return_documents) e["document"] = {{"text", r.documents[i]}};
    results.push_back(std::move(e));
  }
  res.set_content(json({{"object", "list"},
                        {"model", app.model_id},
                        {"results", std::move(results)},
                        {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}})
                      .dump(),
                  "application/json");
}

}  // namespace cachet::server
