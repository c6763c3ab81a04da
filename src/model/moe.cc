#include "model/moe.h"

#include <algorithm>
#include <limits>
#include <cmath>
#include <numeric>

#include "base/check.h"
#include "model/ops.h"

namespace cachet {

MoeRouting route_experts(const float* logits, int n_tokens, int n_expert, int k, bool renormalize, float scale,
                         bool sigmoid, const float* select_bias, int n_groups, int groups_used) {
  CACHET_CHECK(k >= 1 && k <= n_expert);
  const int per_group = n_expert / std::max(n_groups, 1);
  CACHET_CHECK(n_groups == 1 || (n_expert % n_groups == 0 && per_group >= 2 && groups_used >= 1 &&
                                 groups_used <= n_groups && k <= groups_used * per_group));
  std::vector<float> group_score(static_cast<size_t>(n_groups));
  std::vector<int32_t> groups(static_cast<size_t>(n_groups));
  MoeRouting r;
  r.n_tokens = n_tokens;
  r.k = k;
  r.expert.resize(static_cast<size_t>(n_tokens) * k);
  r.weight.resize(static_cast<size_t>(n_tokens) * k);
  std::vector<float> p(n_expert);
  std::vector<int32_t> order(n_expert);
  std::vector<float> sel;
  for (int t = 0; t < n_tokens; ++t) {
    const float* z = logits + static_cast<int64_t>(t) * n_expert;
    if (sigmoid) {
      for (int e = 0; e < n_expert; ++e) p[e] = 1.0f / (1.0f + std::exp(-z[e]));
    } else {
      const float mx = *std::max_element(z, z + n_expert);
      float sum = 0.0f;
      for (int e = 0; e < n_expert; ++e) sum += p[e] = std::exp(z[e] - mx);
      for (int e = 0; e < n_expert; ++e) p[e] /= sum;
    }
    std::iota(order.begin(), order.end(), 0);
    // Stable: equal scores keep the lower expert first.
    if (select_bias || n_groups > 1) {
      sel.resize(static_cast<size_t>(n_expert));
      for (int e = 0; e < n_expert; ++e) sel[e] = select_bias ? p[e] + select_bias[e] : p[e];
      if (n_groups > 1) {
        for (int g = 0; g < n_groups; ++g) {
          const float* s = sel.data() + g * per_group;
          float best = -std::numeric_limits<float>::infinity(), second = best;
          for (int e = 0; e < per_group; ++e) {
            if (s[e] > best) {
              second = best;
              best = s[e];
            } else if (s[e] > second) {
              second = s[e];
            }
          }
          group_score[g] = best + second;
        }
        std::iota(groups.begin(), groups.end(), 0);
        std::stable_sort(groups.begin(), groups.end(),
                         [&](int32_t a, int32_t b) { return group_score[a] > group_score[b]; });
        for (int j = groups_used; j < n_groups; ++j)
          std::fill_n(sel.begin() + groups[j] * per_group, per_group, -std::numeric_limits<float>::infinity());
      }
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return sel[a] > sel[b]; });
    } else {
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    }
    float chosen = 0.0f;
    for (int j = 0; j < k; ++j) chosen += p[order[j]];
    chosen = std::max(chosen, 6.103515625e-5f);
    for (int j = 0; j < k; ++j) {
      float w = p[order[j]];
      if (renormalize) w /= chosen;
      r.expert[static_cast<size_t>(t) * k + j] = order[j];
      r.weight[static_cast<size_t>(t) * k + j] = w * scale;
    }
  }
  return r;
}

namespace {
thread_local AlignedBuffer<float> t_moe;    // every slot's expert output (the calling thread's)
thread_local AlignedBuffer<float> t_work;   // an expert's gathered inputs, gate and up (each thread's own)

// Expert e on the n (token, slot) pairs s serves: gathered, gate and up, the activation, the down projection,
// each output row to its slot's row of ys. pool: the whole pool (one expert at a time) or a one-thread pool
// (experts side by side).
void run_expert(ThreadPool& pool, const MoeWeights& w, int e, const std::vector<int32_t>& s, int k,
                const float* x, int64_t n_embd, int64_t n_ff, float* ys) {
  const int n = static_cast<int>(s.size());
  const size_t need = static_cast<size_t>(n) * (n_embd + 2 * n_ff);
  if (t_work.size() < need) t_work.resize(need);
  float* xs = t_work.data();
  float* g = xs + static_cast<size_t>(n) * n_embd;
  float* u = g + static_cast<size_t>(n) * n_ff;
  for (int j = 0; j < n; ++j) std::copy(x + (s[j] / k) * n_embd, x + (s[j] / k + 1) * n_embd, xs + j * n_embd);
  if (w.gate) {
    matmul_multi(pool, {{&(*w.gate)[e], g}, {&(*w.up)[e], u}}, xs, n);
    if (w.gate_b) add_bias(g, w.gate_b + e * n_ff, n, n_ff);
    if (w.up_b) add_bias(u, w.up_b + e * n_ff, n, n_ff);
  } else {  // act(up x): the activation times ones
    matmul(pool, (*w.up)[e], xs, n, g);
    std::fill(u, u + static_cast<int64_t>(n) * n_ff, 1.0f);
  }
  glu_mul(w.act, g, u, static_cast<int64_t>(n) * n_ff);
  // The down projection of expert e for its n rows, into xs (free again), then to each slot's row.
  matmul(pool, (*w.down)[e], g, n, xs);
  if (w.down_b) add_bias(xs, w.down_b + e * n_embd, n, n_embd);
  for (int j = 0; j < n; ++j) std::copy(xs + j * n_embd, xs + (j + 1) * n_embd, ys + s[j] * n_embd);
}
}  // namespace

void moe_ffn(ThreadPool& pool, const MoeWeights& w, const MoeRouting& r, const float* x, int64_t n_embd,
             int64_t n_ff, float* out) {
  const int T = r.n_tokens, k = r.k;
  const int n_expert = static_cast<int>(w.up->size());
  // Which (token, slot) pairs each expert serves, in token order.
  std::vector<std::vector<int32_t>> served(n_expert);
  for (int i = 0; i < T * k; ++i) served[r.expert[i]].push_back(i);
  std::vector<int> active;  // the experts with work, most rows first
  for (int e = 0; e < n_expert; ++e)
    if (!served[e].empty()) active.push_back(e);
  std::stable_sort(active.begin(), active.end(), [&](int a, int b) { return served[a].size() > served[b].size(); });
  // ys: [T * k, n_embd] each slot's expert output.
  const size_t ys_n = static_cast<size_t>(T) * k * n_embd;
  if (t_moe.size() < ys_n) t_moe.resize(ys_n);
  float* ys = t_moe.data();
  const int nt = pool.n_threads();
  if (nt > 1 && static_cast<int>(active.size()) >= 2 * nt) {
    // Enough experts to go around: each thread runs whole experts, the largest first, taking the next as it
    // finishes (a prefill's 128 experts of ~32 rows each: one parallel region per layer instead of two per
    // expert, and the gathers, activations and scatters in parallel too). An expert's rows are the same
    // kernel's either way (matmul results do not depend on the thread count), so the bits are too.
    pool.parallel_chunks(static_cast<int64_t>(active.size()), [&](int, int64_t b, int64_t end) {
      thread_local ThreadPool solo(1);
      for (int64_t i = b; i < end; ++i) {
        const int e = active[static_cast<size_t>(i)];
        run_expert(solo, w, e, served[e], k, x, n_embd, n_ff, ys);
      }
    });
  } else {
    for (int e : active) run_expert(pool, w, e, served[e], k, x, n_embd, n_ff, ys);
  }
  // Each token's slots summed in routing order, tokens side by side.
  pool.parallel_for(T, [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* o = out + t * n_embd;
      for (int j = 0; j < k; ++j) {
        const float wj = r.weight[static_cast<size_t>(t) * k + j];
        const float* y = ys + (static_cast<size_t>(t) * k + j) * n_embd;
        if (j == 0) {
          for (int64_t i = 0; i < n_embd; ++i) o[i] = wj * y[i];
        } else {
          for (int64_t i = 0; i < n_embd; ++i) o[i] += wj * y[i];
        }
      }
    }
  });
}

}  // namespace cachet
