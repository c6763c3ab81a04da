// Mamba-2's mixer after its input projection (state-spaces' Mamba-2 as Granite 4.0-H, Nemotron-H and Falcon-H1
// ship it; llama.cpp's build_mamba2_layer): the projection gives z | x B C | dt per token; a short causal conv
// with a bias and SiLU runs over x | B | C through the sequence's window; each head h (group g = h / (heads /
// groups) of B and C) scans its hd x ds state; the output is gated by SiLU(z) and RMS-normed per group.
//
//   per token, per head h:   dt' = softplus(dt_h + dt_bias_h);  da = exp(dt' A_h)      (A = -exp(A_log), stored)
//     S_i = da S_i + (x_i dt') B_g;  y_i = S_i . C_g + D_h x_i                        (S: [hd, ds] per head)
//   y = y * silu(z);  each group of d_inner / groups channels RMS-normed, times norm
//
// Per sequence the tokens run in position order through the state in its StateStore slot, so a prompt in
// chunks, at once or token by token gives the same bits.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "kv/state_store.h"
#include "model/causal_conv.h"

namespace cachet {

struct Mamba2Args : RecurrentBatch {
  int64_t heads = 0, head_dim = 0, state = 0, groups = 0, conv_kernel = 0;
  float eps = 1e-5f;
  const float* conv_w = nullptr;  // [conv_dim, conv_kernel] taps, oldest first (conv_dim = heads hd + 2 groups ds)
  const float* conv_b = nullptr;  // [conv_dim] or null
  const float* dt_bias = nullptr;  // [heads]
  const float* a = nullptr;        // [heads] -exp(A_log)
  const float* d = nullptr;        // [heads] the skip
  const float* norm = nullptr;     // [heads hd] grouped RMSNorm weight
  float* zxbcdt = nullptr;         // [n_tokens, 2 heads hd + 2 groups ds + heads] in: projections; clobbered
  float* out = nullptr;            // [n_tokens, heads hd]
};

void mamba2(ThreadPool& pool, const Mamba2Args& a);

}  // namespace cachet
