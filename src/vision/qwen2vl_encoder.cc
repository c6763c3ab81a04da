// Qwen2-VL's and Qwen2.5-VL's vision encoder (projector types qwen2vl_merger, qwen2.5vl_merger): the image at its
// own size in patches, each 2 x 2 block kept together, no learned position embeddings (the 2D rotary alone, as
// Qwen3-VL's), pre-norm layers (LayerNorm and a GELU-quick FFN in Qwen2-VL; RMSNorm and a gated SiLU FFN in
// Qwen2.5-VL), then the merger (the 4 patches of a block as one row, fc, GELU, fc). Qwen2.5-VL's layers attend
// within windows of window_size px except every n_wa_pattern-th: the blocks are taken window by window (each
// window's blocks row by row, windows from the top left) so a window is a contiguous range of rows, and the
// merged rows are put back in the image's order at the end.
#include <algorithm>
#include <cmath>

#include "model/ops.h"
#include "vision/vision_encoder.h"

namespace cachet {

namespace {

const float* f32(const TensorView& t) { return reinterpret_cast<const float*>(t.data); }

}  // namespace

void VisionEncoder::begin_qwen2vl(const EncoderInput& in) {
  const VisionConfig& c = cfg_;
  const int64_t P = c.patch_size, m = c.n_merge, per_row = m * m;
  const int64_t bw = job_.px / m, bh = job_.py / m;  // the grid of merged blocks

  std::vector<int32_t> order, ys, xs;
  merger_order(job_.px, job_.py, &order, &ys, &xs);
  // Blocks window by window: block_at[k] is the image's block (by * bw + bx) at the k-th place.
  std::vector<int64_t>& block_at = job_.block_at;
  const int64_t gw = c.n_wa_pattern > 0 ? std::max<int64_t>(1, c.window_size / (P * m)) : std::max(bw, bh);
  for (int64_t wy = 0; wy < bh; wy += gw)
    for (int64_t wx = 0; wx < bw; wx += gw) {
      const int64_t first = static_cast<int64_t>(block_at.size()) * per_row;
      for (int64_t y = wy; y < std::min(wy + gw, bh); ++y)
        for (int64_t x = wx; x < std::min(wx + gw, bw); ++x) block_at.push_back(y * bw + x);
      job_.windows.emplace_back(first, static_cast<int64_t>(block_at.size()) * per_row);
    }
  std::vector<int32_t> w_order(order.size()), w_ys(order.size()), w_xs(order.size());
  for (size_t k = 0; k < block_at.size(); ++k)
    for (int64_t j = 0; j < per_row; ++j) {
      const size_t to = k * per_row + j, from = static_cast<size_t>(block_at[k] * per_row + j);
      w_order[to] = order[from];
      w_ys[to] = ys[from];
      w_xs[to] = xs[from];
    }
  embed_patches(in.data.data(), in.width, w_order);
  job_.cos_sin = rope_2d_table(w_ys, w_xs);
}

void VisionEncoder::qwen2vl_norm(const TensorView& wt, const TensorView& b, float* x, float* y, int64_t rows) {
  if (cfg_.rms_norm) return rms_norm_rows(x, &wt, y, rows);
  layer_norm_rows(x, wt, b, y, rows);
}

void VisionEncoder::qwen2vl_layer(int64_t l) {
  const VisionConfig& c = cfg_;
  ThreadPool& pool = *pool_;
  const int64_t d = c.n_embd, hd = c.head_dim, H = c.n_head, ff = c.n_ff, T = job_.T;
  const int nt = static_cast<int>(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const VitLayerWeights& L = w_.layers[static_cast<size_t>(l)];
  qwen2vl_norm(L.ln1_w, L.ln1_b, x_.data(), xn_.data(), T);
  qkv(L, T);
  rope(q_.data(), job_.cos_sin.data(), nt, static_cast<int>(H), static_cast<int>(hd), static_cast<int>(hd), true);
  rope(k_.data(), job_.cos_sin.data(), nt, static_cast<int>(H), static_cast<int>(hd), static_cast<int>(hd), true);
  const bool full = c.n_wa_pattern <= 0 || (l + 1) % c.n_wa_pattern == 0;
  if (full) {
    vit_attn_.run(pool, q_.data(), k_.data(), v_.data(), nt, static_cast<int>(H), static_cast<int>(hd), scale,
                  attn_.data());
  } else {
    for (const auto& [a, b] : job_.windows)
      vit_attn_.run(pool, q_.data() + a * d, k_.data() + a * d, v_.data() + a * d, static_cast<int>(b - a),
                    static_cast<int>(H), static_cast<int>(hd), scale, attn_.data() + a * d);
  }
  gemm(L.wo, attn_.data(), T, proj_.data());
  if (L.bo.data) add_bias(proj_.data(), f32(L.bo), nt, d);
  for (int64_t i = 0; i < T * d; ++i) x_[i] += proj_[i];

  qwen2vl_norm(L.ln2_w, L.ln2_b, x_.data(), xn_.data(), T);
  gemm(L.w_up, xn_.data(), T, up_.data());
  if (L.b_up.data) add_bias(up_.data(), f32(L.b_up), nt, ff);
  if (L.w_gate.data) {  // SiLU(gate) * up
    gemm(L.w_gate, xn_.data(), T, gate_.data());
    if (L.b_gate.data) add_bias(gate_.data(), f32(L.b_gate), nt, ff);
    pool.parallel_for(T * ff, [&](int, int64_t b, int64_t e) { silu_mul(gate_.data() + b, up_.data() + b, e - b); },
                      4096);
  } else {  // GELU-quick(up): x sigmoid(1.702 x)
    pool.parallel_for(T * ff, [&](int, int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) gate_[i] = up_[i] / (1.0f + std::exp(-1.702f * up_[i]));
    }, 4096);
  }
  gemm(L.w_down, gate_.data(), T, proj_.data());
  if (L.b_down.data) add_bias(proj_.data(), f32(L.b_down), nt, d);
  for (int64_t i = 0; i < T * d; ++i) x_[i] += proj_[i];
}

void VisionEncoder::end_qwen2vl(float* out) {
  const VisionConfig& c = cfg_;
  const int64_t n_rows = job_.T / (c.n_merge * c.n_merge), n_out = c.n_embd_out;
  qwen2vl_norm(w_.post_ln_w, w_.post_ln_b, x_.data(), x_.data(), job_.T);
  // The merger over the rows in window order, then each row to its block's place in the image.
  std::vector<float> merged(static_cast<size_t>(n_rows * n_out));
  merger(x_.data(), n_rows, nullptr, nullptr, w_.mm0_w, w_.mm0_b, w_.mm2_w, w_.mm2_b, merged.data(), n_out);
  for (int64_t k = 0; k < n_rows; ++k)
    std::copy_n(merged.data() + k * n_out, n_out, out + job_.block_at[static_cast<size_t>(k)] * n_out);
}

}  // namespace cachet
