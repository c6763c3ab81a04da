#include "server/embeddings.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <variant>

#include "base/utf8.h"

namespace cachet::server {

namespace {

using json = nlohmann::json;

struct EmbeddingRequest {
  std::vector<std::string> texts;             // or
  std::vector<std::vector<int32_t>> ids;      // token inputs
  bool base64 = false;
  int dimensions = 0;
  bool truncate = false;
  std::string model;
};

ApiError bad(const std::string& msg, const std::string& param) {
  return {400, msg, "invalid_request_error", param, ""};
}

std::variant<EmbeddingRequest, ApiError> parse(const json& body, int64_t n_vocab) {
  if (!body.is_object()) return bad("the request body must be a JSON object", "");
  EmbeddingRequest r;
  bool has_input = false;
  for (const auto& [key, v] : body.items()) {
    if (key == "input") {
      has_input = true;
      auto token_list = [&](const json& a, std::vector<int32_t>* out) -> std::optional<ApiError> {
        for (const json& t : a) {
          if (!t.is_number_integer()) return bad("'input' token arrays must hold integers", "input");
          const int64_t id = t.get<int64_t>();
          if (id < 0 || id >= n_vocab)
            return bad("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                           std::to_string(n_vocab - 1) + ")",
                       "input");
          out->push_back(static_cast<int32_t>(id));
        }
        return std::nullopt;
      };
      if (v.is_string()) {
        r.texts.push_back(v.get<std::string>());
      } else if (v.is_array() && !v.empty() && v[0].is_number()) {
        r.ids.emplace_back();
        if (auto e = token_list(v, &r.ids.back())) return *e;
      } else if (v.is_array()) {
        if (v.empty()) return bad("'input' must not be an empty array", "input");
        if (v.size() > kMaxEmbeddingInputs)
          return bad("'input' has " + std::to_string(v.size()) + " items; at most " +
                         std::to_string(kMaxEmbeddingInputs) + " per request",
                     "input");
        for (const json& x : v) {
          if (x.is_string()) {
            if (!r.ids.empty()) return bad("'input' mixes strings and token arrays", "input");
            r.texts.push_back(x.get<std::string>());
          } else if (x.is_array()) {
            if (!r.texts.empty()) return bad("'input' mixes strings and token arrays", "input");
            r.ids.emplace_back();
            if (auto e = token_list(x, &r.ids.back())) return *e;
          } else {
            return bad("'input' items must be strings or arrays of token ids", "input");
          }
        }
      } else {
        return bad("'input' must be a string, an array of strings, or token ids", "input");
      }
    } else if (key == "model") {
      if (!v.is_string()) return bad("'model' must be a string", "model");
      r.model = v.get<std::string>();
    } else if (key == "encoding_format") {
      if (!v.is_string() || (v != "float" && v != "base64"))
        return bad("'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
      r.base64 = v == "base64";
    } else if (key == "dimensions") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1)
        return bad("'dimensions' must be a positive integer", "dimensions");
      r.dimensions = static_cast<int>(std::min<int64_t>(v.get<int64_t>(), int64_t{1} << 30));
    } else if (key == "truncate") {
      if (!v.is_boolean()) return bad("'truncate' must be a boolean", "truncate");
      r.truncate = v.get<bool>();
    } else if (key == "user") {
      if (!v.is_string()) return bad("'user' must be a string", "user");
    } else {
      return bad("unknown field '" + key + "'", key);
    }
  }
  if (!has_input) return bad("'input' is required", "input");
  for (size_t i = 0; i < r.texts.size(); ++i)
    if (r.texts[i].empty()) return bad("'input' item " + std::to_string(i) + " is an empty string", "input");
  for (size_t i = 0; i < r.ids.size(); ++i)
    if (r.ids[i].empty()) return bad("'input' item " + std::to_string(i) + " is an empty token array", "input");
  return r;
}

std::string base64_of(const std::vector<float>& v) {
  static const char* const kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * 4, '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());  // little-endian float32, as OpenAI's clients decode it
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t w = 0;
    for (size_t k = 0; k < 3; ++k) w = w << 8 | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(w >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

}  // namespace

void handle_embeddings(App& app, const httplib::Request& req, httplib::Response& res) {
  const std::optional<json> body = accept_json_body(app, req, res);
  if (!body) return;
  auto parsed = parse(*body, app.llm->info().n_vocab);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  EmbeddingRequest r = std::move(std::get<EmbeddingRequest>(parsed));
  if (!r.model.empty() && r.model != app.model_id)
    return send_error(res, {404, "The model '" + r.model + "' does not exist; this server serves '" + app.model_id + "'",
                            "invalid_request_error", "model", "model_not_found"});
  const ModelInfo info = app.llm->info();
  EmbedParams p;
  p.pooling = app.opts.pooling ? app.opts.pooling : info.pooling;
  if (!p.pooling)
    return send_error(res, bad("this model's file names no pooling: start the server with --pooling mean, cls or "
                               "last to serve embeddings from it",
                               "model"));
  if (*p.pooling == Pooling::kNone)
    return send_error(res, bad("this model's pooling is none (a vector per token), which OpenAI's embeddings shape "
                               "cannot carry: start the server with --pooling mean, cls or last",
                               "model"));
  if (*p.pooling == Pooling::kRank)
    return send_error(res, bad("this model is a reranker (rank pooling): its outputs are relevance scores, not "
                               "embeddings; use /v1/rerank",
                               "model"));
  if (r.dimensions > info.n_embd)
    return send_error(res, bad("'dimensions' " + std::to_string(r.dimensions) + " is more than the model's " +
                                   std::to_string(info.n_embd),
                               "dimensions"));
  p.dimensions = r.dimensions;
  p.truncate = r.truncate;
  p.cache_namespace = std::hash<std::string>{}(req.get_header_value("Authorization"));
  if (!r.texts.empty()) {
    if (!app.tok) return send_error(res, bad("this model has no tokenizer: send token ids", "input"));
    for (size_t i = 0; i < r.texts.size(); ++i) {
      // More bytes than the context's worth of the longest tokens cannot fit: refused before tokenizing.
      if (!r.truncate && r.texts[i].size() > static_cast<size_t>(info.n_ctx_train) * app.max_token_bytes)
        return send_error(res, {400,
                                "input " + std::to_string(i) + " cannot fit in the model's context of " +
                                    std::to_string(info.n_ctx_train) + " tokens",
                                "invalid_request_error", "input", "context_length_exceeded"});
      r.ids.push_back(app.tok->encode(r.texts[i], /*add_special=*/true, /*parse_special=*/false));
    }
  }
  int64_t tokens = 0;
  for (size_t i = 0; i < r.ids.size(); ++i) {
    if (!r.truncate && static_cast<int64_t>(r.ids[i].size()) > info.n_ctx_train)
      return send_error(res, {400,
                              "input " + std::to_string(i) + " has " + std::to_string(r.ids[i].size()) +
                                  " tokens, more than the model's context of " + std::to_string(info.n_ctx_train) +
                                  " (send \"truncate\": true to cut it)",
                              "invalid_request_error", "input", "context_length_exceeded"});
    tokens += std::min<int64_t>(static_cast<int64_t>(r.ids[i].size()), info.n_ctx_train);
  }
  ++app.in_flight;
  auto out = app.llm->embed(r.ids, p);
  --app.in_flight;
  if (!out.is_ok()) return send_error(res, error_of(out.status()));
  app.metrics.prompt_tokens += tokens;
  json data = json::array();
  for (size_t i = 0; i < out->size(); ++i) {
    json e = {{"object", "embedding"}, {"index", i}};
    if (r.base64) e["embedding"] = base64_of((*out)[i]);
    else e["embedding"] = (*out)[i];
    data.push_back(std::move(e));
  }
  res.set_content(json({{"object", "list"},
                        {"data", std::move(data)},
                        {"model", app.model_id},
                        {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}})
                      .dump(),
                  "application/json");
}

}  // namespace cachet::server
