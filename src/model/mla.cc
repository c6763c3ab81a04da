#include "model/mla.h"

#include <algorithm>

#include "io/gguf.h"
#include "kv/kv_block_storage.h"
#include "model/arch_reader.h"
#include "model/ops.h"

namespace cachet {

Status read_mla_weights(ArchReader& r, const ModelConfig& c, int64_t l, DecoderLayerWeights* L) {
  auto get = [&](const std::string& name) { return r.layer_tensor(l, name); };
  if (c.q_lora_rank > 0) {
    L->wq_a = get("attn_q_a.weight");
    L->q_a_norm = get("attn_q_a_norm.weight");
    L->wq = get("attn_q_b.weight");
  } else {
    L->wq = get("attn_q.weight");
  }
  L->wkv_a = get("attn_kv_a_mqa.weight");
  L->kv_a_norm = get("attn_kv_a_norm.weight");
  L->wo = get("attn_output.weight");
  const TensorView k_b = get("attn_k_b.weight"), v_b = get("attn_v_b.weight");
  if (!k_b.data && get("attn_kv_b.weight").data)
    return unimplemented("layer " + std::to_string(l) +
                         " has the fused attn_kv_b of files converted before llama.cpp split it into attn_k_b and "
                         "attn_v_b (its MLA files): convert the model again");
  const int64_t H = c.n_head;
  CACHET_RETURN_IF_ERROR(split_experts(k_b, "attn_k_b", c.mla_nope_dim(), c.kv_lora_rank, H, l, &L->k_b));
  return split_experts(v_b, "attn_v_b", c.kv_lora_rank, c.mla_v_dim, H, l, &L->v_b);
}

Status validate_mla_weights(const ModelConfig& c, DecoderLayerWeights* L, std::vector<AlignedBuffer<float>>* owned,
                            int64_t l) {
  const int64_t d = c.n_embd, H = c.n_head;
  if (c.q_lora_rank > 0) {
    CACHET_RETURN_IF_ERROR(check_tensor(L->wq_a, "attn_q_a", d, c.q_lora_rank, l));
    CACHET_RETURN_IF_ERROR(vector_to_f32(&L->q_a_norm, c.q_lora_rank, owned, l, "attn_q_a_norm"));
    CACHET_RETURN_IF_ERROR(check_tensor(L->wq, "attn_q_b", c.q_lora_rank, H * c.mla_k_dim, l));
  } else {
    CACHET_RETURN_IF_ERROR(check_tensor(L->wq, "attn_q", d, H * c.mla_k_dim, l));
  }
  CACHET_RETURN_IF_ERROR(check_tensor(L->wkv_a, "attn_kv_a_mqa", d, c.kv_lora_rank + c.rope_dim, l));
  CACHET_RETURN_IF_ERROR(vector_to_f32(&L->kv_a_norm, c.kv_lora_rank, owned, l, "attn_kv_a_norm"));
  for (int64_t h = 0; h < H; ++h) {
    CACHET_RETURN_IF_ERROR(check_tensor(L->k_b[h], "attn_k_b", c.mla_nope_dim(), c.kv_lora_rank, l));
    CACHET_RETURN_IF_ERROR(check_tensor(L->v_b[h], "attn_v_b", c.kv_lora_rank, c.mla_v_dim, l));
  }
  return check_tensor(L->wo, "attn_output", H * c.mla_v_dim, d, l);
}

void MlaAttention::reserve(const ModelConfig& c, int n) {
  if (!c.is_mla()) return;
  const int64_t H = c.n_head, row = c.kv_lora_rank + c.rope_dim;
  qa_.resize(n * std::max<int64_t>(c.q_lora_rank, 1));
  q_.resize(n * H * c.mla_k_dim);
  kv_.resize(n * row);
  pe_.resize(n * H * c.rope_dim);
  qabs_.resize(n * H * row);
  att_.resize(n * H * row);
  hin_.resize(n * std::max({c.mla_nope_dim(), c.kv_lora_rank, c.rope_dim}));
  hout_.resize(n * std::max(c.kv_lora_rank, c.mla_v_dim));
}

void MlaAttention::run(ThreadPool& pool, const ModelConfig& c, const DecoderLayerWeights& L, const ForwardBatch& batch,
                       const KvView* views, int kl, const float* cos_sin, const float* xn, float* out,
                       Tracer* tracer) {
  const int T = batch.n_tokens();
  const int64_t H = c.n_head, d = c.n_embd, kvl = c.kv_lora_rank, rd = c.rope_dim, row = kvl + rd;
  const int64_t qk = c.mla_k_dim, nope = c.mla_nope_dim(), vd = c.mla_v_dim;
  const float eps = static_cast<float>(c.rms_eps);
  auto trace = [&](TraceOp op) {
    if (tracer) tracer->op(std::move(op));
  };
  auto trace_mm = [&](const TensorView& w, int64_t n_in, int64_t n_out, const char* note) {
    trace({"matmul", w.name, dtype_name(w.type), w.shape(), {T, n_in}, {T, n_out}, note});
  };

  // Q (through its compression when the file has one) and the latent | k_pe row, from the same input.
  if (L.wq_a.data) {
    matmul_multi(pool, {{&L.wq_a, qa_.data()}, {&L.wkv_a, kv_.data()}}, xn, T);
    rms_norm(qa_.data(), reinterpret_cast<const float*>(L.q_a_norm.data), qa_.data(), T, c.q_lora_rank, eps);
    matmul(pool, L.wq, qa_.data(), T, q_.data());
    trace_mm(L.wq_a, d, c.q_lora_rank, "compressed Q, then its RMSNorm");
    trace_mm(L.wq, c.q_lora_rank, H * qk, "Q: no-RoPE | RoPE part per head");
  } else {
    matmul_multi(pool, {{&L.wq, q_.data()}, {&L.wkv_a, kv_.data()}}, xn, T);
    trace_mm(L.wq, d, H * qk, "Q: no-RoPE | RoPE part per head");
  }
  trace_mm(L.wkv_a, d, row, "KV latent | shared rotated key part");
  for (int t = 0; t < T; ++t)
    rms_norm(kv_.data() + t * row, reinterpret_cast<const float*>(L.kv_a_norm.data), kv_.data() + t * row, 1, kvl, eps);

  // RoPE on every head's q_pe and the token's one k_pe, gathered so each is one rotation call.
  for (int t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      std::copy_n(q_.data() + (t * H + h) * qk + nope, rd, pe_.data() + (t * H + h) * rd);
  rope(pe_.data(), cos_sin, T, static_cast<int>(H), static_cast<int>(rd), static_cast<int>(rd), c.rope_neox);
  for (int t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h)
      std::copy_n(pe_.data() + (t * H + h) * rd, rd, qabs_.data() + (t * H + h) * row + kvl);
    std::copy_n(kv_.data() + t * row + kvl, rd, hin_.data() + t * rd);
  }
  rope(hin_.data(), cos_sin, T, 1, static_cast<int>(rd), static_cast<int>(rd), c.rope_neox);
  for (int t = 0; t < T; ++t) std::copy_n(hin_.data() + t * rd, rd, kv_.data() + t * row + kvl);
  trace({"rope", "", "", {}, {T, H + 1, rd}, {T, H + 1, rd},
         std::string(c.rope_neox ? "NeoX" : "interleaved") + " rotation of each head's q_pe and the shared k_pe"});

  // Absorb: each head's q_nope into the latent space through its key decompression.
  for (int64_t h = 0; h < H; ++h) {
    for (int t = 0; t < T; ++t) std::copy_n(q_.data() + (t * H + h) * qk, nope, hin_.data() + t * nope);
    matmul(pool, L.k_b[h], hin_.data(), T, hout_.data());
    for (int t = 0; t < T; ++t) std::copy_n(hout_.data() + t * kvl, kvl, qabs_.data() + (t * H + h) * row);
  }
  trace({"matmul", L.k_b[0].name, dtype_name(L.k_b[0].type), L.k_b[0].shape(), {T, H, nope}, {T, H, kvl},
         "per head: q_nope -> the latent space (absorbed key decompression)"});
  if (c.attn_temp_scale != 0.0)
    for (int t = 0; t < T; ++t) {
      const float s = c.attn_temperature(batch.positions[t]);
      for (int64_t i = 0; i < H * row; ++i) qabs_[t * H * row + i] *= s;
    }

  // The cache's row per token, then MQA over it: K = [latent | k_pe], V = the latent (the same row's front).
  const KvType kt = batch.kv->types().k;
  for (int t = 0; t < T; ++t)
    kv_store(kt, kv_.data() + t * row, batch.kv->k_slot(kl, batch.slots[t]), row, static_cast<int>(row));
  AttentionArgs aa{qabs_.data(), att_.data(), T, batch.positions.data(), batch.seq_index.data(), views, kl,
                   static_cast<int>(H), 1, static_cast<int>(row), c.query_scale()};
  attention(pool, aa);
  trace({"attention", "", "", {}, {T, H, row}, {T, H, row},
         "MQA over the cached latent | k_pe rows, scores * " + std::to_string(c.query_scale()) +
             "; weights @ latent"});

  // Decompress: each head's weighted latent through its value decompression.
  for (int64_t h = 0; h < H; ++h) {
    for (int t = 0; t < T; ++t) std::copy_n(att_.data() + (t * H + h) * row, kvl, hin_.data() + t * kvl);
    matmul(pool, L.v_b[h], hin_.data(), T, hout_.data());
    for (int t = 0; t < T; ++t) std::copy_n(hout_.data() + t * vd, vd, out + (t * H + h) * vd);
  }
  trace({"matmul", L.v_b[0].name, dtype_name(L.v_b[0].type), L.v_b[0].shape(), {T, H, kvl}, {T, H, vd},
         "per head: the attended latent -> a value head"});
}

}  // namespace cachet
