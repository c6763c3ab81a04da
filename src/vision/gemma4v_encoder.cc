// Gemma 4's vision encoder (projector type gemma4v): the image at its own aspect in 16 px patches, pixels mapped
// to [-1, 1] inside the model, a patch convolution without bias plus learned position embeddings looked up per
// axis (one table for the column, one for the row), then a ViT with RMS norms before and after attention and the
// FFN, per-head RMS-normed queries and keys (values normed without weight), 2D rotary halves (the first half of
// each head turns with the column, the second with the row, NeoX pairs within each half, base 100) and unscaled
// attention, a gated GELU FFN, an optional per-layer output scale; then n_merge x n_merge patches averaged, times
// sqrt(width), optionally standardised, RMS-normed without weight and projected. Every linear may clamp its
// input and output (Gemma4ClippableLinear).
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "io/gguf.h"
#include "kernels/kernels.h"
#include "model/arch_reader.h"
#include "model/decoder.h"
#include "model/ops.h"
#include "vision/vision_encoder.h"

namespace cachet {

namespace {

const float* f32(const TensorView& t) { return reinterpret_cast<const float*>(t.data); }

// One clamp bound: a one-element F32 tensor, or the fallback when the file has none.
Result<float> bound(ArchReader& r, const std::string& name, float fallback) {
  const TensorView t = r.tensor(name);
  if (!t.data) return fallback;
  if (t.type != DType::kF32 || t.ne[0] != 1 || t.ne[1] != 1 || t.ne[2] != 1 || t.ne[3] != 1)
    return invalid_argument("tensor '" + name + "' must be one F32 value");
  const float v = *f32(t);
  if (std::isnan(v)) return invalid_argument("tensor '" + name + "' is NaN");
  // The converter writes +-FLT_MAX (or infinities) for "no bound".
  if (v >= FLT_MAX) return INFINITY;
  if (v <= -FLT_MAX) return -INFINITY;
  return v;
}

Status clamps(ArchReader& r, const std::string& base, LinearClamp* c) {
  CACHET_ASSIGN_OR_RETURN(c->in_lo, bound(r, base + ".input_min", -INFINITY));
  CACHET_ASSIGN_OR_RETURN(c->in_hi, bound(r, base + ".input_max", INFINITY));
  CACHET_ASSIGN_OR_RETURN(c->out_lo, bound(r, base + ".output_min", -INFINITY));
  CACHET_ASSIGN_OR_RETURN(c->out_hi, bound(r, base + ".output_max", INFINITY));
  if (c->in_lo > c->in_hi || c->out_lo > c->out_hi)
    return invalid_argument(base + ": a clamp's lower bound is above its upper bound");
  return Status::ok();
}

void clamp_all(float* x, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], lo), hi);
}

}  // namespace

Status VisionEncoder::load_gemma4v(ArchReader& r, VisionConfig& c, VisionWeights& w,
                                   std::vector<AlignedBuffer<float>>* owned) {
  const int64_t d = c.n_embd, hd = c.head_dim;
  const TensorView& pe = w.pos_embd;
  if (!pe.data || pe.ne[0] != d || pe.ne[2] != 2 || pe.ne[3] != 1 || pe.ne[1] <= 0)
    return invalid_argument("gemma4v: tensor 'v.position_embd.weight' is not two tables [" + std::to_string(d) +
                            ", n, 2] (columns, rows)");
  if (!row_bytes(pe.type, d)) return unimplemented("gemma4v: 'v.position_embd.weight' is of a type cachet cannot read");
  if (w.patch_bias.data) return invalid_argument("gemma4v: the patch convolution has no bias");
  auto vec = [&](TensorView* t, int64_t n, int64_t layer, const std::string& name, bool required) -> Status {
    if (!t->data) return required ? invalid_argument("missing tensor '" + name + "'") : Status::ok();
    return vector_to_f32(t, n, owned, layer, name);
  };
  for (int64_t l = 0; l < c.n_layer; ++l) {
    VitLayerWeights& L = w.layers[static_cast<size_t>(l)];
    const std::string p = "v.blk." + std::to_string(l) + ".";
    L.q_norm = r.tensor(p + "attn_q_norm.weight");
    L.k_norm = r.tensor(p + "attn_k_norm.weight");
    L.attn_post_norm = r.tensor(p + "attn_post_norm.weight");
    L.ffn_post_norm = r.tensor(p + "ffn_post_norm.weight");
    L.out_scale = r.tensor(p + "out_scale.weight");
    if (L.ln1_b.data || L.ln2_b.data) return invalid_argument("gemma4v: layer " + std::to_string(l) + " has norm biases "
                                                              "(its norms are RMS norms)");
    CACHET_RETURN_IF_ERROR(vec(&L.q_norm, hd, l, p + "attn_q_norm.weight", true));
    CACHET_RETURN_IF_ERROR(vec(&L.k_norm, hd, l, p + "attn_k_norm.weight", true));
    CACHET_RETURN_IF_ERROR(vec(&L.attn_post_norm, d, l, p + "attn_post_norm.weight", true));
    CACHET_RETURN_IF_ERROR(vec(&L.ffn_post_norm, d, l, p + "ffn_post_norm.weight", true));
    if (L.out_scale.data) {
      const int64_t n = L.out_scale.ne[0];
      if (n != 1 && n != d) return invalid_argument(p + "out_scale.weight must hold 1 or " + std::to_string(d) + " values");
      CACHET_RETURN_IF_ERROR(vec(&L.out_scale, n, l, p + "out_scale.weight", true));
    }
    for (auto [cl, name] : {std::pair{&L.cq, "attn_q"}, {&L.ck, "attn_k"}, {&L.cv, "attn_v"}, {&L.co, "attn_out"},
                            {&L.c_up, "ffn_up"}, {&L.c_gate, "ffn_gate"}, {&L.c_down, "ffn_down"}})
      CACHET_RETURN_IF_ERROR(clamps(r, p + name, cl));
  }
  if (w.post_ln_b.data) return invalid_argument("gemma4v: 'v.post_ln.bias' beside an RMS norm");
  w.std_bias = r.tensor("v.std_bias");
  w.std_scale = r.tensor("v.std_scale");
  if (!w.std_bias.data != !w.std_scale.data) return invalid_argument("gemma4v: 'v.std_bias' without 'v.std_scale' or back");
  CACHET_RETURN_IF_ERROR(vec(&w.std_bias, d, -1, "v.std_bias", false));
  CACHET_RETURN_IF_ERROR(vec(&w.std_scale, d, -1, "v.std_scale", false));
  w.input_proj = r.tensor("mm.input_projection.weight");
  CACHET_RETURN_IF_ERROR(check_tensor(w.input_proj, "mm.input_projection.weight", d, c.n_embd_out, -1));
  CACHET_RETURN_IF_ERROR(clamps(r, "mm.input_projection", &w.c_proj));
  return Status::ok();
}

void VisionEncoder::clamped_gemm(const TensorView& w, const LinearClamp& c, const float* x, int64_t T, float* y) {
  const int64_t K = w.ne[0], N = w.ne[1];
  if (c.clamps_input()) {
    clamp_.resize(T * K);
    std::copy_n(x, T * K, clamp_.data());
    clamp_all(clamp_.data(), T * K, c.in_lo, c.in_hi);
    x = clamp_.data();
  }
  gemm(w, x, T, y);
  if (c.clamps_output()) clamp_all(y, T * N, c.out_lo, c.out_hi);
}

Status VisionEncoder::begin_gemma4v(const EncoderInput& in) {
  const VisionConfig& c = cfg_;
  ThreadPool& pool = *pool_;
  const Kernels& kern = kernels();
  const int64_t d = c.n_embd, hd = c.head_dim, px = job_.px, py = job_.py, T = job_.T;
  const int64_t table = w_.pos_embd.ne[1];
  if (px > table || py > table)
    return invalid_argument("gemma4v: the image is " + std::to_string(px) + " x " + std::to_string(py) +
                            " patches; the position tables cover " + std::to_string(table));

  // Pixels in [-1, 1] (the model's patch embedder does 2 (x - 0.5)), patches row by row.
  std::vector<float> pixels(in.data.size());
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = in.data[i] * 2.0f - 1.0f;
  std::vector<int32_t> order(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) order[static_cast<size_t>(t)] = static_cast<int32_t>(t);
  embed_patches(pixels.data(), in.width, order);
  pool.parallel_for(T, [&](int, int64_t t0, int64_t t1) {
    std::vector<float> ex(static_cast<size_t>(d)), ey(static_cast<size_t>(d));
    for (int64_t t = t0; t < t1; ++t) {
      kern.dequantize_row(w_.pos_embd.type, w_.pos_embd.row(t % px), ex.data(), d);
      kern.dequantize_row(w_.pos_embd.type, w_.pos_embd.row(table + t / px), ey.data(), d);
      float* xt = x_.data() + t * d;
      for (int64_t i = 0; i < d; ++i) xt[i] = (xt[i] + ex[i]) + ey[i];
    }
  }, 16);

  // Rotary tables for each half of a head: NeoX pairs (i, i + hd/4), pair i turning by base^(-4i/hd).
  const int64_t half = hd / 2;
  job_.cos_sin.assign(static_cast<size_t>(T * half), 0.0f);
  job_.cs_y.assign(job_.cos_sin.size(), 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half / 2; ++i) {
      const double f = std::pow(static_cast<double>(c.rope_theta), -2.0 * static_cast<double>(i) / half);
      const double ax = static_cast<double>(t % px) * f, ay = static_cast<double>(t / px) * f;
      job_.cos_sin[t * half + 2 * i] = static_cast<float>(std::cos(ax));
      job_.cos_sin[t * half + 2 * i + 1] = static_cast<float>(std::sin(ax));
      job_.cs_y[t * half + 2 * i] = static_cast<float>(std::cos(ay));
      job_.cs_y[t * half + 2 * i + 1] = static_cast<float>(std::sin(ay));
    }
  return Status::ok();
}

void VisionEncoder::gemma4v_layer(int64_t l) {
  const VisionConfig& c = cfg_;
  ThreadPool& pool = *pool_;
  const int64_t d = c.n_embd, hd = c.head_dim, H = c.n_head, ff = c.n_ff, T = job_.T, half = hd / 2;
  const int nt = static_cast<int>(T);
  const VitLayerWeights& L = w_.layers[static_cast<size_t>(l)];
  rms_norm_rows(x_.data(), &L.ln1_w, xn_.data(), T, d);
  clamped_gemm(L.wq, L.cq, xn_.data(), T, q_.data());
  clamped_gemm(L.wk, L.ck, xn_.data(), T, k_.data());
  clamped_gemm(L.wv, L.cv, xn_.data(), T, v_.data());
  if (L.bq.data) add_bias(q_.data(), f32(L.bq), nt, d);
  if (L.bk.data) add_bias(k_.data(), f32(L.bk), nt, d);
  if (L.bv.data) add_bias(v_.data(), f32(L.bv), nt, d);
  rms_norm_rows(q_.data(), &L.q_norm, q_.data(), T * H, hd);
  rms_norm_rows(k_.data(), &L.k_norm, k_.data(), T * H, hd);
  rms_norm_rows(v_.data(), nullptr, v_.data(), T * H, hd);
  for (float* x : {q_.data(), k_.data()}) {
    rope(x, job_.cos_sin.data(), nt, static_cast<int>(H), static_cast<int>(hd), static_cast<int>(half), true);
    rope(x + half, job_.cs_y.data(), nt, static_cast<int>(H), static_cast<int>(hd), static_cast<int>(half), true);
  }
  vit_attn_.run(pool, q_.data(), k_.data(), v_.data(), nt, static_cast<int>(H), static_cast<int>(hd), 1.0f,
                attn_.data());
  clamped_gemm(L.wo, L.co, attn_.data(), T, proj_.data());
  if (L.bo.data) add_bias(proj_.data(), f32(L.bo), nt, d);
  rms_norm_rows(proj_.data(), &L.attn_post_norm, proj_.data(), T, d);
  for (int64_t i = 0; i < T * d; ++i) x_[i] += proj_[i];

  rms_norm_rows(x_.data(), &L.ln2_w, xn_.data(), T, d);
  clamped_gemm(L.w_gate, L.c_gate, xn_.data(), T, gate_.data());
  clamped_gemm(L.w_up, L.c_up, xn_.data(), T, up_.data());
  if (L.b_up.data) add_bias(up_.data(), f32(L.b_up), nt, ff);
  pool.parallel_for(T * ff, [&](int, int64_t b, int64_t e) { gelu_mul(gate_.data() + b, up_.data() + b, e - b); },
                    4096);
  clamped_gemm(L.w_down, L.c_down, gate_.data(), T, proj_.data());
  if (L.b_down.data) add_bias(proj_.data(), f32(L.b_down), nt, d);
  rms_norm_rows(proj_.data(), &L.ffn_post_norm, proj_.data(), T, d);
  for (int64_t i = 0; i < T * d; ++i) x_[i] += proj_[i];
  if (L.out_scale.data) {
    const float* s = f32(L.out_scale);
    const bool one = L.out_scale.ne[0] == 1;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < d; ++i) x_[t * d + i] *= s[one ? 0 : i];
  }
}

void VisionEncoder::end_gemma4v(float* out) {
  const VisionConfig& c = cfg_;
  const int64_t d = c.n_embd, m = c.n_merge, px = job_.px, py = job_.py, T = job_.T;
  if (w_.post_ln_w.data) rms_norm_rows(x_.data(), &w_.post_ln_w, x_.data(), T, d);

  // Average m x m patches, times sqrt(width), standardised, RMS-normed, projected.
  const int64_t n_out = (px / m) * (py / m);
  float* pooled = xn_.data();
  avg_pool(px, py, pooled);
  const float scale = std::sqrt(static_cast<float>(d));
  for (int64_t r = 0; r < n_out; ++r) {
    float* dst = pooled + r * d;
    for (int64_t i = 0; i < d; ++i) {
      dst[i] = dst[i] * scale;
      if (w_.std_bias.data) dst[i] = (dst[i] - f32(w_.std_bias)[i]) * f32(w_.std_scale)[i];
    }
  }
  rms_norm_rows(pooled, nullptr, pooled, n_out, d);
  clamped_gemm(w_.input_proj, w_.c_proj, pooled, n_out, out);
}

}  // namespace cachet
