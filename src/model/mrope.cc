// Interleaved M-RoPE tables.
#include "model/mrope.h"

#include <cmath>
#include <cstdio>

namespace cachet {

std::vector<int8_t> mrope_pair_sections(const std::string& sections, int half, bool interleaved) {
  int sec[4] = {0, 0, 0, 0};
  std::sscanf(sections.c_str(), "%d,%d,%d,%d", &sec[0], &sec[1], &sec[2], &sec[3]);
  std::vector<int8_t> out(static_cast<size_t>(half), 0);
  const int sum = sec[0] + sec[1] + sec[2] + sec[3];
  for (int i = 0; i < half && !interleaved && sum > 0; ++i) {
    const int k = i % sum;
    out[i] = static_cast<int8_t>(k < sec[0] ? 0 : k < sec[0] + sec[1] ? 1 : k < sec[0] + sec[1] + sec[2] ? 2 : 0);
  }
  for (int i = 0; i < half && interleaved; ++i) {
    const int s = i % 3;
    if (s > 0 && i < 3 * sec[s]) out[i] = static_cast<int8_t>(s);
  }
  return out;
}

void mrope_table(const int32_t* positions, const int32_t* rope_pos, int n_tokens, const RopeFreqs& f,
                 const std::vector<int8_t>& pair_sections, float* cos_sin) {
  const int half = static_cast<int>(f.inv_freq.size());
  const int rope_dim = 2 * half;
  const float ms = static_cast<float>(f.mscale);
  for (int t = 0; t < n_tokens; ++t) {
    for (int i = 0; i < half; ++i) {
      const int s = pair_sections[i];
      const int32_t p = rope_pos ? rope_pos[3 * t + s] : positions[t];
      const double angle = p * f.inv_freq[i];
      cos_sin[t * rope_dim + 2 * i] = static_cast<float>(std::cos(angle)) * ms;
      cos_sin[t * rope_dim + 2 * i + 1] = static_cast<float>(std::sin(angle)) * ms;
    }
  }
}

}  // namespace cachet
