#include "kernels/quantize.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <immintrin.h>
#include <limits>

#include "base/fp16.h"
#include "kernels/quant_blocks.h"

namespace cachet {

namespace {

void quantize_q8_0(const float* x, BlockQ8_0* b) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  float d = amax / 127.0f;
  float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = f32_to_fp16(d);
  for (int j = 0; j < kQK; ++j) b->qs[j] = static_cast<int8_t>(std::lround(x[j] * id));
}

// The value of largest magnitude in a 32-block, with its sign (the *_0 types and IQ4_NL put it on their extreme
// level, whose side the sign picks).
float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// The nearest of the 16 IQ4_NL levels to v (a binary search over the midpoints between neighbours).
int iq4_nearest(float v) {
  static constexpr auto kMid = [] {
    std::array<float, 15> m{};
    for (int c = 0; c < 15; ++c) m[c] = 0.5f * static_cast<float>(kIq4nlGrid[c] + kIq4nlGrid[c + 1]);
    return m;
  }();
  int lo = 0, n = 15;  // the answer is the count of midpoints below v
  while (n > 0) {
    const int half = n / 2;
    if (kMid[lo + half] < v) {
      lo += half + 1;
      n -= half + 1;
    } else {
      n = half;
    }
  }
  return lo;
}

// IQ4_NL codes for x at inverse scale id, and the weighted least-squares fit of a scale to them:
// gx = sum w g x, gg = sum w g^2 (the scale gx / gg leaves an error of sum w x^2 - gx^2 / gg).
struct Iq4Fit {
  double gx = 0, gg = 0;
};
Iq4Fit iq4_codes(const float* x, const float* w, int n, float id, uint8_t* codes) {
  Iq4Fit f;
  for (int j = 0; j < n; ++j) {
    const int c = iq4_nearest(x[j] * id);
    const double g = kIq4nlGrid[c];
    codes[j] = static_cast<uint8_t>(c);
    f.gx += w[j] * g * x[j];
    f.gg += w[j] * g * g;
  }
  return f;
}

// The signed scale of one 32-block on the IQ4_NL levels. The levels are uneven, so the scale that puts the
// value of largest magnitude on the extreme level -127 is not always the best: every target level -127 + t,
// |t| <= 7, is tried for it, the codes refit by least squares weighted by x^2 (the error of large weights
// matters more, as llama.cpp weighs it without an importance matrix), and the fit that leaves the least
// weighted error kept.
float iq4_block_scale(const float* x, uint8_t* codes) {
  const float max = signed_absmax(x);
  if (max == 0.0f) return 0.0f;
  float w[kQK];
  for (int j = 0; j < kQK; ++j) w[j] = x[j] * x[j];
  float best_d = 0.0f;
  double best = -1.0;
  for (int t = -7; t <= 7; ++t) {
    const Iq4Fit f = iq4_codes(x, w, kQK, static_cast<float>(kIq4nlGrid[0] + t) / max, codes);
    if (f.gg > 0 && f.gx * f.gx / f.gg > best) {
      best = f.gx * f.gx / f.gg;
      best_d = static_cast<float>(f.gx / f.gg);
    }
  }
  return best_d;
}

// The codes for a stored scale d.
void iq4_codes_at(const float* x, float d, uint8_t* codes) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK; ++j) codes[j] = static_cast<uint8_t>(iq4_nearest(x[j] * id));
}

void nibbles_of(const uint8_t* codes, uint8_t* qs) {
  for (int j = 0; j < kQK / 2; ++j) qs[j] = static_cast<uint8_t>(codes[j] | codes[j + kQK / 2] << 4);
}

void quantize_iq4_nl(const float* x, BlockQ4_0* b) {
  uint8_t codes[kQK];
  const uint16_t d = f32_to_fp16(iq4_block_scale(x, codes));
  b->d = d;
  iq4_codes_at(x, fp16_to_f32(d), codes);  // the codes for the stored scale
  nibbles_of(codes, b->qs);
}

// MXFP4: the E2M1 code nearest to v on the doubled grid {0, 1, 2, 3, 4, 6, 8, 12} (ties to the smaller level),
// with v's sign (code 8 + i for a negative v; -0 is +0).
int mxfp4_nearest(float v) {
  static constexpr float kMid[7] = {0.5f, 1.5f, 2.5f, 3.5f, 5.0f, 7.0f, 10.0f};
  const float a = std::fabs(v);
  int i = 0;
  while (i < 7 && a > kMid[i]) ++i;
  return i == 0 ? 0 : (v < 0.0f ? 8 + i : i);
}

// The squared error of the block x at exponent e with its nearest codes (written to `codes`).
double mxfp4_codes(const float* x, int e, uint8_t* codes) {
  const float d = mxfp4_scale(static_cast<uint8_t>(e)), id = 1.0f / d;
  double err = 0.0;
  for (int j = 0; j < kQK; ++j) {
    codes[j] = static_cast<uint8_t>(mxfp4_nearest(x[j] * id));
    const double r = static_cast<double>(x[j]) - static_cast<double>(kMxfp4Grid[codes[j]]) * d;
    err += r * r;
  }
  return err;
}

// One block: llama.cpp's exponent (the block's largest |x| in [8, 16) of d = 2^(e-128), so values above 12 d
// clip to 12 d) or the next one up (nothing clips, the steps double), whichever leaves the smaller squared error.
void quantize_mxfp4(const float* x, BlockMXFP4* b) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  uint8_t codes[kQK] = {};
  int e = 0;
  if (amax > 0.0f && std::isfinite(amax)) {
    const int e0 = std::clamp(static_cast<int>(std::floor(std::log2(amax))) + 125, 0, 253);
    uint8_t alt[kQK];
    const double err0 = mxfp4_codes(x, e0, codes), err1 = mxfp4_codes(x, e0 + 1, alt);
    e = e0;
    if (err1 < err0) {
      e = e0 + 1;
      std::memcpy(codes, alt, sizeof codes);
    }
  }
  b->e = static_cast<uint8_t>(e);
  nibbles_of(codes, b->qs);
}

// IQ4_XS: each sub-block's scale as for IQ4_NL, then one signed d per super-block that puts the sub-block scale
// of largest magnitude on -32 (the 6-bit ls_j - 32 spans -32..31), each ls_j the nearest to its scale / d, and
// the codes again for the stored d * (ls_j - 32).
void quantize_iq4_xs(const float* x, BlockIQ4_XS* b) {
  std::memset(b, 0, sizeof(*b));
  uint8_t codes[kQK];
  float s[kQKK / kQK], smax = 0.0f;
  for (int j = 0; j < kQKK / kQK; ++j) {
    s[j] = iq4_block_scale(x + kQK * j, codes);
    if (std::fabs(s[j]) > std::fabs(smax)) smax = s[j];
  }
  b->d = f32_to_fp16(smax / -32.0f);
  const float d = fp16_to_f32(b->d), id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQKK / kQK; ++j) {
    const int ls = std::clamp(static_cast<int>(std::lround(s[j] * id)), -32, 31) + 32;
    b->scales_l[j / 2] |= static_cast<uint8_t>((ls & 0x0f) << (4 * (j % 2)));
    b->scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * j));
    iq4_codes_at(x + kQK * j, d * static_cast<float>(ls - 32), codes);
    nibbles_of(codes, b->qs + 16 * j);
  }
}

void quantize_q4_0(const float* x, BlockQ4_0* b) {
  // The value of largest magnitude maps to -8, so its sign picks the side with the extra level.
  float d = signed_absmax(x) / -8.0f;
  float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = f32_to_fp16(d);
  for (int j = 0; j < kQK / 2; ++j) {
    int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
    int q1 = std::min(15, static_cast<int>(x[j + kQK / 2] * id + 8.5f));
    b->qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* b) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < kQK; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  float d = (hi - lo) / 15.0f;
  float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = f32_to_fp16(d);
  b->m = f32_to_fp16(lo);
  for (int j = 0; j < kQK / 2; ++j) {
    int q0 = std::clamp(static_cast<int>((x[j] - lo) * id + 0.5f), 0, 15);
    int q1 = std::clamp(static_cast<int>((x[j + kQK / 2] - lo) * id + 0.5f), 0, 15);
    b->qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

void quantize_q5(const float* x, DType t, uint8_t* out) {
  uint8_t q[kQK];
  uint16_t d16, m16 = 0;
  if (t == DType::kQ5_0) {
    const float d = signed_absmax(x) / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    d16 = f32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>(std::clamp(static_cast<int>(x[j] * id + 16.5f), 0, 31));
  } else {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < kQK; ++j) {
      lo = std::min(lo, x[j]);
      hi = std::max(hi, x[j]);
    }
    const float d = (hi - lo) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    d16 = f32_to_fp16(d);
    m16 = f32_to_fp16(lo);
    for (int j = 0; j < kQK; ++j)
      q[j] = static_cast<uint8_t>(std::clamp(static_cast<int>((x[j] - lo) * id + 0.5f), 0, 31));
  }
  uint8_t* qh = out + (t == DType::kQ5_0 ? offsetof(BlockQ5_0, qh) : offsetof(BlockQ5_1, qh));
  uint8_t* qs = out + (t == DType::kQ5_0 ? offsetof(BlockQ5_0, qs) : offsetof(BlockQ5_1, qs));
  std::memcpy(out, &d16, 2);
  if (t == DType::kQ5_1) std::memcpy(out + 2, &m16, 2);
  std::memset(qh, 0, 4);
  for (int j = 0; j < kQK / 2; ++j) qs[j] = static_cast<uint8_t>((q[j] & 15) | (q[j + 16] & 15) << 4);
  for (int j = 0; j < kQK; ++j) qh[j / 8] |= static_cast<uint8_t>((q[j] >> 4) << (j % 8));
}

// v rounded to the nearest integer, ties to even (one cvtss2si in the current rounding mode, which is never
// changed here; |v| < 2^31).
inline int nearest(float v) { return _mm_cvtss_si32(_mm_set_ss(v)); }

// Fits x ~ scale * l - mn with l in 0..nmax, mn >= 0 (the range always includes 0, as ggml's K-quants do),
// minimizing the error weighted by w: candidate step sizes from nmax - 1 to nmax + 1.5 levels over the range
// (each candidate's levels rounded by `nearest`: lround's libm call was a quarter of the time),
// each refined by weighted least squares on its levels; the smallest weighted error wins.
void fit_scale_min(const float* x, const float* w, int n, int nmax, float* scale, float* mn) {
  float lo = 0.0f, hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (hi <= lo) {
    *scale = 0.0f;
    *mn = -lo;
    return;
  }
  double best_err = std::numeric_limits<double>::infinity(), sw = 0, sx = 0, sxx = 0;
  for (int i = 0; i < n; ++i) {
    sw += w[i];
    sx += w[i] * static_cast<double>(x[i]);
    sxx += w[i] * static_cast<double>(x[i]) * x[i];
  }
  float best_s = (hi - lo) / nmax, best_m = -lo;
  for (int step = -10; step <= 15; ++step) {
    const float iscale = (nmax + 0.1f * step) / (hi - lo);
    double sl = 0, sll = 0, slx = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest(iscale * (x[i] - lo)), 0, nmax);
      sl += w[i] * l;
      sll += w[i] * static_cast<double>(l) * l;
      slx += w[i] * l * static_cast<double>(x[i]);
    }
    const double det = sw * sll - sl * sl;
    if (det <= 0) continue;
    double s = (sw * slx - sl * sx) / det, off = (sll * sx - sl * slx) / det;
    if (off > 0) {  // the offset (the minimum) may not be above 0: refit the scale alone
      off = 0;
      s = sll > 0 ? slx / sll : 0;
    }
    // sum w (s l + off - x)^2, from the sums
    const double err = s * s * sll + 2 * s * off * sl + off * off * sw - 2 * s * slx - 2 * off * sx + sxx;
    if (err < best_err) {
      best_err = err;
      best_s = static_cast<float>(s);
      best_m = static_cast<float>(-off);
    }
  }
  *scale = std::max(best_s, 0.0f);
  *mn = best_m;
}

// The weights of a super-block's (scale, min) fits (Q2_K, Q4_K, Q5_K): |x| plus the super-block's RMS, so the
// large weights' error matters more to a dot product and the small ones' not nothing (llama.cpp weighs Q4_K/Q5_K
// so without an importance matrix; Q2_K by |x| alone, which measured KL 2.44 against 1.91 with this on the
// default model's ffn_down, llama.cpp's file 2.02: docs/quantize.md).
void fit_weights(const float* x, float* w) {
  double sxx = 0;
  for (int e = 0; e < kQKK; ++e) sxx += static_cast<double>(x[e]) * x[e];
  const float rms = static_cast<float>(std::sqrt(sxx / kQKK));
  for (int e = 0; e < kQKK; ++e) w[e] = rms + std::fabs(x[e]);
}

// Q4_K / Q5_K: per 32-element sub-block a (scale, min) pair, quantized to 6 bits under fp16 d and dmin.
void quantize_q45_k(const float* x, DType t, uint8_t* out) {
  const int nmax = t == DType::kQ4_K ? 15 : 31;
  float w[kQKK];
  fit_weights(x, w);
  float scales[8], mins[8], max_s = 0.0f, max_m = 0.0f;
  for (int j = 0; j < 8; ++j) {
    fit_scale_min(x + 32 * j, w + 32 * j, 32, nmax, &scales[j], &mins[j]);
    max_s = std::max(max_s, scales[j]);
    max_m = std::max(max_m, mins[j]);
  }
  const uint16_t d16 = f32_to_fp16(max_s / 63.0f), dmin16 = f32_to_fp16(max_m / 63.0f);
  const float d = fp16_to_f32(d16), dmin = fp16_to_f32(dmin16);
  int sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = d > 0 ? std::clamp(static_cast<int>(std::lround(scales[j] / d)), 0, 63) : 0;
    mn[j] = dmin > 0 ? std::clamp(static_cast<int>(std::lround(mins[j] / dmin)), 0, 63) : 0;
  }
  auto* b4 = reinterpret_cast<BlockQ4_K*>(out);
  auto* b5 = reinterpret_cast<BlockQ5_K*>(out);
  b4->d = d16;
  b4->dmin = dmin16;
  for (int j = 0; j < 4; ++j) {
    b4->scales[j] = static_cast<uint8_t>(sc[j] | (sc[j + 4] >> 4) << 6);
    b4->scales[j + 4] = static_cast<uint8_t>(mn[j] | (mn[j + 4] >> 4) << 6);
    b4->scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
  }
  uint8_t* qs = t == DType::kQ4_K ? b4->qs : b5->qs;
  std::memset(qs, 0, kQKK / 2);
  if (t == DType::kQ5_K) std::memset(b5->qh, 0, sizeof(b5->qh));
  for (int e = 0; e < kQKK; ++e) {
    const int j = e / 32, pr = e / 64, k = j % 2, l = e % 32;
    const float s = d * static_cast<float>(sc[j]), m = dmin * static_cast<float>(mn[j]);
    const int q = s > 0 ? std::clamp(static_cast<int>(std::lround((x[e] + m) / s)), 0, nmax) : 0;
    qs[32 * pr + l] |= static_cast<uint8_t>((q & 15) << (4 * k));
    if (t == DType::kQ5_K) b5->qh[l] |= static_cast<uint8_t>((q >> 4) << (2 * pr + k));
  }
}

// Q2_K: per 16-element sub-block a (scale, min) pair for 2-bit quants, each 4 bits under fp16 d and dmin.
void quantize_q2_k(const float* x, BlockQ2_K* b) {
  float scales[16], mins[16], max_s = 0.0f, max_m = 0.0f, w[kQKK];
  fit_weights(x, w);
  for (int j = 0; j < 16; ++j) {
    fit_scale_min(x + 16 * j, w + 16 * j, 16, 3, &scales[j], &mins[j]);
    max_s = std::max(max_s, scales[j]);
    max_m = std::max(max_m, mins[j]);
  }
  b->d = f32_to_fp16(max_s / 15.0f);
  b->dmin = f32_to_fp16(max_m / 15.0f);
  const float d = fp16_to_f32(b->d), dmin = fp16_to_f32(b->dmin);
  std::memset(b->qs, 0, sizeof(b->qs));
  for (int j = 0; j < 16; ++j) {
    const int sc = d > 0 ? std::clamp(static_cast<int>(std::lround(scales[j] / d)), 0, 15) : 0;
    const int mn = dmin > 0 ? std::clamp(static_cast<int>(std::lround(mins[j] / dmin)), 0, 15) : 0;
    b->scales[j] = static_cast<uint8_t>(sc | mn << 4);
    const float s = d * static_cast<float>(sc), m = dmin * static_cast<float>(mn);
    for (int i = 0; i < 16; ++i) {
      const int e = 16 * j + i, h = e / 128, sh = e / 32 % 4, l = e % 32;
      const int q = s > 0 ? std::clamp(static_cast<int>(std::lround((x[e] + m) / s)), 0, 3) : 0;
      b->qs[32 * h + l] |= static_cast<uint8_t>(q << (2 * sh));
    }
  }
}

// Per 16-element sub-block of a 256-element super-block, a signed scale s with x ~ s * l, l in [-lo, lo): the
// largest magnitude maps to -lo + t (|t| <= 0.9 levels, in tenths), each candidate refit by least squares
// weighted by x^2 (the large weights' error matters most), the least weighted error kept. Returns in `scales`
// the scales, and the one with the largest magnitude (signed). Q6_K uses lo = 32, Q3_K lo = 4.
float subblock_scales(const float* x, int lo, float* scales) {
  float max_abs_s = 0.0f, max_s = 0.0f;
  for (int j = 0; j < 16; ++j) {
    const float* xs = x + 16 * j;
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 16; ++i)
      if (std::fabs(xs[i]) > amax) {
        amax = std::fabs(xs[i]);
        max = xs[i];
      }
    float best_s = 0.0f;
    double best_err = std::numeric_limits<double>::infinity();
    if (amax > 0) {
      for (int step = -9; step <= 9; ++step) {
        const float iscale = -(static_cast<float>(lo) + 0.1f * step) / max;
        double slx = 0, sll = 0;
        for (int i = 0; i < 16; ++i) {
          const double w = static_cast<double>(xs[i]) * xs[i];
          const int l = std::clamp(nearest(iscale * xs[i]), -lo, lo - 1);
          slx += w * l * xs[i];
          sll += w * l * l;
        }
        if (sll <= 0) continue;
        // At the least-squares scale slx / sll the weighted error is sum w x^2 - slx^2 / sll: the least error
        // is the largest slx^2 / sll.
        const double err = -slx * slx / sll;
        if (err < best_err) {
          best_err = err;
          best_s = static_cast<float>(slx / sll);
        }
      }
    }
    scales[j] = best_s;
    if (std::fabs(best_s) > max_abs_s) {
      max_abs_s = std::fabs(best_s);
      max_s = best_s;
    }
  }
  return max_s;
}

// The super-block scale d (stored as fp16 in *d_out) under which the sub-block scale of largest magnitude,
// max_s, becomes -levels. Returns 1/d as used to quantize the sub-block scales (0 for an all-zero block).
float super_scale(float max_s, float levels, uint16_t* d_out) {
  const float iscale = max_s != 0 ? -levels / max_s : 0.0f;
  *d_out = f32_to_fp16(max_s != 0 ? 1.0f / iscale : 0.0f);
  return iscale;
}

// Q6_K: the sub-block scales quantized to int8 under one fp16 d (the largest maps to -128).
void quantize_q6_k(const float* x, BlockQ6_K* b) {
  float scales[16];
  const float iscale = super_scale(subblock_scales(x, 32, scales), 128.0f, &b->d);
  const float d = fp16_to_f32(b->d);
  std::memset(b->ql, 0, sizeof(b->ql));
  std::memset(b->qh, 0, sizeof(b->qh));
  for (int j = 0; j < 16; ++j) b->scales[j] = static_cast<int8_t>(std::clamp<long>(std::lround(iscale * scales[j]), -128, 127));
  for (int e = 0; e < kQKK; ++e) {
    const int h = e / 128, s = e / 32 % 4, l = e % 32;
    const float sd = d * static_cast<float>(b->scales[8 * h + 2 * s + l / 16]);
    const int q = sd != 0 ? std::clamp(static_cast<int>(std::lround(x[e] / sd)) + 32, 0, 63) : 32;
    b->ql[64 * h + 32 * (s % 2) + l] |= static_cast<uint8_t>((q & 15) << (s < 2 ? 0 : 4));
    b->qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * s));
  }
}

// Q3_K: 3-bit quants (q - 4), the sub-block scales as 6-bit signed values (stored + 32) under one fp16 d (the
// largest maps to -32). Layout as q3k_scale and the reference dequantizer read it.
void quantize_q3_k(const float* x, BlockQ3_K* b) {
  float scales[16];
  const float iscale = super_scale(subblock_scales(x, 4, scales), 32.0f, &b->d);
  const float d = fp16_to_f32(b->d);
  std::memset(b, 0, offsetof(BlockQ3_K, d));
  int sc[16];
  for (int j = 0; j < 16; ++j) {
    sc[j] = std::clamp(static_cast<int>(std::lround(iscale * scales[j])), -32, 31);
    const int v = sc[j] + 32;
    b->scales[j < 8 ? j : j - 8] |= static_cast<uint8_t>((v & 15) << (j < 8 ? 0 : 4));
    b->scales[8 + j % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (j / 4)));
  }
  for (int e = 0; e < kQKK; ++e) {
    const int h = e / 128, s = e / 32 % 4, k = e / 16 % 2, l = e % 16;
    const float sd = d * static_cast<float>(sc[e / 16]);
    const int q = sd != 0 ? std::clamp(static_cast<int>(std::lround(x[e] / sd)) + 4, 0, 7) : 4;
    b->qs[32 * h + 16 * k + l] |= static_cast<uint8_t>((q & 3) << (2 * s));
    b->hmask[16 * k + l] |= static_cast<uint8_t>((q >> 2) << (4 * h + s));
  }
}

}  // namespace

Status quantize_row(DType t, const float* src, void* dst, int64_t n) {
  if (n % traits(t).block_size != 0)
    return invalid_argument(std::string("row of ") + std::to_string(n) + " elements is not a whole number of " +
                            dtype_name(t) + " blocks");
  switch (t) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, src, n * sizeof(float));
      return Status::ok();
    case DType::kF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_fp16(src[i]);
      return Status::ok();
    }
    case DType::kBF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      return Status::ok();
    }
    case DType::kQ8_0:
      for (int64_t i = 0; i < n / kQK; ++i) quantize_q8_0(src + i * kQK, static_cast<BlockQ8_0*>(dst) + i);
      return Status::ok();
    case DType::kQ4_0:
      for (int64_t i = 0; i < n / kQK; ++i) quantize_q4_0(src + i * kQK, static_cast<BlockQ4_0*>(dst) + i);
      return Status::ok();
    case DType::kQ4_1:
      for (int64_t i = 0; i < n / kQK; ++i) quantize_q4_1(src + i * kQK, static_cast<BlockQ4_1*>(dst) + i);
      return Status::ok();
    case DType::kQ5_0:
    case DType::kQ5_1: {
      const size_t bytes = t == DType::kQ5_0 ? sizeof(BlockQ5_0) : sizeof(BlockQ5_1);
      for (int64_t i = 0; i < n / kQK; ++i) quantize_q5(src + i * kQK, t, static_cast<uint8_t*>(dst) + i * bytes);
      return Status::ok();
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const size_t bytes = t == DType::kQ4_K ? sizeof(BlockQ4_K) : sizeof(BlockQ5_K);
      for (int64_t i = 0; i < n / kQKK; ++i)
        quantize_q45_k(src + i * kQKK, t, static_cast<uint8_t*>(dst) + i * bytes);
      return Status::ok();
    }
    case DType::kQ6_K:
      for (int64_t i = 0; i < n / kQKK; ++i) quantize_q6_k(src + i * kQKK, static_cast<BlockQ6_K*>(dst) + i);
      return Status::ok();
    case DType::kQ2_K:
      for (int64_t i = 0; i < n / kQKK; ++i) quantize_q2_k(src + i * kQKK, static_cast<BlockQ2_K*>(dst) + i);
      return Status::ok();
    case DType::kQ3_K:
      for (int64_t i = 0; i < n / kQKK; ++i) quantize_q3_k(src + i * kQKK, static_cast<BlockQ3_K*>(dst) + i);
      return Status::ok();
    case DType::kIQ4_NL:
      for (int64_t i = 0; i < n / kQK; ++i) quantize_iq4_nl(src + i * kQK, static_cast<BlockQ4_0*>(dst) + i);
      return Status::ok();
    case DType::kMXFP4:
      for (int64_t i = 0; i < n / kQK; ++i) quantize_mxfp4(src + i * kQK, static_cast<BlockMXFP4*>(dst) + i);
      return Status::ok();
    case DType::kIQ4_XS:
      for (int64_t i = 0; i < n / kQKK; ++i) quantize_iq4_xs(src + i * kQKK, static_cast<BlockIQ4_XS*>(dst) + i);
      return Status::ok();
    default:
      return unimplemented(std::string("quantizing to ") + dtype_name(t) + " is not supported yet");
  }
}

}  // namespace cachet
