#include "inspect/break_it.h"

#include <cmath>
#include <random>

#include "base/fp16.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "sampling/sampler.h"

namespace cachet {

namespace {

// A cache that can write one slot off: from `shift_from` on, position p's K and V go to slot p - 1 while
// attention still reads position p from slot p (the batch's slot mapping and block table disagree).
struct FaultyKvCache {
  FaultyKvCache(const ModelConfig& cfg, int capacity) : cache(cfg, capacity, DType::kF32) {}
  ForwardBatch batch(const std::vector<int32_t>& tokens, int pos0) {
    ForwardBatch b = ForwardBatch::single(cache, tokens, pos0, false);
    for (int i = 0; i < b.n_tokens(); ++i)
      if (shift_from >= 0 && b.positions[i] >= shift_from && b.positions[i] > 0) b.slots[i] -= 1;
    return b;
  }
  ContiguousKvCache cache;
  int shift_from = -1;
};

std::vector<double> softmax(const std::vector<float>& l) {
  double mx = l[argmax(l.data(), static_cast<int64_t>(l.size()))], s = 0;
  std::vector<double> p(l.size());
  for (size_t i = 0; i < l.size(); ++i) s += p[i] = std::exp(static_cast<double>(l[i]) - mx);
  for (double& x : p) x /= s;
  return p;
}

double kl_divergence(const std::vector<float>& clean, const std::vector<float>& broken) {
  auto p = softmax(clean), q = softmax(broken);
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0) kl += p[i] * (std::log(p[i]) - std::log(std::max(q[i], 1e-300)));
  return std::max(0.0, kl);
}

// Overwrites position `pos`'s keys (every layer, every KV head) with Gaussian noise at 8x their RMS.
void corrupt_key(const ModelConfig& cfg, ContiguousKvCache& c, int pos, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (int l = 0; l < cfg.n_layer; ++l) {
    auto* k = reinterpret_cast<float*>(c.k_row(l, pos));
    double ss = 0;
    for (int64_t j = 0; j < cfg.kv_dim(); ++j) ss += static_cast<double>(k[j]) * k[j];
    const float rms = static_cast<float>(std::sqrt(ss / cfg.kv_dim())) + 1e-3f;
    for (int64_t j = 0; j < cfg.kv_dim(); ++j) k[j] = 8.0f * rms * noise(rng);
  }
}

}  // namespace

const char* corruption_name(Corruption c) {
  switch (c) {
    case Corruption::kNone: return "none";
    case Corruption::kRandomKey: return "random-key";
    case Corruption::kShiftedWrite: return "shifted-write";
  }
  return "?";
}

Result<BreakReport> run_break_experiment(Model& model, const std::vector<int32_t>& prompt, int n_steps, int after,
                                         Corruption kind, uint64_t seed) {
  const ModelConfig& cfg = model.config();
  if (prompt.empty()) return invalid_argument("the prompt is empty");
  if (n_steps <= 0 || after < 0 || after >= n_steps) return invalid_argument("need 0 <= --after < steps");
  const int P = static_cast<int>(prompt.size());
  const int cap = P + n_steps + 1;
  const int64_t V = cfg.n_vocab;
  BreakReport rep;
  rep.kind = kind;
  if (kind == Corruption::kRandomKey) rep.corrupt_pos = (P + after) / 2;
  if (kind == Corruption::kShiftedWrite) rep.corrupt_pos = P + after;

  // The clean run and the corrupted one, each generating greedily from its own tokens; step s predicts the
  // token after s generated ones, and the corruption applies from step `after` on.
  FaultyKvCache clean(cfg, cap), broken(cfg, cap);
  std::vector<float> lc(V), lb(V);
  CACHET_RETURN_IF_ERROR(model.forward(clean.batch(prompt, 0), lc.data()));
  CACHET_RETURN_IF_ERROR(model.forward(broken.batch(prompt, 0), lb.data()));
  for (int s = 0; s < n_steps; ++s) {
    if (s > 0) {
      const int pos = P + s - 1;
      if (s == after && kind == Corruption::kRandomKey) corrupt_key(cfg, broken.cache, rep.corrupt_pos, seed);
      if (s == after && kind == Corruption::kShiftedWrite) broken.shift_from = pos;
      CACHET_RETURN_IF_ERROR(model.forward(clean.batch({rep.clean_ids.back()}, pos), lc.data()));
      CACHET_RETURN_IF_ERROR(model.forward(broken.batch({rep.free_run_ids.back()}, pos), lb.data()));
    }
    const int32_t ct = argmax(lc.data(), V), bt = argmax(lb.data(), V);
    rep.steps.push_back({s, kind != Corruption::kNone && s >= after && s > 0, ct, bt, kl_divergence(lc, lb)});
    rep.clean_ids.push_back(ct);
    rep.free_run_ids.push_back(bt);
  }
  return rep;
}

}  // namespace cachet
