#include "engine/beam_search.h"

#include <algorithm>
#include <cmath>

#include "kv/kv_block_storage.h"
#include "kv/kv_cache_manager.h"

namespace cachet {

namespace {

struct Beam {
  std::vector<int32_t> tokens;
  double logprob = 0.0;
};

double normalized(const Beam& b, float length_penalty) {
  return b.logprob / std::pow(std::max<size_t>(1, b.tokens.size()), length_penalty);
}

}  // namespace

Result<BeamResult> beam_search(const BeamSearchParams& p, const BeamScorer& scorer) {
  if (p.width < 1) return invalid_argument("beam width must be >= 1");
  if (p.max_tokens < 1) return invalid_argument("max_tokens must be >= 1");
  std::vector<Beam> live{Beam{}};
  std::vector<int> parents{-1};
  std::vector<int32_t> last{-1};
  std::vector<Beam> finished;
  for (int step = 0; step < p.max_tokens && !live.empty(); ++step) {
    CACHET_ASSIGN_OR_RETURN(auto lps, scorer(parents, last));
    struct Cand {
      double score;
      int beam;
      int32_t token;
    };
    std::vector<Cand> cands;
    for (size_t b = 0; b < live.size(); ++b)
      for (size_t t = 0; t < lps[b].size(); ++t)
        if (std::isfinite(lps[b][t])) cands.push_back({live[b].logprob + lps[b][t], static_cast<int>(b), static_cast<int32_t>(t)});
    // Best first; ties by beam, then token, so the search is deterministic.
    const size_t keep = std::min(cands.size(), static_cast<size_t>(2 * p.width));
    std::partial_sort(cands.begin(), cands.begin() + keep, cands.end(), [](const Cand& a, const Cand& b) {
      if (a.score != b.score) return a.score > b.score;
      if (a.beam != b.beam) return a.beam < b.beam;
      return a.token < b.token;
    });
    std::vector<Beam> next;
    parents.clear();
    last.clear();
    for (size_t i = 0; i < keep && static_cast<int>(next.size()) < p.width; ++i) {
      Beam nb = live[cands[i].beam];
      nb.tokens.push_back(cands[i].token);
      nb.logprob = cands[i].score;
      if (std::find(p.end_ids.begin(), p.end_ids.end(), cands[i].token) != p.end_ids.end()) {
        finished.push_back(std::move(nb));
        continue;
      }
      parents.push_back(cands[i].beam);
      last.push_back(cands[i].token);
      next.push_back(std::move(nb));
    }
    live = std::move(next);
  }
  for (auto& b : live) finished.push_back(std::move(b));
  if (finished.empty()) return invalid_argument("beam search produced no hypothesis");
  const Beam* best = &finished[0];
  for (const Beam& b : finished)
    if (normalized(b, p.length_penalty) > normalized(*best, p.length_penalty)) best = &b;
  return BeamResult{best->tokens, best->logprob, normalized(*best, p.length_penalty)};
}

Result<BeamResult> beam_search_model(Model& model, const std::vector<int32_t>& prompt, const BeamSearchParams& p) {
  const ModelConfig& c = model.config();
  if (prompt.empty()) return invalid_argument("the prompt is empty");
  constexpr int kBs = 16;
  const int max_len = static_cast<int>(prompt.size()) + p.max_tokens;
  const int n_blocks = (p.width + 1) * ((max_len + kBs - 1) / kBs + 1);
  KvBlockStorage storage(c, n_blocks, kBs, DType::kF16);
  KvCacheManager mgr(n_blocks, kBs);
  const int64_t V = c.n_vocab;
  std::vector<SeqId> beam_seqs;  // seq of each live beam, in the scorer's order
  SeqId next_seq = 1;
  std::vector<float> logits;
  auto log_softmax = [&](const float* l) {
    double mx = l[0];
    for (int64_t i = 1; i < V; ++i) mx = std::max<double>(mx, l[i]);
    double s = 0;
    for (int64_t i = 0; i < V; ++i) s += std::exp(l[i] - mx);
    std::vector<float> out(V);
    const double lse = mx + std::log(s);
    for (int64_t i = 0; i < V; ++i) out[i] = static_cast<float>(l[i] - lse);
    return out;
  };
  BeamScorer scorer = [&](const std::vector<int>& parents,
                          const std::vector<int32_t>& tokens) -> Result<std::vector<std::vector<float>>> {
    if (parents.size() == 1 && parents[0] == -1) {  // the prompt
      const SeqId s = next_seq++;
      if (!mgr.append(s, static_cast<int>(prompt.size()))) return resource_exhausted("KV pool too small");
      logits.resize(V);
      CACHET_RETURN_IF_ERROR(model.forward(ForwardBatch::single(storage, mgr.block_table(s), prompt, 0, false),
                                           logits.data()));
      beam_seqs = {s};
      return std::vector<std::vector<float>>{log_softmax(logits.data())};
    }
    // Each new beam forks its parent's sequence (sharing its blocks), then all run one token in one batch.
    std::vector<SeqId> seqs;
    for (int parent : parents) {
      const SeqId s = next_seq++;
      mgr.fork(beam_seqs[parent], s);
      seqs.push_back(s);
    }
    for (SeqId old : beam_seqs) mgr.free(old);
    beam_seqs = seqs;
    ForwardBatch b;
    b.kv = &storage;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int pos = mgr.num_tokens(seqs[i]);
      if (!mgr.append(seqs[i], 1)) return resource_exhausted("KV pool too small");
      b.add_token(tokens[i], pos, b.add_sequence(mgr.block_table(seqs[i])), true);
    }
    b.copies = mgr.take_copies();  // the beams' shared last blocks, copied before they are written
    logits.resize(seqs.size() * V);
    CACHET_RETURN_IF_ERROR(model.forward(b, logits.data()));
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < seqs.size(); ++i) out.push_back(log_softmax(logits.data() + i * V));
    return out;
  };
  return beam_search(p, scorer);
}

}  // namespace cachet
