#include "model/recurrent_mixer.h"

#include <algorithm>
#include <string>

#include "model/gated_delta_net.h"
#include "model/mamba2.h"
#include "model/ops.h"
#include "model/short_conv.h"

namespace cachet {

void RecurrentMixer::reserve(const ModelConfig& c, int n) {
  if (c.has_short_conv()) {
    bcx_.resize(n * 3 * c.n_embd);
    o_.resize(n * c.n_embd);
  } else if (c.has_mamba2()) {
    zxbcdt_.resize(n * (c.ssm_value_dim() + c.mamba2_conv_dim() + c.ssm_v_heads));
    o_.resize(n * c.ssm_value_dim());
  } else if (c.n_recurrent_layers() > 0) {
    qkv_.resize(n * c.ssm_conv_dim());
    z_.resize(n * c.ssm_value_dim());
    beta_.resize(n * c.ssm_v_heads);
    alpha_.resize(n * c.ssm_v_heads);
    o_.resize(n * c.ssm_value_dim());
  }
}

void RecurrentMixer::run(ThreadPool& pool, const ModelConfig& c, const DecoderLayerWeights& L,
                         const RecurrentBatch& b, const float* xn, float* proj, Tracer* tracer) {
  if (c.has_short_conv()) return short_conv(pool, c, L, b, xn, proj, tracer);
  if (c.has_mamba2()) return mamba2(pool, c, L, b, xn, proj, tracer);
  gated_delta(pool, c, L, b, xn, proj, tracer);
}

void RecurrentMixer::gated_delta(ThreadPool& pool, const ModelConfig& c, const DecoderLayerWeights& L,
                                 const RecurrentBatch& b, const float* xn, float* proj, Tracer* tracer) {
  const int T = b.n_tokens;
  matmul_multi(pool, {{&L.ssm_qkv, qkv_.data()}, {&L.ssm_z, z_.data()}, {&L.ssm_beta, beta_.data()},
                      {&L.ssm_alpha, alpha_.data()}}, xn, T);
  GatedDeltaNetArgs a;
  static_cast<RecurrentBatch&>(a) = b;
  a.head_dim = c.ssm_head_dim;
  a.k_heads = c.ssm_k_heads;
  a.v_heads = c.ssm_v_heads;
  a.conv_kernel = c.ssm_conv_kernel;
  a.grouped_heads = c.ssm_grouped_heads;
  a.eps = static_cast<float>(c.rms_eps);
  a.conv_w = reinterpret_cast<const float*>(L.ssm_conv.data);
  a.dt_bias = reinterpret_cast<const float*>(L.ssm_dt.data);
  a.a = reinterpret_cast<const float*>(L.ssm_a.data);
  a.norm = reinterpret_cast<const float*>(L.ssm_norm.data);
  a.qkv = qkv_.data();
  a.z = z_.data();
  a.beta = beta_.data();
  a.alpha = alpha_.data();
  a.out = o_.data();
  gated_delta_net(pool, a);
  matmul(pool, L.ssm_out, o_.data(), T, proj);
  if (tracer) {
    tracer->op({"gated_delta_net", L.ssm_qkv.name, dtype_name(L.ssm_qkv.type), L.ssm_qkv.shape(), {T, c.n_embd},
                {T, c.ssm_value_dim()},
                "q|k|v, z, beta, alpha projections; causal conv " + std::to_string(c.ssm_conv_kernel) +
                    " + SiLU; L2-normed q, k; delta rule over a " + std::to_string(c.ssm_head_dim) + "^2 state per " +
                    "value head (" + std::to_string(c.ssm_v_heads) + "); gated RMSNorm"});
    tracer->op({"matmul", L.ssm_out.name, dtype_name(L.ssm_out.type), L.ssm_out.shape(), {T, c.ssm_value_dim()},
                {T, c.n_embd}, "gated delta net output projection"});
  }
}

void RecurrentMixer::short_conv(ThreadPool& pool, const ModelConfig& c, const DecoderLayerWeights& L,
                                const RecurrentBatch& b, const float* xn, float* proj, Tracer* tracer) {
  const int T = b.n_tokens;
  matmul(pool, L.sc_in, xn, T, bcx_.data());
  ShortConvArgs a;
  static_cast<RecurrentBatch&>(a) = b;
  a.width = c.n_embd;
  a.kernel = c.ssm_conv_kernel;
  a.taps = reinterpret_cast<const float*>(L.sc_conv.data);
  a.bcx = bcx_.data();
  a.out = o_.data();
  cachet::short_conv(pool, a);
  matmul(pool, L.sc_out, o_.data(), T, proj);
  if (tracer) {
    tracer->op({"short_conv", L.sc_in.name, dtype_name(L.sc_in.type), L.sc_in.shape(), {T, c.n_embd}, {T, c.n_embd},
                "B | C | x projection; causal depthwise conv " + std::to_string(c.ssm_conv_kernel) +
                    " over B * x; times C"});
    tracer->op({"matmul", L.sc_out.name, dtype_name(L.sc_out.type), L.sc_out.shape(), {T, c.n_embd}, {T, c.n_embd},
                "short conv output projection"});
  }
}

void RecurrentMixer::mamba2(ThreadPool& pool, const ModelConfig& c, const DecoderLayerWeights& L,
                            const RecurrentBatch& b, const float* xn, float* proj, Tracer* tracer) {
  const int T = b.n_tokens;
  const int64_t in_dim = c.ssm_value_dim() + c.mamba2_conv_dim() + c.ssm_v_heads;
  matmul(pool, L.ssm_in, xn, T, zxbcdt_.data());
  Mamba2Args a;
  static_cast<RecurrentBatch&>(a) = b;
  a.heads = c.ssm_v_heads;
  a.head_dim = c.ssm_head_dim;
  a.state = c.ssm_state_size;
  a.groups = c.ssm_groups;
  a.conv_kernel = c.ssm_conv_kernel;
  a.eps = static_cast<float>(c.rms_eps);
  a.conv_w = reinterpret_cast<const float*>(L.ssm_conv.data);
  a.conv_b = reinterpret_cast<const float*>(L.ssm_conv_b.data);
  a.dt_bias = reinterpret_cast<const float*>(L.ssm_dt.data);
  a.a = reinterpret_cast<const float*>(L.ssm_a.data);
  a.d = reinterpret_cast<const float*>(L.ssm_d.data);
  a.norm = reinterpret_cast<const float*>(L.ssm_norm.data);
  a.zxbcdt = zxbcdt_.data();
  a.out = o_.data();
  cachet::mamba2(pool, a);
  matmul(pool, L.ssm_out, o_.data(), T, proj);
  if (tracer) {
    tracer->op({"mamba2", L.ssm_in.name, dtype_name(L.ssm_in.type), L.ssm_in.shape(), {T, c.n_embd}, {T, in_dim},
                "z | x B C | dt projection; causal conv " + std::to_string(c.ssm_conv_kernel) +
                    " + bias + SiLU over x B C; selective scan of " + std::to_string(c.ssm_v_heads) + " heads over a " +
                    std::to_string(c.ssm_head_dim) + " x " + std::to_string(c.ssm_state_size) +
                    " state each; + D x; times SiLU(z); RMSNorm per group (" + std::to_string(c.ssm_groups) + ")"});
    tracer->op({"matmul", L.ssm_out.name, dtype_name(L.ssm_out.type), L.ssm_out.shape(), {T, c.ssm_value_dim()},
                {T, c.n_embd}, "Mamba-2 output projection"});
  }
}

}  // namespace cachet
