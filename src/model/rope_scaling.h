// RoPE frequencies per rotated pair, with the context-extension schemes users meet in GGUF files and flags:
//   none:   pair i turns by position * theta^(-2i/d) / factor_i
//   linear: positions times freq_scale (= 1 / factor): interpolation
//   yarn:   per pair, a ramp between interpolation (low frequencies, long wavelengths) and extrapolation (high
//           frequencies) over the pairs whose wavelength falls between the original context / beta_fast and
//           / beta_slow turns, and cos and sin scaled by the attention temperature 0.1 ln(factor) + 1
//   ntk:    the "NTK-aware" base change theta' = theta * factor^(d / (d - 2)), no interpolation (a flag only;
//           files carry it as a changed freq_base)
// computed as llama.cpp computes them (ggml's rope_yarn, llama_context's attention factor), so a file behaves
// the same in both engines (docs/rope.md); and their tables of (cos, sin) and the rotation of Q and K by them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cachet/config.h"
#include "cachet/status.h"
#include "model/config.h"

namespace cachet {

// Applies the overrides to a config read from a file (global layers; sliding-window layers keep their own
// base and scale). Errors: an unknown scaling type, a factor or base that is not positive.
Status apply_rope_overrides(const RopeOverrides& o, ModelConfig* c);

// Sets c's YaRN fields for `factor` the way llama.cpp derives them: freq_scale 1/factor, the extrapolation
// mix (1 unless the file says otherwise), the attention factor (file's attn_factor times 0.1 ln(factor) + 1,
// divided by 0.1 * log_mul * ln(factor) + 1 when the file has yarn_log_multiplier).
void set_yarn(ModelConfig* c, double factor, double file_attn_factor = 1.0, double log_mul = 0.0);

// Per pair i < rope_dim / 2: the angle per position, and the factor cos and sin are multiplied by.
struct RopeFreqs {
  std::vector<double> inv_freq;
  double mscale = 1.0;
};
// swa: the sliding-window layers' base and scale (rope_theta_swa, rope_freq_scale_swa), under the model's YaRN
// mix and attention factor as llama.cpp passes them to every layer (gpt-oss scales its local layers as its global
// ones; Gemma 3's local layers do not scale, so YaRN leaves their angles alone). factors: rope_freqs divisors or
// nullptr.
RopeFreqs rope_freqs(const ModelConfig& c, bool swa, const float* factors);

// Rotates each head of x in place. x: [n_tokens, n_heads * head_dim]; cos_sin: [n_tokens, rope_dim]
// holding (cos, sin) pairs for each rotated pair of the token's position.
void rope(float* x, const float* cos_sin, int n_tokens, int n_heads, int head_dim, int rope_dim, bool neox);
// cos_sin table for the given positions: [n_tokens, rope_dim] as (cos, sin) pairs. Pair i turns by
// position * f.inv_freq[i] (angle in double); both scaled by f.mscale.
void rope_table(const int32_t* positions, int n_tokens, const RopeFreqs& f, float* cos_sin);

}  // namespace cachet
