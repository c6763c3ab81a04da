// VisionEncoder: preprocessing and the forward pass (a pre-norm ViT, then the projector's own head).
#include "vision/vision_encoder.h"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "kv/kv_block_storage.h"
#include "kv/kv_view.h"
#include "model/config.h"
#include "model/ops.h"

namespace cachet {

namespace {

const float* f32(const TensorView& t) { return reinterpret_cast<const float*>(t.data); }

}  // namespace

std::vector<float> VisionEncoder::preprocess(const Image& img) const {
  const int S = static_cast<int>(cfg_.image_size);
  const Image sized = resize_image(img, S, S, cfg_.resize);
  std::vector<float> out(static_cast<size_t>(3) * S * S);
  for (int c = 0; c < 3; ++c) {
    const float mean = cfg_.mean[c], inv_std = 1.0f / cfg_.std[c];
    float* dst = out.data() + static_cast<size_t>(c) * S * S;
    for (size_t i = 0, n = static_cast<size_t>(S) * S; i < n; ++i)
      dst[i] = (static_cast<float>(sized.rgb[i * 3 + c]) / 255.0f - mean) * inv_std;
  }
  return out;
}

void VisionEncoder::layer_norm_rows(const float* x, const TensorView& w, const TensorView& b, float* y,
                                    int64_t n_rows) {
  const int64_t d = cfg_.n_embd;
  const float eps = cfg_.eps;
  pool_->parallel_for(n_rows, [&](int, int64_t r0, int64_t r1) {
    layer_norm(x + r0 * d, f32(w), b.data ? f32(b) : nullptr, y + r0 * d, static_cast<int>(r1 - r0), d, eps);
  }, 16);
}

size_t VisionEncoder::scratch_bytes() const {
  size_t n = 0;
  for (const auto* b : {&patches_, &x_, &xn_, &q_, &k_, &v_, &attn_, &proj_, &up_, &ones_}) n += b->size();
  return n * sizeof(float);
}

Status VisionEncoder::encode(const float* pixels, float* out) {
  const VisionConfig& c = cfg_;
  ThreadPool& pool = *pool_;
  const Kernels& kern = kernels();
  const int64_t d = c.n_embd, ff = c.n_ff, P = c.patch_size, side = c.patches_per_side(), S = c.image_size;
  const int64_t T = c.n_patches(), K = 3 * P * P, H = c.n_head, hd = c.head_dim;
  patches_.resize(T * K);
  for (auto* b : {&x_, &xn_, &q_, &k_, &v_, &attn_, &proj_}) b->resize(T * d);
  up_.resize(T * ff);
  if (ones_.size() != static_cast<size_t>(T * ff)) {
    ones_.resize(T * ff);
    std::fill(ones_.data(), ones_.data() + T * ff, 1.0f);
  }

  // Patches as rows (channel, row, column): the convolution of stride patch_size is then one matmul.
  for (int64_t py = 0; py < side; ++py)
    for (int64_t px = 0; px < side; ++px) {
      float* row = patches_.data() + (py * side + px) * K;
      for (int64_t ch = 0; ch < 3; ++ch)
        for (int64_t ky = 0; ky < P; ++ky)
          std::copy_n(pixels + (ch * S + py * P + ky) * S + px * P, P, row + (ch * P + ky) * P);
    }
  matmul(pool, w_.patch_embd, patches_.data(), static_cast<int>(T), x_.data());
  if (w_.patch_bias.data) add_bias(x_.data(), f32(w_.patch_bias), static_cast<int>(T), d);
  pool.parallel_for(T, [&](int, int64_t t0, int64_t t1) {
    std::vector<float> pos(static_cast<size_t>(d));
    for (int64_t t = t0; t < t1; ++t) {
      kern.dequantize_row(w_.pos_embd.type, w_.pos_embd.row(t), pos.data(), d);
      float* xt = x_.data() + t * d;
      for (int64_t i = 0; i < d; ++i) xt[i] += pos[i];
    }
  }, 16);

  // Attention over all patches of the image at once: K and V go to a one-layer, one-block f32 store that the
  // engine's attention reads with every patch's end as its last position (bidirectional).
  ModelConfig kc;
  kc.arch = "clip";
  kc.n_layer = 1;
  kc.n_embd = d;
  kc.n_head = kc.n_head_kv = H;
  kc.head_dim = hd;
  KvBlockStorage store(kc, 1, static_cast<int>(T), KvTypes(KvType::kF32));
  const BlockId block0 = 0;
  const KvView view{&store, std::span<const BlockId>(&block0, 1)};
  std::vector<int32_t> positions(static_cast<size_t>(T)), seq(static_cast<size_t>(T), 0),
      ends(static_cast<size_t>(T), static_cast<int32_t>(T - 1));
  for (int64_t t = 0; t < T; ++t) positions[t] = static_cast<int32_t>(t);
  const int nt = static_cast<int>(T);

  for (int64_t l = 0; l < c.n_layer; ++l) {
    const VitLayerWeights& L = w_.layers[l];
    layer_norm_rows(x_.data(), L.ln1_w, L.ln1_b, xn_.data(), T);
    matmul_multi(pool, {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}}, xn_.data(), nt);
    if (L.bq.data) add_bias(q_.data(), f32(L.bq), nt, d);
    if (L.bk.data) add_bias(k_.data(), f32(L.bk), nt, d);
    if (L.bv.data) add_bias(v_.data(), f32(L.bv), nt, d);
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(k_.data() + t * d, d, reinterpret_cast<float*>(store.k_slot(0, t)));
      std::copy_n(v_.data() + t * d, d, reinterpret_cast<float*>(store.v_slot(0, t)));
    }
    AttentionArgs aa{q_.data(), attn_.data(), nt, positions.data(), seq.data(), &view, 0, static_cast<int>(H),
                     static_cast<int>(H), static_cast<int>(hd), 1.0f / std::sqrt(static_cast<float>(hd))};
    aa.ends = ends.data();
    attention(pool, aa);
    matmul(pool, L.wo, attn_.data(), nt, proj_.data());
    if (L.bo.data) add_bias(proj_.data(), f32(L.bo), nt, d);
    for (int64_t i = 0; i < T * d; ++i) x_[i] += proj_[i];

    layer_norm_rows(x_.data(), L.ln2_w, L.ln2_b, xn_.data(), T);
    matmul(pool, L.w_up, xn_.data(), nt, up_.data());
    if (L.b_up.data) add_bias(up_.data(), f32(L.b_up), nt, ff);
    pool.parallel_for(T * ff, [&](int, int64_t b, int64_t e) { gelu_mul(up_.data() + b, ones_.data() + b, e - b); },
                      4096);
    matmul(pool, L.w_down, up_.data(), nt, proj_.data());
    if (L.b_down.data) add_bias(proj_.data(), f32(L.b_down), nt, d);
    for (int64_t i = 0; i < T * d; ++i) x_[i] += proj_[i];
  }
  if (w_.post_ln_w.data) layer_norm_rows(x_.data(), w_.post_ln_w, w_.post_ln_b, x_.data(), T);

  if (c.projector == ProjectorType::kGemma3) {
    // Average n_merge x n_merge patches (row by row, then the division), RMS-norm, project.
    const int64_t m = c.n_merge, os = side / m, n_out = os * os;
    float* pooled = xn_.data();
    const float inv = 1.0f / static_cast<float>(m * m);
    for (int64_t oy = 0; oy < os; ++oy)
      for (int64_t ox = 0; ox < os; ++ox) {
        float* dst = pooled + (oy * os + ox) * d;
        std::fill(dst, dst + d, 0.0f);
        for (int64_t ky = 0; ky < m; ++ky)
          for (int64_t kx = 0; kx < m; ++kx) {
            const float* src = x_.data() + ((oy * m + ky) * side + ox * m + kx) * d;
            for (int64_t i = 0; i < d; ++i) dst[i] += src[i];
          }
        for (int64_t i = 0; i < d; ++i) dst[i] *= inv;
      }
    rms_norm(pooled, f32(w_.soft_emb_norm), pooled, static_cast<int>(n_out), d, c.eps);
    matmul(pool, w_.input_proj, pooled, static_cast<int>(n_out), out);
  }
  return Status::ok();
}

}  // namespace cachet
