// VitAttention: two-way attention over an image's patches as GEMMs with a softmax over whole rows.
#include "vision/vit_attention.h"

#include <algorithm>

#include "kernels/kernels.h"
#include "vision/sgemm.h"

namespace cachet {

size_t VitAttention::scratch_bytes() const {
  size_t n = 0;
  for (const auto& s : scores_) n += s.size();
  return n * sizeof(float);
}

void VitAttention::run(ThreadPool& pool, const float* q, const float* k, const float* v, int T, int H, int hd,
                       float scale, float* out) {
  const Kernels& kern = kernels();
  const int64_t D = static_cast<int64_t>(H) * hd;
  scores_.resize(static_cast<size_t>(pool.n_threads()));
  for (auto& s : scores_) s.resize(static_cast<size_t>(kBlock) * T);
  const int64_t blocks = (T + kBlock - 1) / kBlock;
  pool.parallel_chunks(H * blocks, [&](int tid, int64_t i0, int64_t i1) {
    float* s = scores_[static_cast<size_t>(tid)].data();
    float sums[kBlock];
    for (int64_t item = i0; item < i1; ++item) {
      const int h = static_cast<int>(item / blocks);
      const int r0 = static_cast<int>(item % blocks) * kBlock, m = std::min(kBlock, T - r0);
      sgemm(m, T, hd, q + r0 * D + h * hd, D, k + h * hd, D, true, s, T);
      for (int i = 0; i < m; ++i) {
        float* row = s + static_cast<int64_t>(i) * T;
        float mx = -3.0e38f;
        for (int j = 0; j < T; ++j) {
          row[j] *= scale;
          mx = std::max(mx, row[j]);
        }
        sums[i] = kern.exp_sum(row, T, mx);
      }
      float* o = out + r0 * D + h * hd;
      sgemm(m, hd, T, s, T, v + h * hd, D, false, o, D);
      for (int i = 0; i < m; ++i) {
        const float inv = 1.0f / sums[i];
        for (int j = 0; j < hd; ++j) o[static_cast<int64_t>(i) * D + j] *= inv;
      }
    }
  }, 1);
}

}  // namespace cachet
