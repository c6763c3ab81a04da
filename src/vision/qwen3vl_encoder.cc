// Qwen3-VL's vision encoder (projector type qwen3vl_merger; Qwen3.5's too): the image at its own size in
// patches, each 2 x 2 block of patches kept together (the merger's order), learned position embeddings
// interpolated to the image's grid, 2D rotary positions in every head (a quarter of the pairs turn with the
// patch's row, a quarter with its column, each pair with its own frequency), then the merger (the 4 patches of a
// block as one row) and, for Qwen3-VL, deepstack rows from inner layers beside it.
#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "model/ops.h"
#include "vision/vision_encoder.h"

namespace cachet {

void VisionEncoder::merger_order(int64_t px, int64_t py, std::vector<int32_t>* order, std::vector<int32_t>* ys,
                                 std::vector<int32_t>* xs) const {
  const int64_t m = cfg_.n_merge, T = px * py;
  order->resize(static_cast<size_t>(T));
  ys->resize(order->size());
  xs->resize(order->size());
  for (int64_t by = 0, t = 0; by < py / m; ++by)
    for (int64_t bx = 0; bx < px / m; ++bx)
      for (int64_t dy = 0; dy < m; ++dy)
        for (int64_t dx = 0; dx < m; ++dx, ++t) {
          (*ys)[t] = static_cast<int32_t>(by * m + dy);
          (*xs)[t] = static_cast<int32_t>(bx * m + dx);
          (*order)[t] = static_cast<int32_t>((*ys)[t] * px + (*xs)[t]);
        }
}

std::vector<float> VisionEncoder::rope_2d_table(const std::vector<int32_t>& ys, const std::vector<int32_t>& xs) const {
  const int64_t hd = cfg_.head_dim, q = hd / 4, T = static_cast<int64_t>(ys.size());
  std::vector<float> cos_sin(static_cast<size_t>(T * hd));
  std::vector<double> freq(static_cast<size_t>(q));
  for (int64_t i = 0; i < q; ++i)
    freq[static_cast<size_t>(i)] = std::pow(10000.0, -4.0 * static_cast<double>(i) / static_cast<double>(hd));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < 2 * q; ++i) {
      const double a = (i < q ? ys[t] : xs[t]) * freq[static_cast<size_t>(i % q)];
      cos_sin[t * hd + 2 * i] = static_cast<float>(std::cos(a));
      cos_sin[t * hd + 2 * i + 1] = static_cast<float>(std::sin(a));
    }
  return cos_sin;
}

void VisionEncoder::begin_qwen3vl(const EncoderInput& in) {
  const VisionConfig& c = cfg_;
  ThreadPool& pool = *pool_;
  const Kernels& kern = kernels();
  const int64_t d = c.n_embd, px = job_.px, py = job_.py, T = job_.T;

  std::vector<int32_t> order, ys, xs;
  merger_order(px, py, &order, &ys, &xs);
  embed_patches(in.data.data(), in.width, order);

  // Position embeddings learned on an n x n grid, bilinearly interpolated to py x px with the corners aligned.
  const int64_t n = c.patches_per_side();
  pool.parallel_for(T, [&](int, int64_t t0, int64_t t1) {
    std::vector<float> e(static_cast<size_t>(4 * d));
    for (int64_t t = t0; t < t1; ++t) {
      const double fy = py > 1 ? static_cast<double>(ys[t]) * (n - 1) / (py - 1) : 0.0;
      const double fx = px > 1 ? static_cast<double>(xs[t]) * (n - 1) / (px - 1) : 0.0;
      const int64_t y0 = static_cast<int64_t>(fy), x0 = static_cast<int64_t>(fx);
      const int64_t y1 = std::min(y0 + 1, n - 1), x1 = std::min(x0 + 1, n - 1);
      const float wy = static_cast<float>(fy - y0), wx = static_cast<float>(fx - x0);
      const int64_t at[4] = {y0 * n + x0, y0 * n + x1, y1 * n + x0, y1 * n + x1};
      const float wt[4] = {(1 - wy) * (1 - wx), (1 - wy) * wx, wy * (1 - wx), wy * wx};
      for (int k = 0; k < 4; ++k) kern.dequantize_row(w_.pos_embd.type, w_.pos_embd.row(at[k]), e.data() + k * d, d);
      float* xt = x_.data() + t * d;
      for (int64_t i = 0; i < d; ++i)
        xt[i] += wt[0] * e[i] + wt[1] * e[d + i] + wt[2] * e[2 * d + i] + wt[3] * e[3 * d + i];
    }
  }, 16);
  job_.cos_sin = rope_2d_table(ys, xs);
  job_.rows.assign(static_cast<size_t>(T / (c.n_merge * c.n_merge) * c.row_width()), 0.0f);
}

void VisionEncoder::qwen3vl_layer(int64_t l) {
  vit_layer(l, job_.cos_sin.data());
  if (job_.next_ds >= w_.deepstack.size() || w_.deepstack[job_.next_ds].layer != l) return;
  const VisionWeights::Deepstack& ds = w_.deepstack[job_.next_ds];
  ++job_.next_ds;
  const int64_t n_rows = job_.T / (cfg_.n_merge * cfg_.n_merge);
  merger(x_.data(), n_rows, &ds.norm_w, &ds.norm_b, ds.fc1_w, ds.fc1_b, ds.fc2_w, ds.fc2_b,
         job_.rows.data() + static_cast<int64_t>(job_.next_ds) * cfg_.n_embd_out, cfg_.row_width());
}

void VisionEncoder::end_qwen3vl(float* out) {
  const int64_t n_rows = job_.T / (cfg_.n_merge * cfg_.n_merge);
  layer_norm_rows(x_.data(), w_.post_ln_w, w_.post_ln_b, x_.data(), job_.T);
  merger(x_.data(), n_rows, nullptr, nullptr, w_.mm0_w, w_.mm0_b, w_.mm2_w, w_.mm2_b, job_.rows.data(),
         cfg_.row_width());
  std::copy(job_.rows.begin(), job_.rows.end(), out);
}

}  // namespace cachet
