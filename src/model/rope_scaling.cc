#include "model/rope_scaling.h"

#include <algorithm>
#include <cmath>

namespace cachet {

namespace {

// llama.cpp's attention factor for a scale s and a multiplier m: 0.1 m ln(s) + 1 above s = 1.
float get_mscale(float s, float m) { return s <= 1.0f ? 1.0f : 0.1f * m * std::log(s) + 1.0f; }

// The pair index where a wavelength of n_ctx_orig / n_rot turns starts, in float like ggml.
float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(n_dims) * std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * static_cast<float>(M_PI))) /
         (2.0f * std::log(base));
}

}  // namespace

void set_yarn(ModelConfig* c, double factor, double file_attn_factor, double log_mul) {
  c->rope_scaling = "yarn";
  c->rope_freq_scale = 1.0 / factor;
  c->rope_yarn_ext_factor = 1.0;
  c->rope_attn_factor = file_attn_factor;
  c->rope_yarn_log_mul = log_mul;
}

Status apply_rope_overrides(const RopeOverrides& o, ModelConfig* c) {
  if (o.freq_base) {
    if (!(*o.freq_base > 0.0) || !std::isfinite(*o.freq_base)) return invalid_argument("--rope-freq-base must be positive");
    c->rope_theta = *o.freq_base;
  }
  if (o.scale && (!(*o.scale > 0.0) || !std::isfinite(*o.scale)))
    return invalid_argument("--rope-scale must be positive");
  if (o.yarn_orig_ctx) {
    if (*o.yarn_orig_ctx <= 0) return invalid_argument("--yarn-orig-ctx must be positive");
    c->rope_yarn_orig_ctx = *o.yarn_orig_ctx;
  }
  if (o.yarn_beta_fast) c->rope_yarn_beta_fast = *o.yarn_beta_fast;
  if (o.yarn_beta_slow) c->rope_yarn_beta_slow = *o.yarn_beta_slow;
  if (o.yarn_attn_factor) {
    if (!(*o.yarn_attn_factor > 0.0)) return invalid_argument("--yarn-attn-factor must be positive");
    c->rope_attn_factor = *o.yarn_attn_factor;
  }
  // A factor given on the command line stretches the usable context with it (the server and perplexity
  // size themselves by n_ctx_train): s times the original context.
  if (o.scale) {
    const int64_t orig = c->rope_yarn_orig_ctx > 0 ? c->rope_yarn_orig_ctx : c->n_ctx_train;
    c->n_ctx_train = std::max(c->n_ctx_train, static_cast<int64_t>(std::llround(orig * *o.scale)));
  }
  // The factor the file's scaling used (1 when none): --rope-scaling alone keeps it.
  const double file_factor = 1.0 / c->rope_freq_scale;
  const std::string type = o.scaling.value_or(c->rope_scaling == "none" && o.scale ? "linear" : c->rope_scaling);
  const double s = o.scale.value_or(file_factor);
  if (type == "none") {
    c->rope_scaling = "none";
    c->rope_freq_scale = 1.0;
    c->rope_yarn_ext_factor = 0.0;
  } else if (type == "linear") {
    c->rope_scaling = "linear";
    c->rope_freq_scale = 1.0 / s;
    c->rope_yarn_ext_factor = 0.0;
  } else if (type == "yarn") {
    set_yarn(c, s, c->rope_attn_factor, c->rope_yarn_log_mul);
  } else if (type == "ntk") {
    // The base change that keeps the highest frequency and stretches the lowest by s.
    const double d = static_cast<double>(c->rope_dim);
    c->rope_theta *= std::pow(s, d / (d - 2.0));
    c->rope_scaling = "none";
    c->rope_freq_scale = 1.0;
    c->rope_yarn_ext_factor = 0.0;
  } else {
    return invalid_argument("--rope-scaling must be none, linear, yarn or ntk, got '" + type + "'");
  }
  return Status::ok();
}

RopeFreqs rope_freqs(const ModelConfig& c, bool swa, const float* factors) {
  const int d = static_cast<int>(swa && c.rope_dim_swa > 0 ? c.rope_dim_swa : c.rope_dim);
  const int half = d / 2;
  const double theta = swa ? c.rope_theta_swa : c.rope_theta;
  const double fs = swa ? c.rope_freq_scale_swa : c.rope_freq_scale;
  const double ext = c.rope_yarn_ext_factor;
  RopeFreqs f;
  f.inv_freq.resize(half);
  float corr[2] = {0.0f, 0.0f};
  if (ext != 0.0) {
    const int orig = static_cast<int>(c.rope_yarn_orig_ctx > 0 ? c.rope_yarn_orig_ctx : c.n_ctx_train);
    const float base = static_cast<float>(theta);
    corr[0] = std::max(0.0f, std::floor(yarn_corr_dim(d, orig, static_cast<float>(c.rope_yarn_beta_fast), base)));
    corr[1] = std::min(static_cast<float>(d - 1),
                       std::ceil(yarn_corr_dim(d, orig, static_cast<float>(c.rope_yarn_beta_slow), base)));
  }
  for (int i = 0; i < half; ++i) {
    double extrap = std::pow(theta, -2.0 * i / d);
    if (factors) extrap /= factors[i];
    double mix = 0.0;  // 0: interpolate (freq_scale applies), 1: extrapolate (the trained frequency)
    if (ext != 0.0) {
      const float y = (static_cast<float>(i) - corr[0]) / std::max(0.001f, corr[1] - corr[0]);
      mix = (1.0 - std::min(1.0f, std::max(0.0f, y))) * ext;
    }
    f.inv_freq[i] = extrap * (fs * (1.0 - mix) + mix);
  }
  // cos and sin scaled: the file's attention factor always; with YaRN also its temperature for the model's
  // factor S (llama_context's, which makes yarn_log_multiplier divide it and cancels ggml's own term for S), and
  // ggml's term for this layer's scale (1 + 0.1 ln(1/fs): S again, or 1 on sliding-window layers that do not
  // scale, as Gemma 3's).
  float m = static_cast<float>(c.rope_attn_factor);
  if (ext != 0.0) {
    const float S = static_cast<float>(1.0 / c.rope_freq_scale), s = static_cast<float>(1.0 / fs);
    // (MLA models, DeepSeek's YaRN: llama.cpp takes mscale = mscale_all_dim, a ratio of 1; the multiplier
    // scales the scores instead, ModelConfig::query_scale.)
    float yarn_attn = get_mscale(S, 1.0f);
    if (c.rope_yarn_log_mul != 0.0)
      yarn_attn = c.is_mla() ? 1.0f : yarn_attn / get_mscale(S, static_cast<float>(c.rope_yarn_log_mul));
    yarn_attn *= 1.0f / (1.0f + 0.1f * std::log(S));
    m *= yarn_attn * (1.0f + 0.1f * std::log(s));
  }
  f.mscale = m;
  return f;
}

void rope_table(const int32_t* positions, int n_tokens, const RopeFreqs& f, float* cos_sin) {
  const int half = static_cast<int>(f.inv_freq.size());
  const int rope_dim = 2 * half;
  for (int t = 0; t < n_tokens; ++t) {
    for (int i = 0; i < half; ++i) {
      const double angle = positions[t] * f.inv_freq[i];
      cos_sin[t * rope_dim + 2 * i] = static_cast<float>(std::cos(angle)) * static_cast<float>(f.mscale);
      cos_sin[t * rope_dim + 2 * i + 1] = static_cast<float>(std::sin(angle)) * static_cast<float>(f.mscale);
    }
  }
}

void rope(float* x, const float* cos_sin, int n_tokens, int n_heads, int head_dim, int rope_dim, bool neox) {
  const int half = rope_dim / 2;
  for (int t = 0; t < n_tokens; ++t) {
    const float* cs = cos_sin + t * rope_dim;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (static_cast<int64_t>(t) * n_heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        // Interleaved pairs (2i, 2i+1) or NeoX pairs (i, i + rope_dim/2).
        int a = neox ? i : 2 * i;
        int b = neox ? i + half : 2 * i + 1;
        float c = cs[2 * i], s = cs[2 * i + 1];
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
  }
}

}  // namespace cachet
