// Embeddings: one vector per input from a model's final hidden states, pooled as the model's file says
// (`{arch}.pooling_type`) or as asked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cachet {

// How a sequence's final hidden states become one vector: their mean, the first token's (BERT's [CLS]) or the
// last token's (causal embedders such as Qwen3-Embedding); for a reranker, its classifier's outputs on the
// state its file names (the first of them is the relevance score); or none: every token's state, one after
// another (n_tokens x n_embd, each row normalized on its own).
enum class Pooling { kMean, kCls, kLast, kRank, kNone };

// "mean", "cls", "last"; nullopt for anything else.
inline std::optional<Pooling> pooling_from_name(const std::string& name) {
  if (name == "mean") return Pooling::kMean;
  if (name == "cls") return Pooling::kCls;
  if (name == "last") return Pooling::kLast;
  if (name == "rank") return Pooling::kRank;
  if (name == "none") return Pooling::kNone;
  return std::nullopt;
}
inline const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::kMean: return "mean";
    case Pooling::kCls: return "cls";
    case Pooling::kLast: return "last";
    case Pooling::kRank: return "rank";
    case Pooling::kNone: return "none";
  }
  return "?";
}

struct EmbedParams {
  std::optional<Pooling> pooling;  // default: the model's (an error when its file names none)
  bool normalize = true;           // unit L2 length
  int dimensions = 0;              // > 0: the first `dimensions` values (Matryoshka), renormalized when normalize
  bool truncate = false;           // cut inputs longer than the model's context (else they are an error)
  uint64_t cache_namespace = 0;    // the prefix cache's tenant (as Request::cache_namespace)
};

// Reranking: a reranker model (rank pooling: a classifier head on its file) scores a query against documents.
struct RerankParams {
  uint64_t cache_namespace = 0;  // the prefix cache's tenant (as Request::cache_namespace)
};

}  // namespace cachet
