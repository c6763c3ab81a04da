// LLM::embed: inputs into the engine thread as embedding requests (batched with generation), pooled vectors
// back, then normalized and cut (Matryoshka) here.
#include <cmath>

#include "api/llm_impl.h"

namespace cachet {

namespace {

void normalize(std::vector<float>* v) {
  double ss = 0;
  for (float x : *v) ss += static_cast<double>(x) * x;
  if (ss <= 0) return;
  const float inv = static_cast<float>(1.0 / std::sqrt(ss));
  for (float& x : *v) x *= inv;
}

}  // namespace

Result<std::vector<std::vector<float>>> LLM::embed(const std::vector<std::string>& inputs, const EmbedParams& params) {
  if (!impl_->tok) return invalid_argument("text inputs need the model's tokenizer");
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(inputs.size());
  for (const std::string& s : inputs) ids.push_back(impl_->tok->encode(s, /*add_special=*/true, /*parse_special=*/false));
  return embed(ids, params);
}

Result<std::vector<std::vector<float>>> LLM::embed(const std::vector<std::vector<int32_t>>& inputs,
                                                   const EmbedParams& params) {
  Impl& m = *impl_;
  const ModelConfig& c = m.model->config();
  const std::optional<Pooling> pooling = params.pooling ? params.pooling : pooling_from_name(c.pooling);
  if (!pooling)
    return invalid_argument("this model's file names no pooling (" + c.arch +
                            ".pooling_type): ask for one (mean, cls, last, rank or none)");
  if ((*pooling == Pooling::kRank || *pooling == Pooling::kNone) && params.dimensions > 0)
    return invalid_argument(std::string("dimensions do not apply to ") + pooling_name(*pooling) + " pooling");
  if (params.dimensions < 0 || params.dimensions > c.n_embd)
    return invalid_argument("dimensions must be in 1.." + std::to_string(c.n_embd) + ", got " +
                            std::to_string(params.dimensions));
  if (inputs.empty()) return std::vector<std::vector<float>>{};
  std::vector<std::vector<int32_t>> ids = inputs;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i].empty()) return invalid_argument("input " + std::to_string(i) + " is empty");
    if (static_cast<int64_t>(ids[i].size()) > c.n_ctx_train) {
      if (!params.truncate)
        return invalid_argument("input " + std::to_string(i) + " has " + std::to_string(ids[i].size()) +
                                " tokens, more than the model's context of " + std::to_string(c.n_ctx_train) +
                                " (ask for truncation to cut it)");
      ids[i].resize(static_cast<size_t>(c.n_ctx_train));
    }
  }
  const int n = static_cast<int>(ids.size());
  auto stream = std::make_shared<RequestStream>(n);
  std::vector<RequestId> added;
  auto cancel_all = [&] {
    for (RequestId id : added) m.service->cancel(id);
  };
  for (int i = 0; i < n; ++i) {
    auto id = m.service->add_embedding(std::move(ids[i]), *pooling, params.cache_namespace, stream, i);
    if (!id.is_ok()) {
      cancel_all();
      return id.status().with_context("input " + std::to_string(i));
    }
    added.push_back(*id);
  }
  std::vector<std::vector<float>> out(static_cast<size_t>(n));
  std::vector<bool> done(static_cast<size_t>(n), false);
  for (int left = n; left > 0;) {
    std::vector<StreamEvent> evs;
    if (!stream->wait(&evs, std::chrono::milliseconds(100))) continue;
    for (StreamEvent& e : evs) {
      if (e.ev.finish == RequestFinish::kNone || done[e.index]) continue;
      if (e.ev.finish != RequestFinish::kStop) {
        cancel_all();
        return unavailable("input " + std::to_string(e.index) + " was not embedded" +
                           (e.error.empty() ? std::string() : ": " + e.error));
      }
      std::vector<float> v = std::move(e.ev.embedding);
      if (params.dimensions > 0) v.resize(static_cast<size_t>(params.dimensions));
      if (params.normalize && *pooling == Pooling::kNone) {  // each token's row on its own
        for (size_t at = 0; at < v.size(); at += static_cast<size_t>(c.n_embd)) {
          std::vector<float> row(v.begin() + at, v.begin() + at + c.n_embd);
          normalize(&row);
          std::copy(row.begin(), row.end(), v.begin() + at);
        }
      } else if (params.normalize && *pooling != Pooling::kRank) {  // scores stay as the head gives them
        normalize(&v);
      }
      out[e.index] = std::move(v);
      done[e.index] = true;
      --left;
    }
  }
  return out;
}

}  // namespace cachet
