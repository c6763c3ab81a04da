// LFM2's short conv block after its input projection (Liquid AI's LFM2; llama.cpp's build_shortconv_block): the
// projection gives B | C | x (width w each) per token; the causal depthwise conv (model/causal_conv.h, kernel
// shortconv.l_cache, no activation, no bias) runs over B * x through the sequence's window, its recurrent state;
// the block's output is C * conv, before the output projection.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "kv/state_store.h"
#include "model/causal_conv.h"

namespace cachet {

struct ShortConvArgs : RecurrentBatch {
  int64_t width = 0, kernel = 0;
  const float* taps = nullptr;         // [width, kernel], oldest first
  float* bcx = nullptr;                // [n_tokens, 3 width] in: B | C | x; clobbered
  float* out = nullptr;                // [n_tokens, width]
};

void short_conv(ThreadPool& pool, const ShortConvArgs& a);

}  // namespace cachet
