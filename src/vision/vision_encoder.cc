// VisionEncoder: preprocessing and the forward pass (a pre-norm ViT, then the projector's own head).
#include "vision/vision_encoder.h"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "model/ops.h"
#include "vision/sgemm.h"

namespace cachet {

namespace {

const float* f32(const TensorView& t) { return reinterpret_cast<const float*>(t.data); }

}  // namespace

Result<ImageGrid> VisionEncoder::input_size(int width, int height) const {
  const VisionConfig& c = cfg_;
  if (width <= 0 || height <= 0) return invalid_argument("the image has no pixels");
  if (c.projector == ProjectorType::kGemma3)
    return ImageGrid{static_cast<int>(c.image_size), static_cast<int>(c.image_size)};
  if (c.projector == ProjectorType::kGemma4V) {
    // Gemma 4's processor: scaled (up or down) to fill max_rows pooled patches, each side then down to whole
    // pooled patches; a side that comes to none gets one, the other its aspect's whole multiple (capped).
    const double side = static_cast<double>(c.patch_size * c.n_merge), h = height, w = width;
    const double target = static_cast<double>(c.max_rows) * side * side, f = std::sqrt(target / (h * w));
    double th = std::floor(f * h / side) * side, tw = std::floor(f * w / side) * side;
    if (th == 0 && tw == 0) return invalid_argument("the image is too small to resize for this encoder");
    const double max_side = static_cast<double>(c.max_rows) * side;
    if (th == 0) {
      th = side;
      tw = std::min(std::floor(w / h) * side, max_side);
    } else if (tw == 0) {
      tw = side;
      th = std::min(std::floor(h / w) * side, max_side);
    }
    return ImageGrid{static_cast<int>(tw), static_cast<int>(th)};
  }
  // Qwen's smart resize: each side to the nearest multiple of the merged patch (halves to even, as Python's
  // round), then both scaled alike into [min_rows, max_rows] merged patches.
  if (std::max(width, height) > 200.0 * std::min(width, height))
    return invalid_argument("the image is " + std::to_string(width) + " x " + std::to_string(height) +
                            ": its aspect ratio is over 200 to 1");
  const double f = static_cast<double>(c.patch_size * c.n_merge), w = width, h = height;
  const double min_px = static_cast<double>(c.min_rows) * f * f, max_px = static_cast<double>(c.max_rows) * f * f;
  double hb = std::max(f, std::nearbyint(h / f) * f), wb = std::max(f, std::nearbyint(w / f) * f);
  if (hb * wb > max_px) {
    const double beta = std::sqrt(h * w / max_px);
    hb = std::max(f, std::floor(h / beta / f) * f);
    wb = std::max(f, std::floor(w / beta / f) * f);
  } else if (hb * wb < min_px) {
    const double beta = std::sqrt(min_px / (h * w));
    hb = std::ceil(h * beta / f) * f;
    wb = std::ceil(w * beta / f) * f;
  }
  return ImageGrid{static_cast<int>(wb), static_cast<int>(hb)};
}

bool VisionEncoder::is_input_size(int width, int height) const {
  if (cfg_.projector == ProjectorType::kGemma4V) {
    const int64_t side = cfg_.patch_size * cfg_.n_merge;
    return width > 0 && height > 0 && width % side == 0 && height % side == 0 &&
           (width / side) * (height / side) <= cfg_.max_rows;
  }
  auto size = input_size(width, height);
  return size.is_ok() && size->x == width && size->y == height;
}

ImageGrid VisionEncoder::output_grid(int width, int height) const {
  const int64_t side = cfg_.patch_size * cfg_.n_merge;
  return ImageGrid{static_cast<int>(width / side), static_cast<int>(height / side)};
}

Result<EncoderInput> VisionEncoder::preprocess(const Image& img) const {
  CACHET_ASSIGN_OR_RETURN(ImageGrid size, input_size(img.width, img.height));
  const Image sized = size.x == img.width && size.y == img.height ? img
                                                                  : resize_image(img, size.x, size.y, cfg_.resize);
  EncoderInput in;
  in.width = size.x;
  in.height = size.y;
  const size_t n = static_cast<size_t>(size.x) * size.y;
  in.data.resize(3 * n);
  for (int c = 0; c < 3; ++c) {
    const float mean = cfg_.mean[c], inv_std = 1.0f / cfg_.std[c];
    float* dst = in.data.data() + c * n;
    for (size_t i = 0; i < n; ++i) dst[i] = (static_cast<float>(sized.rgb[i * 3 + c]) / 255.0f - mean) * inv_std;
  }
  return in;
}

void VisionEncoder::layer_norm_rows(const float* x, const TensorView& w, const TensorView& b, float* y,
                                    int64_t n_rows, int64_t n) {
  const int64_t d = n > 0 ? n : cfg_.n_embd;
  const float eps = cfg_.eps;
  pool_->parallel_for(n_rows, [&](int, int64_t r0, int64_t r1) {
    layer_norm(x + r0 * d, f32(w), b.data ? f32(b) : nullptr, y + r0 * d, static_cast<int>(r1 - r0), d, eps);
  }, 16);
}

void VisionEncoder::rms_norm_rows(const float* x, const TensorView* w, float* y, int64_t n_rows, int64_t n) {
  const int64_t d = n > 0 ? n : cfg_.n_embd;
  const float* wf = w && w->data ? f32(*w) : nullptr;
  pool_->parallel_for(n_rows, [&](int, int64_t r0, int64_t r1) {
    rms_norm(x + r0 * d, wf, y + r0 * d, static_cast<int>(r1 - r0), d, cfg_.eps);
  }, 16);
}

void VisionEncoder::avg_pool(int64_t px, int64_t py, float* pooled) {
  const int64_t d = cfg_.n_embd, m = cfg_.n_merge, ox_n = px / m, oy_n = py / m;
  const float inv = 1.0f / static_cast<float>(m * m);
  for (int64_t oy = 0; oy < oy_n; ++oy)
    for (int64_t ox = 0; ox < ox_n; ++ox) {
      float* dst = pooled + (oy * ox_n + ox) * d;
      std::fill(dst, dst + d, 0.0f);
      for (int64_t ky = 0; ky < m; ++ky)
        for (int64_t kx = 0; kx < m; ++kx) {
          const float* src = x_.data() + ((oy * m + ky) * px + ox * m + kx) * d;
          for (int64_t i = 0; i < d; ++i) dst[i] += src[i];
        }
      for (int64_t i = 0; i < d; ++i) dst[i] *= inv;
    }
}

size_t VisionEncoder::scratch_bytes() const {
  size_t n = 0;
  for (const auto* b : {&patches_, &x_, &xn_, &q_, &k_, &v_, &attn_, &proj_, &up_, &ones_, &m_in_, &m_mid_, &m_out_, &gate_,
                        &clamp_})
    n += b->size();
  return n * sizeof(float) + vit_attn_.scratch_bytes();
}

void VisionEncoder::gemm(const TensorView& w, const float* x, int64_t T, float* y) {
  const int64_t K = w.ne[0], N = w.ne[1];
  const float* wf = reinterpret_cast<const float*>(w.data);
  if (w.type != DType::kF32 || w.row_bytes != static_cast<size_t>(K) * sizeof(float)) {
    wf_.resize(K * N);  // the same floats dequantize_row gives, row by row
    const Kernels& kern = kernels();
    pool_->parallel_for(N, [&](int, int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) kern.dequantize_row(w.type, w.row(r), wf_.data() + r * K, K);
    }, 16);
    wf = wf_.data();
  }
  constexpr int64_t kRows = 64;  // fixed blocks: the same calls whatever the thread count
  pool_->parallel_chunks((T + kRows - 1) / kRows, [&](int, int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r0 = b * kRows, m = std::min(kRows, T - r0);
      sgemm(static_cast<int>(m), static_cast<int>(N), static_cast<int>(K), x + r0 * K, K, wf, K, true, y + r0 * N,
            N);
    }
  }, 1);
}

void VisionEncoder::embed_patches(const float* pixels, int width, const std::vector<int32_t>& order) {
  const int64_t P = cfg_.patch_size, K = 3 * P * P, T = static_cast<int64_t>(order.size()), W = width;
  const int64_t side_x = W / P, plane = static_cast<int64_t>(order.size()) * P * P;
  patches_.resize(T * K);
  // Patches as rows (channel, row, column): the convolution of stride patch_size is then one matmul.
  for (int64_t t = 0; t < T; ++t) {
    const int64_t py = order[t] / side_x, px = order[t] % side_x;
    float* row = patches_.data() + t * K;
    for (int64_t ch = 0; ch < 3; ++ch)
      for (int64_t ky = 0; ky < P; ++ky)
        std::copy_n(pixels + ch * plane + (py * P + ky) * W + px * P, P, row + (ch * P + ky) * P);
  }
  gemm(w_.patch_embd, patches_.data(), T, x_.data());
  if (w_.patch_bias.data) add_bias(x_.data(), f32(w_.patch_bias), static_cast<int>(T), cfg_.n_embd);
}

void VisionEncoder::qkv(const VitLayerWeights& L, int64_t T) {
  const int64_t d = cfg_.n_embd;
  const int nt = static_cast<int>(T);
  gemm(L.wq, xn_.data(), T, q_.data());
  gemm(L.wk, xn_.data(), T, k_.data());
  gemm(L.wv, xn_.data(), T, v_.data());
  if (L.bq.data) add_bias(q_.data(), f32(L.bq), nt, d);
  if (L.bk.data) add_bias(k_.data(), f32(L.bk), nt, d);
  if (L.bv.data) add_bias(v_.data(), f32(L.bv), nt, d);
}

void VisionEncoder::vit_layer(int64_t l, const float* cos_sin) {
  const VisionConfig& c = cfg_;
  ThreadPool& pool = *pool_;
  const int64_t d = c.n_embd, ff = c.n_ff, H = c.n_head, hd = c.head_dim, T = job_.T;
  if (ones_.size() < static_cast<size_t>(T * ff)) {
    ones_.resize(T * ff);
    std::fill(ones_.data(), ones_.data() + T * ff, 1.0f);
  }
  const int nt = static_cast<int>(T);
  const VitLayerWeights& L = w_.layers[static_cast<size_t>(l)];
  layer_norm_rows(x_.data(), L.ln1_w, L.ln1_b, xn_.data(), T);
  qkv(L, T);
  if (cos_sin) {
    rope(q_.data(), cos_sin, nt, static_cast<int>(H), static_cast<int>(hd), static_cast<int>(hd), true);
    rope(k_.data(), cos_sin, nt, static_cast<int>(H), static_cast<int>(hd), static_cast<int>(hd), true);
  }
  vit_attn_.run(pool, q_.data(), k_.data(), v_.data(), nt, static_cast<int>(H), static_cast<int>(hd),
                1.0f / std::sqrt(static_cast<float>(hd)), attn_.data());
  gemm(L.wo, attn_.data(), T, proj_.data());
  if (L.bo.data) add_bias(proj_.data(), f32(L.bo), nt, d);
  for (int64_t i = 0; i < T * d; ++i) x_[i] += proj_[i];

  layer_norm_rows(x_.data(), L.ln2_w, L.ln2_b, xn_.data(), T);
  gemm(L.w_up, xn_.data(), T, up_.data());
  if (L.b_up.data) add_bias(up_.data(), f32(L.b_up), nt, ff);
  pool.parallel_for(T * ff, [&](int, int64_t b, int64_t e) { gelu_mul(up_.data() + b, ones_.data() + b, e - b); },
                    4096);
  gemm(L.w_down, up_.data(), T, proj_.data());
  if (L.b_down.data) add_bias(proj_.data(), f32(L.b_down), nt, d);
  for (int64_t i = 0; i < T * d; ++i) x_[i] += proj_[i];
}

void VisionEncoder::merger(const float* x, int64_t n, const TensorView* nw, const TensorView* nb,
                           const TensorView& w1, const TensorView& b1, const TensorView& w2, const TensorView& b2,
                           float* out, int64_t out_stride) {
  ThreadPool& pool = *pool_;
  const int64_t wide = w1.ne[0], mid = w1.ne[1], n_out = w2.ne[1];
  const int nr = static_cast<int>(n);
  m_in_.resize(n * wide);
  m_mid_.resize(n * mid);
  m_out_.resize(n * n_out);
  const float* in = x;
  if (nw) {
    layer_norm_rows(x, *nw, *nb, m_in_.data(), n, wide);
    in = m_in_.data();
  }
  gemm(w1, in, n, m_mid_.data());
  if (b1.data) add_bias(m_mid_.data(), f32(b1), nr, mid);
  // nn.GELU(): the exact (erf) form, as the Hugging Face model's merger has it.
  pool.parallel_for(n * mid, [&](int, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float v = m_mid_[i];
      m_mid_[i] = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
    }
  }, 4096);
  gemm(w2, m_mid_.data(), n, m_out_.data());
  if (b2.data) add_bias(m_out_.data(), f32(b2), nr, n_out);
  for (int64_t r = 0; r < n; ++r) std::copy_n(m_out_.data() + r * n_out, n_out, out + r * out_stride);
}

Status VisionEncoder::begin(const EncoderInput& in) {
  if (job_.active) return unavailable("the vision encoder is already encoding an image");
  if (!is_input_size(in.width, in.height) || in.data.size() != static_cast<size_t>(3) * in.width * in.height)
    return invalid_argument("the encoder's input is not an image preprocessed for it (" +
                            std::to_string(in.width) + " x " + std::to_string(in.height) + ")");
  job_ = Job{};
  job_.px = in.width / cfg_.patch_size;
  job_.py = in.height / cfg_.patch_size;
  job_.T = job_.px * job_.py;
  const int64_t T = job_.T;
  for (auto* b : {&x_, &xn_, &q_, &k_, &v_, &attn_, &proj_}) b->resize(T * cfg_.n_embd);
  up_.resize(T * cfg_.n_ff);
  gate_.resize(T * cfg_.n_ff);
  switch (cfg_.projector) {
    case ProjectorType::kGemma3: begin_gemma3(in); break;
    case ProjectorType::kGemma4V: CACHET_RETURN_IF_ERROR(begin_gemma4v(in)); break;
    case ProjectorType::kQwen2Vl:
    case ProjectorType::kQwen25Vl: begin_qwen2vl(in); break;
    case ProjectorType::kQwen3Vl: begin_qwen3vl(in); break;
  }
  job_.active = true;
  return Status::ok();
}

void VisionEncoder::advance(int64_t n_layers) {
  for (; job_.active && n_layers > 0 && job_.next < cfg_.n_layer; --n_layers, ++job_.next) {
    const int64_t l = job_.next;
    switch (cfg_.projector) {
      case ProjectorType::kGemma3: vit_layer(l, nullptr); break;
      case ProjectorType::kGemma4V: gemma4v_layer(l); break;
      case ProjectorType::kQwen2Vl:
      case ProjectorType::kQwen25Vl: qwen2vl_layer(l); break;
      case ProjectorType::kQwen3Vl: qwen3vl_layer(l); break;
    }
  }
}

Status VisionEncoder::finish(float* out) {
  if (!job_.active) return invalid_argument("the vision encoder has no image under way");
  advance(cfg_.n_layer);
  switch (cfg_.projector) {
    case ProjectorType::kGemma3: end_gemma3(out); break;
    case ProjectorType::kGemma4V: end_gemma4v(out); break;
    case ProjectorType::kQwen2Vl:
    case ProjectorType::kQwen25Vl: end_qwen2vl(out); break;
    case ProjectorType::kQwen3Vl: end_qwen3vl(out); break;
  }
  job_ = Job{};
  return Status::ok();
}

Status VisionEncoder::encode(const EncoderInput& in, float* out) {
  CACHET_RETURN_IF_ERROR(begin(in));
  return finish(out);
}

void VisionEncoder::begin_gemma3(const EncoderInput& in) {
  const VisionConfig& c = cfg_;
  ThreadPool& pool = *pool_;
  const Kernels& kern = kernels();
  const int64_t d = c.n_embd, T = c.n_patches();
  std::vector<int32_t> order(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) order[t] = static_cast<int32_t>(t);
  embed_patches(in.data.data(), in.width, order);
  pool.parallel_for(T, [&](int, int64_t t0, int64_t t1) {
    std::vector<float> pos(static_cast<size_t>(d));
    for (int64_t t = t0; t < t1; ++t) {
      kern.dequantize_row(w_.pos_embd.type, w_.pos_embd.row(t), pos.data(), d);
      float* xt = x_.data() + t * d;
      for (int64_t i = 0; i < d; ++i) xt[i] += pos[i];
    }
  }, 16);
}

void VisionEncoder::end_gemma3(float* out) {
  const VisionConfig& c = cfg_;
  const int64_t d = c.n_embd, side = c.patches_per_side(), T = c.n_patches();
  if (w_.post_ln_w.data) layer_norm_rows(x_.data(), w_.post_ln_w, w_.post_ln_b, x_.data(), T);

  // Average n_merge x n_merge patches, RMS-norm, project.
  const int64_t os = side / c.n_merge, n_out = os * os;
  float* pooled = xn_.data();
  avg_pool(side, side, pooled);
  rms_norm(pooled, f32(w_.soft_emb_norm), pooled, static_cast<int>(n_out), d, c.eps);
  gemm(w_.input_proj, pooled, n_out, out);
}

}  // namespace cachet
