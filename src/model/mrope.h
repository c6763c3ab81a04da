// M-RoPE: each rotary pair turns with one of three positions of its token, time, height or width, by the pair's
// index. Interleaved (Qwen3-VL, Qwen3.5): height for i % 3 == 1 and width for i % 3 == 2 while i is within 3 x
// that section's size, time for the rest (the Hugging Face models' apply_interleaved_mrope). Consecutive
// (Qwen2-VL, Qwen2.5-VL): the first t pairs time, the next h height, the next w width (ggml's MROPE: by i modulo
// the sections' sum, anything past the three time). Text has all three at
// its position; an image's rows take their place in the image's grid (vision/prompt_image.h: mrope_position).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/rope_scaling.h"

namespace cachet {

// Per rotary pair (half of them), the position it turns with: 0 time, 1 height, 2 width.
// sections: ModelConfig::rope_sections ("t,h,w,e" in pairs).
std::vector<int8_t> mrope_pair_sections(const std::string& sections, int half, bool interleaved = true);

// rope_table for an M-RoPE model: pair i turns by the section's position (rope_pos[3 t + section], or
// positions[t] when rope_pos is null) times f.inv_freq[i], angle in double.
void mrope_table(const int32_t* positions, const int32_t* rope_pos, int n_tokens, const RopeFreqs& f,
                 const std::vector<int8_t>& pair_sections, float* cos_sin);

}  // namespace cachet
