// Reading a decoder's weights from the standard GGUF tensor names, and checking them against the config.
#include <algorithm>

#include "base/check.h"
#include "io/gguf.h"
#include "kernels/kernels.h"
#include "model/arch_reader.h"
#include "model/decoder.h"
#include "model/mla.h"

namespace cachet {

// Rows [r0, r0 + n) of a matrix, as a matrix of its own.
TensorView row_slice(const TensorView& t, int64_t r0, int64_t n, const char* part) {
  TensorView v = t;
  v.name = t.name + "[" + part + "]";
  v.ne = {t.ne[0], n, 1, 1};
  v.data = t.data + r0 * t.row_bytes;
  return v;
}

// Elements [e0, e0 + n) of a vector, as a vector of its own (split fused biases).
TensorView elem_slice(const TensorView& t, int64_t e0, int64_t n, const char* part) {
  TensorView v = t;
  v.name = t.name + "[" + part + "]";
  v.ne = {n, 1, 1, 1};
  v.data = t.data + e0 * traits(t.type).block_bytes;  // 1-D weights are F32/F16/BF16 (checked later)
  v.row_bytes = n * traits(t.type).block_bytes;
  return v;
}

Status check_tensor(const TensorView& t, const std::string& what, int64_t ne0, int64_t ne1, int64_t layer) {
  const std::string name = t.name.empty() ? what : t.name;
  if (!t.data) {
    return not_found("missing tensor " + what + (layer >= 0 ? " of layer " + std::to_string(layer) : ""));
  }
  int64_t n_el = t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
  if (t.ne[0] != ne0 || t.ne[1] != ne1 || n_el != ne0 * ne1)
    return invalid_argument("tensor '" + name + "' has shape [" + std::to_string(t.ne[0]) + ", " +
                            std::to_string(t.ne[1]) + "], expected [" + std::to_string(ne0) + ", " +
                            std::to_string(ne1) + "] from the model config");
  const uintptr_t align = t.type == DType::kF32 ? 4 : 2;
  if (reinterpret_cast<uintptr_t>(t.data) % align != 0)
    return invalid_argument("tensor '" + name + "' is not aligned to " + std::to_string(align) +
                            " bytes in the file (general.alignment too small)");
  if (!dtype_computable(t.type))
    return unimplemented("tensor '" + name + "' has type " + dtype_name(t.type) +
                         ", which cachet cannot compute with yet");
  return Status::ok();
}

// A 1-D weight (norm, bias, factors) as f32: converted into `owned` when stored in another type.
Status vector_to_f32(TensorView* t, int64_t n, std::vector<AlignedBuffer<float>>* owned, int64_t layer,
                     const std::string& what) {
  CACHET_RETURN_IF_ERROR(check_tensor(*t, what, n, 1, layer));
  if (t->type == DType::kF32) return Status::ok();
  if (traits(t->type).block_size != 1)
    return unimplemented("tensor '" + t->name + "' is a vector stored as " + dtype_name(t->type) +
                         "; cachet expects F32, F16 or BF16 there");
  AlignedBuffer<float> buf(n);
  kernels().dequantize_row(t->type, t->data, buf.data(), n);
  t->data = reinterpret_cast<const uint8_t*>(buf.data());
  t->type = DType::kF32;
  t->row_bytes = n * sizeof(float);
  owned->push_back(std::move(buf));
  return Status::ok();
}

// n_expert matrices of [ne0, ne1] stacked in a 3-D tensor, one view each.
Status split_experts(const TensorView& t, const std::string& what, int64_t ne0, int64_t ne1, int64_t n_expert,
                     int64_t layer, std::vector<TensorView>* out) {
  if (!t.data) return not_found("missing tensor " + what + " of layer " + std::to_string(layer));
  if (t.ne[0] != ne0 || t.ne[1] != ne1 || t.ne[2] != n_expert || t.ne[3] != 1)
    return invalid_argument("tensor '" + t.name + "' has shape [" + std::to_string(t.ne[0]) + ", " +
                            std::to_string(t.ne[1]) + ", " + std::to_string(t.ne[2]) + "], expected [" +
                            std::to_string(ne0) + ", " + std::to_string(ne1) + ", " + std::to_string(n_expert) +
                            "] from the model config");
  for (int64_t e = 0; e < n_expert; ++e) {
    TensorView v = t;
    v.name = t.name + "[" + std::to_string(e) + "]";
    v.ne = {ne0, ne1, 1, 1};
    v.data = t.data + e * ne1 * t.row_bytes;
    out->push_back(v);
  }
  return Status::ok();
}

// Rows `rows` of a matrix (in that order) copied into a matrix of their own, kept in `store`.
static TensorView gather_rows(const TensorView& t, const std::vector<int64_t>& rows, const char* part,
                              std::vector<AlignedBuffer<uint8_t>>* store) {
  AlignedBuffer<uint8_t> buf(rows.size() * t.row_bytes);
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy_n(t.data + rows[i] * t.row_bytes, t.row_bytes, buf.data() + i * t.row_bytes);
  TensorView v = t;
  v.name = t.name + "[" + part + "]";
  v.ne = {t.ne[0], static_cast<int64_t>(rows.size()), 1, 1};
  v.data = buf.data();
  store->push_back(std::move(buf));
  return v;
}

// Qwen3-Next's fused gated delta net projections, regrouped into Qwen3.5's separate ones. Per key head kh
// (r = value heads per key head): ssm_ba rows [beta x r, alpha x r]; ssm_in rows [q x d, k x d, v x r d, z x r d].
// Value head kh * r + j keeps that index in the separate layout.
static Status regroup_qwen3next(ArchReader& r, const ModelConfig& c, int64_t l, bool fused_ba, bool legacy_in,
                                DecoderLayerWeights* L, std::vector<AlignedBuffer<uint8_t>>* store) {
  const int64_t KH = c.ssm_k_heads, rr = c.ssm_v_heads / c.ssm_k_heads, d = c.ssm_head_dim;
  if (fused_ba) {
    const TensorView ba = r.layer_tensor(l, "ssm_ba.weight");
    if (ba.data) {
      if (ba.ne[1] != 2 * c.ssm_v_heads || ba.ne[2] * ba.ne[3] != 1)
        return invalid_argument("tensor '" + ba.name + "' does not hold beta and alpha of every value head");
      std::vector<int64_t> beta, alpha;
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t j = 0; j < rr; ++j) {
          beta.push_back(kh * 2 * rr + j);
          alpha.push_back(kh * 2 * rr + rr + j);
        }
      L->ssm_beta = gather_rows(ba, beta, "beta", store);
      L->ssm_alpha = gather_rows(ba, alpha, "alpha", store);
    }
  }
  if (legacy_in && !L->ssm_qkv.data) {
    const TensorView in = r.layer_tensor(l, "ssm_in.weight");
    if (in.data) {
      const int64_t g = 2 * d + 2 * rr * d;
      if (in.ne[1] != KH * g || in.ne[2] * in.ne[3] != 1)
        return invalid_argument("tensor '" + in.name + "' does not hold q, k, v and z of every key head");
      std::vector<int64_t> qkv, z;
      for (int part = 0; part < 2; ++part)  // every head's q, then every head's k
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t i = 0; i < d; ++i) qkv.push_back(kh * g + part * d + i);
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t i = 0; i < rr * d; ++i) {
          qkv.push_back(kh * g + 2 * d + i);
          z.push_back(kh * g + 2 * d + rr * d + i);
        }
      L->ssm_qkv = gather_rows(in, qkv, "qkv", store);
      L->ssm_z = gather_rows(in, z, "z", store);
    }
  }
  return Status::ok();
}

// A causal conv's taps, [kernel, channels], checked and read as one f32 vector of kernel * channels values.
static Status conv_taps_to_f32(const ModelConfig& c, TensorView* t, int64_t channels,
                               std::vector<AlignedBuffer<float>>* owned, int64_t l, const char* what) {
  CACHET_RETURN_IF_ERROR(check_tensor(*t, what, c.ssm_conv_kernel, channels, l));
  TensorView flat = *t;
  flat.ne = {c.ssm_conv_kernel * channels, 1, 1, 1};
  flat.row_bytes = flat.ne[0] * traits(flat.type).block_bytes;
  CACHET_RETURN_IF_ERROR(vector_to_f32(&flat, flat.ne[0], owned, l, what));
  t->data = flat.data;
  t->type = DType::kF32;
  t->row_bytes = c.ssm_conv_kernel * sizeof(float);
  return Status::ok();
}

// A gated delta net layer's tensors against the config; its small vectors and conv taps as f32.
static Status validate_gated_delta_net(const ModelConfig& c, DecoderLayerWeights* L,
                                       std::vector<AlignedBuffer<float>>* owned, int64_t l) {
  CACHET_RETURN_IF_ERROR(check_tensor(L->ssm_qkv, "attn_qkv", c.n_embd, c.ssm_conv_dim(), l));
  CACHET_RETURN_IF_ERROR(check_tensor(L->ssm_z, "attn_gate", c.n_embd, c.ssm_value_dim(), l));
  CACHET_RETURN_IF_ERROR(check_tensor(L->ssm_beta, "ssm_beta", c.n_embd, c.ssm_v_heads, l));
  CACHET_RETURN_IF_ERROR(check_tensor(L->ssm_alpha, "ssm_alpha", c.n_embd, c.ssm_v_heads, l));
  CACHET_RETURN_IF_ERROR(check_tensor(L->ssm_out, "ssm_out", c.ssm_value_dim(), c.n_embd, l));
  CACHET_RETURN_IF_ERROR(vector_to_f32(&L->ssm_dt, c.ssm_v_heads, owned, l, "ssm_dt.bias"));
  CACHET_RETURN_IF_ERROR(vector_to_f32(&L->ssm_a, c.ssm_v_heads, owned, l, "ssm_a"));
  CACHET_RETURN_IF_ERROR(vector_to_f32(&L->ssm_norm, c.ssm_head_dim, owned, l, "ssm_norm"));
  return conv_taps_to_f32(c, &L->ssm_conv, c.ssm_conv_dim(), owned, l, "ssm_conv1d");
}

// A vector the file stores as a matrix ([1, heads] for Mamba-2's A and D, [d_inner / groups, groups] for its
// norm), read as one row of its elements.
static void flatten_vector(TensorView* t) {
  if (!t->data || traits(t->type).block_size != 1) return;
  t->ne = {t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3], 1, 1, 1};
  t->row_bytes = t->ne[0] * traits(t->type).block_bytes;
}

// A Mamba-2 layer's tensors against the config; its small vectors and conv taps as f32.
static Status validate_mamba2(const ModelConfig& c, DecoderLayerWeights* L, std::vector<AlignedBuffer<float>>* owned,
                              int64_t l) {
  for (TensorView* t : {&L->ssm_a, &L->ssm_d, &L->ssm_norm}) flatten_vector(t);
  const int64_t inner = c.ssm_value_dim(), cd = c.mamba2_conv_dim(), H = c.ssm_v_heads;
  CACHET_RETURN_IF_ERROR(check_tensor(L->ssm_in, "ssm_in", c.n_embd, inner + cd + H, l));
  CACHET_RETURN_IF_ERROR(check_tensor(L->ssm_out, "ssm_out", inner, c.n_embd, l));
  if (L->ssm_conv_b.data) CACHET_RETURN_IF_ERROR(vector_to_f32(&L->ssm_conv_b, cd, owned, l, "ssm_conv1d.bias"));
  CACHET_RETURN_IF_ERROR(vector_to_f32(&L->ssm_dt, H, owned, l, "ssm_dt.bias"));
  CACHET_RETURN_IF_ERROR(vector_to_f32(&L->ssm_a, H, owned, l, "ssm_a"));
  CACHET_RETURN_IF_ERROR(vector_to_f32(&L->ssm_d, H, owned, l, "ssm_d"));
  CACHET_RETURN_IF_ERROR(vector_to_f32(&L->ssm_norm, inner, owned, l, "ssm_norm"));
  return conv_taps_to_f32(c, &L->ssm_conv, cd, owned, l, "ssm_conv1d");
}

Status take_mtp_blocks(ArchReader& r, ModelConfig* c, DecoderTensors* allowed, bool mtp_head) {
  const std::string a = r.arch() + ".";
  CACHET_ASSIGN_OR_RETURN(int64_t nextn, r.dim("nextn_predict_layers", int64_t{0}));
  if (nextn < 0 || nextn >= c->n_layer) return invalid_argument(a + "nextn_predict_layers is out of range");
  if (mtp_head && nextn == 0)
    return invalid_argument("this file has no multi-token-prediction head (" + a + "nextn_predict_layers is 0)");
  const int64_t n_all = c->n_layer, n_trunk = n_all - nextn;
  c->n_layer = n_trunk;
  c->n_mtp_layers = nextn;
  // Read past: the MTP blocks (trunk), or the trunk and every block after the first (head).
  auto read_past = [&](int64_t l0, int64_t l1) {
    for (const auto& ti : r.file().tensors())
      for (int64_t l = l0; l < l1; ++l)
        if (ti.name.rfind("blk." + std::to_string(l) + ".", 0) == 0) r.tensor(ti.name);
  };
  if (!mtp_head) {
    read_past(n_trunk, n_all);
    return Status::ok();
  }
  read_past(0, n_trunk);
  read_past(n_trunk + 1, n_all);
  r.set_layer_offset(n_trunk);
  allowed->nextn = true;
  c->mtp_head = true;
  return Status::ok();
}

Result<DecoderWeights> read_decoder_weights(ArchReader& r, ModelConfig* cfg, const DecoderTensors& allowed) {
  DecoderWeights w;
  w.tok_embd = r.tensor("token_embd.weight");
  w.output_norm = r.tensor(allowed.output_norm);
  w.output = cfg->tied_output ? w.tok_embd : r.tensor("output.weight");
  if (allowed.rope_freqs) w.rope_freqs = r.tensor("rope_freqs.weight");
  if (allowed.classifier) {
    w.cls_out = r.tensor("cls.output.weight");
    w.cls_out_b = r.tensor("cls.output.bias");
    cfg->n_cls_out = w.cls_out.data ? w.cls_out.ne[1] : 0;
  }
  if (allowed.dense_out) {
    w.dense_2 = r.tensor("dense_2.weight");
    w.dense_3 = r.tensor("dense_3.weight");
  }
  cfg->rope_freq_factors = w.rope_freqs.data != nullptr;
  if (allowed.per_layer_embd) {
    w.pl_tok_embd = r.tensor("per_layer_token_embd.weight");
    w.pl_model_proj = r.tensor("per_layer_model_proj.weight");
    w.pl_proj_norm = r.tensor("per_layer_proj_norm.weight");
  }
  if (allowed.nextn) {
    w.eh_proj = r.layer_tensor(0, "nextn.eh_proj.weight");
    w.enorm = r.layer_tensor(0, "nextn.enorm.weight");
    w.hnorm = r.layer_tensor(0, "nextn.hnorm.weight");
    // (A tied head stays the trunk's embedding, as in llama.cpp's graph.)
    if (TensorView e = r.layer_tensor(0, "nextn.embed_tokens.weight"); e.data) w.tok_embd = e;
    if (TensorView n = r.layer_tensor(0, "nextn.shared_head_norm.weight"); n.data) w.output_norm = n;
    if (TensorView h = r.layer_tensor(0, "nextn.shared_head_head.weight"); h.data) w.output = h;
  }
  for (int64_t l = 0; l < cfg->n_layer; ++l) {
    const int64_t q = cfg->q_dim_at(l), kv = cfg->kv_dim_at(l);
    DecoderLayerWeights L;
    auto get = [&](const std::string& name) { return r.layer_tensor(l, name); };
    L.attn_norm = get("attn_norm.weight");
    if (cfg->is_short_conv(l)) {
      L.sc_in = get("shortconv.in_proj.weight");
      L.sc_conv = get("shortconv.conv.weight");
      L.sc_out = get("shortconv.out_proj.weight");
    } else if (cfg->is_mamba2(l)) {
      L.ssm_in = get("ssm_in.weight");
      L.ssm_conv = get("ssm_conv1d.weight");
      L.ssm_conv_b = get("ssm_conv1d.bias");
      L.ssm_dt = get("ssm_dt.bias");
      L.ssm_a = get("ssm_a");
      L.ssm_d = get("ssm_d");
      L.ssm_norm = get("ssm_norm.weight");
      L.ssm_out = get("ssm_out.weight");
    } else if (cfg->is_recurrent(l)) {
      L.ssm_qkv = get("attn_qkv.weight");
      L.ssm_z = get("attn_gate.weight");
      L.ssm_conv = get("ssm_conv1d.weight");
      L.ssm_dt = get("ssm_dt.bias");
      L.ssm_a = get("ssm_a");
      if (!allowed.fused_ba) {
        L.ssm_beta = get("ssm_beta.weight");
        L.ssm_alpha = get("ssm_alpha.weight");
      }
      L.ssm_norm = get("ssm_norm.weight");
      L.ssm_out = get("ssm_out.weight");
      CACHET_RETURN_IF_ERROR(regroup_qwen3next(r, *cfg, l, allowed.fused_ba, allowed.legacy_ssm_in, &L, &w.regrouped));
    }
    const bool attends = cfg->attends(l) && !cfg->is_mla();
    if (cfg->is_mla()) CACHET_RETURN_IF_ERROR(read_mla_weights(r, *cfg, l, &L));
    const TensorView qkv = allowed.fused_qkv && attends ? get("attn_qkv.weight") : TensorView{};
    if (qkv.data) {
      if (qkv.ne[1] != q + 2 * kv)
        return invalid_argument("tensor '" + qkv.name + "' has " + std::to_string(qkv.ne[1]) + " rows, expected " +
                                std::to_string(q + 2 * kv) + " (Q, K and V)");
      L.wq = row_slice(qkv, 0, q, "q");
      L.wk = row_slice(qkv, q, kv, "k");
      L.wv = row_slice(qkv, q + kv, kv, "v");
      const TensorView b = allowed.qkv_bias ? get("attn_qkv.bias") : TensorView{};
      if (b.data) {
        if (b.ne[0] != q + 2 * kv) return invalid_argument("tensor '" + b.name + "' does not match Q, K and V");
        L.bq = elem_slice(b, 0, q, "q");
        L.bk = elem_slice(b, q, kv, "k");
        L.bv = elem_slice(b, q + kv, kv, "v");
      }
    } else if (attends) {
      L.wq = get("attn_q.weight");
      if (cfg->has_own_kv(l)) {  // a shared-KV layer computes only Q
        L.wk = get("attn_k.weight");
        L.wv = get("attn_v.weight");
      }
    }
    if (allowed.qkv_bias && !L.bq.data && attends) {
      L.bq = get("attn_q.bias");
      L.bk = get("attn_k.bias");
      L.bv = get("attn_v.bias");
    }
    if (allowed.qk_norm && attends) {
      L.q_norm = get("attn_q_norm.weight");
      if (cfg->has_own_kv(l)) L.k_norm = get("attn_k_norm.weight");
    }
    if (attends) L.wo = get("attn_output.weight");
    if (attends && allowed.out_bias) L.bo = get("attn_output.bias");
    if (attends && allowed.attn_sinks) L.sinks = get("attn_sinks.weight");
    if (allowed.post_norms) L.post_attn_norm = get("post_attention_norm.weight");
    // (Nemotron-H: an FFN-only layer's one norm is attn_norm; its mixer layers have no FFN.)
    L.ffn_norm = cfg->is_ffn_only(l) ? L.attn_norm : cfg->has_ffn(l) ? get(allowed.ffn_norm) : TensorView{};
    if (allowed.layer_out_scale) L.out_scale = get("layer_output_scale.weight");
    if (allowed.per_layer_embd) {
      L.pl_gate = get("inp_gate.weight");
      L.pl_proj = get("proj.weight");
      L.pl_post_norm = get("post_norm.weight");
    }
    if (!cfg->has_ffn(l)) {
      w.layers.push_back(std::move(L));
      continue;
    }
    const int64_t ffw = cfg->ffn_width(l);
    if (cfg->is_moe(l) && allowed.moe_beside_dense) {
      L.router_scale = get("ffn_gate_inp.scale");
      L.down_exps_scale = get("ffn_down_exps.scale");
      L.pre_moe_norm = get("pre_ffw_norm_2.weight");
      L.post_dense_norm = get("post_ffw_norm_1.weight");
      L.post_moe_norm = get("post_ffw_norm_2.weight");
      L.w_gate = get("ffn_gate.weight");
      L.w_up = get("ffn_up.weight");
      L.w_down = get("ffn_down.weight");
    }
    if (cfg->is_moe(l)) {
      L.router = get("ffn_gate_inp.weight");
      if (allowed.router_bias) L.router_bias = get("exp_probs_b.bias");
      if (allowed.expert_biases) {
        L.router_logit_bias = get("ffn_gate_inp.bias");
        L.gate_exps_b = get("ffn_gate_exps.bias");
        L.up_exps_b = get("ffn_up_exps.bias");
        L.down_exps_b = get("ffn_down_exps.bias");
      }
      // (The experts' width: the latent one where the file projects into it.)
      const int64_t E = cfg->n_expert, d = cfg->moe_latent > 0 ? cfg->moe_latent : cfg->n_embd, ff = cfg->n_ff;
      if (cfg->moe_latent > 0) {
        L.latent_down = get("ffn_latent_down.weight");
        L.latent_up = get("ffn_latent_up.weight");
      }
      const TensorView gate_up = allowed.moe_beside_dense ? get("ffn_gate_up_exps.weight") : TensorView{};
      if (gate_up.data) {  // each expert's gate rows, then its up rows
        std::vector<TensorView> fused;
        CACHET_RETURN_IF_ERROR(split_experts(gate_up, "ffn_gate_up_exps", d, 2 * ff, E, l, &fused));
        for (const TensorView& f : fused) {
          L.gate_exps.push_back(row_slice(f, 0, ff, "gate"));
          L.up_exps.push_back(row_slice(f, ff, ff, "up"));
        }
      } else {
        if (cfg->ffn_act != "relu2")  // (Nemotron-H's experts are not gated)
          CACHET_RETURN_IF_ERROR(split_experts(get("ffn_gate_exps.weight"), "ffn_gate_exps", d, ff, E, l, &L.gate_exps));
        CACHET_RETURN_IF_ERROR(split_experts(get("ffn_up_exps.weight"), "ffn_up_exps", d, ff, E, l, &L.up_exps));
      }
      CACHET_RETURN_IF_ERROR(split_experts(get("ffn_down_exps.weight"), "ffn_down_exps", ff, d, E, l, &L.down_exps));
      if (cfg->n_ff_shared > 0) {
        L.shexp_gate = get("ffn_gate_inp_shexp.weight");
        if (cfg->ffn_act != "relu2") L.shexp_w_gate = get("ffn_gate_shexp.weight");
        L.shexp_w_up = get("ffn_up_shexp.weight");
        L.shexp_w_down = get("ffn_down_shexp.weight");
      }
    } else if (allowed.fused_gate_up) {
      const TensorView up = get("ffn_up.weight");
      if (up.data && up.ne[1] != 2 * ffw)
        return invalid_argument("tensor '" + up.name + "' has " + std::to_string(up.ne[1]) + " rows, expected " +
                                std::to_string(2 * ffw) + " (gate then up)");
      if (up.data) {
        L.w_gate = row_slice(up, 0, ffw, "gate");
        L.w_up = row_slice(up, ffw, ffw, "up");
      }
      L.w_down = get("ffn_down.weight");
    } else {
      L.w_gate = get("ffn_gate.weight");
      L.w_up = get("ffn_up.weight");
      L.w_down = get("ffn_down.weight");
    }
    if (allowed.post_norms) L.post_ffn_norm = get("post_ffw_norm.weight");
    w.layers.push_back(std::move(L));
  }
  // Features are read off the first attention layer.
  int64_t first_attn = 0;
  while (first_attn + 1 < cfg->n_layer && !cfg->attends(first_attn)) ++first_attn;
  cfg->qkv_bias = !w.layers.empty() && w.layers[first_attn].bq.data;
  cfg->qk_norm = !w.layers.empty() && w.layers[first_attn].q_norm.data;
  cfg->post_norms = !w.layers.empty() && w.layers[0].post_attn_norm.data;
  cfg->attn_sinks = !w.layers.empty() && w.layers[first_attn].sinks.data;
  cfg->out_bias = !w.layers.empty() && w.layers[first_attn].bo.data;
  int64_t first_moe = 0;
  while (first_moe + 1 < cfg->n_layer && !cfg->is_moe(first_moe)) ++first_moe;
  cfg->expert_biases = !w.layers.empty() && w.layers[first_moe].router_logit_bias.data;
  if (allowed.need_qk_norm && !cfg->qk_norm) return not_found("missing tensor attn_q_norm.weight of layer 0");
  if (allowed.need_post_norms && !cfg->post_norms)
    return not_found("missing tensor post_attention_norm.weight of layer 0");
  return w;
}

Status validate_decoder_weights(const ModelConfig& c, DecoderWeights* w, std::vector<AlignedBuffer<float>>* owned) {
  CACHET_RETURN_IF_ERROR(check_tensor(w->tok_embd, "token_embd.weight", c.n_embd, c.n_vocab, -1));
  CACHET_RETURN_IF_ERROR(check_tensor(w->output, "output.weight", c.n_embd, c.n_vocab, -1));
  CACHET_RETURN_IF_ERROR(vector_to_f32(&w->output_norm, c.n_embd, owned, -1, "output_norm.weight"));
  if (c.mtp_head) {
    CACHET_RETURN_IF_ERROR(check_tensor(w->eh_proj, "nextn.eh_proj.weight", 2 * c.n_embd, c.n_embd, 0));
    CACHET_RETURN_IF_ERROR(vector_to_f32(&w->enorm, c.n_embd, owned, 0, "nextn.enorm.weight"));
    CACHET_RETURN_IF_ERROR(vector_to_f32(&w->hnorm, c.n_embd, owned, 0, "nextn.hnorm.weight"));
  }
  if (c.rope_freq_factors) CACHET_RETURN_IF_ERROR(vector_to_f32(&w->rope_freqs, c.rope_dim / 2, owned, -1, "rope_freqs"));
  if (static_cast<int64_t>(w->layers.size()) != c.n_layer)
    return invalid_argument("expected " + std::to_string(c.n_layer) + " layers of weights");
  if (c.n_embd_per_layer > 0) {
    const int64_t all = c.n_embd_per_layer * c.n_layer;
    CACHET_RETURN_IF_ERROR(check_tensor(w->pl_tok_embd, "per_layer_token_embd.weight", all, c.n_vocab, -1));
    CACHET_RETURN_IF_ERROR(check_tensor(w->pl_model_proj, "per_layer_model_proj.weight", c.n_embd, all, -1));
    CACHET_RETURN_IF_ERROR(vector_to_f32(&w->pl_proj_norm, c.n_embd_per_layer, owned, -1, "per_layer_proj_norm"));
  }
  if (w->cls_out.data) {
    CACHET_RETURN_IF_ERROR(check_tensor(w->cls_out, "cls.output.weight", c.n_embd, c.n_cls_out, -1));
    if (w->cls_out_b.data) CACHET_RETURN_IF_ERROR(vector_to_f32(&w->cls_out_b, c.n_cls_out, owned, -1, "cls.output.bias"));
  } else if (w->cls_out_b.data) {
    return invalid_argument("cls.output.bias without cls.output.weight");
  }
  if (w->dense_2.data || w->dense_3.data) {
    if (!w->dense_2.data || !w->dense_3.data) return invalid_argument("dense_2.weight and dense_3.weight come together");
    const int64_t n_dense = w->dense_2.ne[1];
    CACHET_RETURN_IF_ERROR(check_tensor(w->dense_2, "dense_2.weight", c.n_embd, n_dense, -1));
    CACHET_RETURN_IF_ERROR(check_tensor(w->dense_3, "dense_3.weight", n_dense, c.n_embd, -1));
  }
  for (int64_t l = 0; l < c.n_layer; ++l) {
    DecoderLayerWeights& L = w->layers[l];
    CACHET_RETURN_IF_ERROR(vector_to_f32(&L.attn_norm, c.n_embd, owned, l, "attn_norm"));
    if (c.has_ffn(l)) CACHET_RETURN_IF_ERROR(vector_to_f32(&L.ffn_norm, c.n_embd, owned, l, "ffn_norm"));
    if (c.is_short_conv(l)) {
      CACHET_RETURN_IF_ERROR(check_tensor(L.sc_in, "shortconv.in_proj", c.n_embd, 3 * c.n_embd, l));
      CACHET_RETURN_IF_ERROR(check_tensor(L.sc_out, "shortconv.out_proj", c.n_embd, c.n_embd, l));
      CACHET_RETURN_IF_ERROR(conv_taps_to_f32(c, &L.sc_conv, c.n_embd, owned, l, "shortconv.conv"));
    } else if (c.is_mamba2(l)) {
      CACHET_RETURN_IF_ERROR(validate_mamba2(c, &L, owned, l));
    } else if (c.is_recurrent(l)) {
      CACHET_RETURN_IF_ERROR(validate_gated_delta_net(c, &L, owned, l));
    } else if (c.is_mla()) {
      CACHET_RETURN_IF_ERROR(validate_mla_weights(c, &L, owned, l));
    } else if (c.attends(l)) {
      CACHET_RETURN_IF_ERROR(check_tensor(L.wq, "attn_q", c.n_embd, c.q_dim_at(l) * (c.attn_output_gate ? 2 : 1), l));
      if (c.has_own_kv(l)) {
        CACHET_RETURN_IF_ERROR(check_tensor(L.wk, "attn_k", c.n_embd, c.kv_dim_at(l), l));
        if (L.wv.data || !c.v_from_k) CACHET_RETURN_IF_ERROR(check_tensor(L.wv, "attn_v", c.n_embd, c.kv_dim_at(l), l));
      } else if (L.wk.data || L.wv.data) {
        return invalid_argument("layer " + std::to_string(l) + " reads an earlier layer's KV but has attn_k / attn_v");
      }
      CACHET_RETURN_IF_ERROR(check_tensor(L.wo, "attn_output", c.q_dim_at(l), c.n_embd, l));
    }
    const bool attends = c.attends(l), own_kv = c.has_own_kv(l);
    // A feature is all or nothing across layers: a file with it in some layers only is malformed.
    auto all_or_none = [&](TensorView* t, bool on, int64_t n, const char* what) -> Status {
      if (!on && t->data)
        return invalid_argument(std::string(what) + " of layer " + std::to_string(l) + " is present, not in layer 0");
      return on ? vector_to_f32(t, n, owned, l, what) : Status::ok();
    };
    CACHET_RETURN_IF_ERROR(all_or_none(&L.bq, c.qkv_bias && attends, c.q_dim_at(l), "attn_q.bias"));
    CACHET_RETURN_IF_ERROR(all_or_none(&L.bk, c.qkv_bias && own_kv, c.kv_dim_at(l), "attn_k.bias"));
    CACHET_RETURN_IF_ERROR(all_or_none(&L.bv, c.qkv_bias && own_kv, c.kv_dim_at(l), "attn_v.bias"));
    CACHET_RETURN_IF_ERROR(all_or_none(&L.q_norm, c.qk_norm && attends, c.head_dim_at(l), "attn_q_norm"));
    CACHET_RETURN_IF_ERROR(all_or_none(&L.k_norm, c.qk_norm && own_kv, c.head_dim_at(l), "attn_k_norm"));
    CACHET_RETURN_IF_ERROR(all_or_none(&L.out_scale, w->layers[0].out_scale.data != nullptr, 1, "layer_output_scale"));
    CACHET_RETURN_IF_ERROR(all_or_none(&L.pl_post_norm, c.n_embd_per_layer > 0, c.n_embd, "post_norm"));
    if (c.n_embd_per_layer > 0) {
      CACHET_RETURN_IF_ERROR(check_tensor(L.pl_gate, "inp_gate", c.n_embd, c.n_embd_per_layer, l));
      CACHET_RETURN_IF_ERROR(check_tensor(L.pl_proj, "proj", c.n_embd_per_layer, c.n_embd, l));
    }
    CACHET_RETURN_IF_ERROR(all_or_none(&L.post_attn_norm, c.post_norms, c.n_embd, "post_attention_norm"));
    CACHET_RETURN_IF_ERROR(all_or_none(&L.post_ffn_norm, c.post_norms, c.n_embd, "post_ffw_norm"));
    CACHET_RETURN_IF_ERROR(all_or_none(&L.sinks, c.attn_sinks && attends, c.n_head, "attn_sinks"));
    CACHET_RETURN_IF_ERROR(all_or_none(&L.bo, c.out_bias && attends, c.n_embd, "attn_output.bias"));
    if (!c.has_ffn(l)) continue;
    if (c.is_moe(l) && c.moe_beside_dense) {
      CACHET_RETURN_IF_ERROR(vector_to_f32(&L.router_scale, c.n_embd, owned, l, "ffn_gate_inp.scale"));
      if (L.down_exps_scale.data)
        CACHET_RETURN_IF_ERROR(vector_to_f32(&L.down_exps_scale, c.n_expert, owned, l, "ffn_down_exps.scale"));
      CACHET_RETURN_IF_ERROR(vector_to_f32(&L.pre_moe_norm, c.n_embd, owned, l, "pre_ffw_norm_2"));
      CACHET_RETURN_IF_ERROR(vector_to_f32(&L.post_dense_norm, c.n_embd, owned, l, "post_ffw_norm_1"));
      CACHET_RETURN_IF_ERROR(vector_to_f32(&L.post_moe_norm, c.n_embd, owned, l, "post_ffw_norm_2"));
      CACHET_RETURN_IF_ERROR(check_tensor(L.w_gate, "ffn_gate", c.n_embd, c.n_ff_dense, l));
      CACHET_RETURN_IF_ERROR(check_tensor(L.w_up, "ffn_up", c.n_embd, c.n_ff_dense, l));
      CACHET_RETURN_IF_ERROR(check_tensor(L.w_down, "ffn_down", c.n_ff_dense, c.n_embd, l));
    }
    if (c.is_moe(l)) {
      CACHET_RETURN_IF_ERROR(check_tensor(L.router, "ffn_gate_inp", c.n_embd, c.n_expert, l));
      // Per-expert biases: a [width, n_expert] matrix each, read as one f32 vector (expert e's at e * width).
      auto expert_bias = [&](TensorView* t, int64_t width, const char* what) -> Status {
        if (!c.expert_biases || !t->data) return all_or_none(t, c.expert_biases, width * c.n_expert, what);
        CACHET_RETURN_IF_ERROR(check_tensor(*t, what, width, c.n_expert, l));
        t->ne = {width * c.n_expert, 1, 1, 1};
        t->row_bytes = t->ne[0] * traits(t->type).block_bytes;
        return vector_to_f32(t, t->ne[0], owned, l, what);
      };
      CACHET_RETURN_IF_ERROR(all_or_none(&L.router_logit_bias, c.expert_biases, c.n_expert, "ffn_gate_inp.bias"));
      CACHET_RETURN_IF_ERROR(expert_bias(&L.gate_exps_b, c.n_ff, "ffn_gate_exps.bias"));
      CACHET_RETURN_IF_ERROR(expert_bias(&L.up_exps_b, c.n_ff, "ffn_up_exps.bias"));
      CACHET_RETURN_IF_ERROR(expert_bias(&L.down_exps_b, c.n_embd, "ffn_down_exps.bias"));
      if (L.router_bias.data) CACHET_RETURN_IF_ERROR(vector_to_f32(&L.router_bias, c.n_expert, owned, l, "ffn_exp_probs_b"));
      const int64_t ed = c.moe_latent > 0 ? c.moe_latent : c.n_embd;  // the experts' width
      if (c.moe_latent > 0) {
        CACHET_RETURN_IF_ERROR(check_tensor(L.latent_down, "ffn_latent_down", c.n_embd, ed, l));
        CACHET_RETURN_IF_ERROR(check_tensor(L.latent_up, "ffn_latent_up", ed, c.n_embd, l));
      }
      for (int64_t e = 0; e < c.n_expert; ++e) {
        if (!L.gate_exps.empty())
          CACHET_RETURN_IF_ERROR(check_tensor(L.gate_exps[e], "ffn_gate_exps", ed, c.n_ff, l));
        CACHET_RETURN_IF_ERROR(check_tensor(L.up_exps[e], "ffn_up_exps", ed, c.n_ff, l));
        CACHET_RETURN_IF_ERROR(check_tensor(L.down_exps[e], "ffn_down_exps", c.n_ff, ed, l));
      }
      if (c.n_ff_shared > 0) {
        if (L.shexp_gate.data) CACHET_RETURN_IF_ERROR(check_tensor(L.shexp_gate, "ffn_gate_inp_shexp", c.n_embd, 1, l));
        if (c.ffn_act != "relu2")
          CACHET_RETURN_IF_ERROR(check_tensor(L.shexp_w_gate, "ffn_gate_shexp", c.n_embd, c.n_ff_shared, l));
        CACHET_RETURN_IF_ERROR(check_tensor(L.shexp_w_up, "ffn_up_shexp", c.n_embd, c.n_ff_shared, l));
        CACHET_RETURN_IF_ERROR(check_tensor(L.shexp_w_down, "ffn_down_shexp", c.n_ff_shared, c.n_embd, l));
      }
    } else {
      const int64_t ffw = c.ffn_width(l);
      if (c.ffn_act == "relu2" && L.w_gate.data)  // not gated
        return invalid_argument("layer " + std::to_string(l) + " has ffn_gate, which a ReLU^2 FFN does not take");
      if (c.ffn_act != "relu2") CACHET_RETURN_IF_ERROR(check_tensor(L.w_gate, "ffn_gate", c.n_embd, ffw, l));
      CACHET_RETURN_IF_ERROR(check_tensor(L.w_up, "ffn_up", c.n_embd, ffw, l));
      CACHET_RETURN_IF_ERROR(check_tensor(L.w_down, "ffn_down", ffw, c.n_embd, l));
    }
  }
  return Status::ok();
}

Result<SpecialTokens> read_special_tokens(const GgufFile& f, int64_t n_vocab) {
  SpecialTokens sp;
  auto special = [&](const char* key, std::optional<int32_t>* out) -> Status {
    const std::string k = std::string("tokenizer.ggml.") + key + "_token_id";
    if (!f.find(k)) return Status::ok();
    CACHET_ASSIGN_OR_RETURN(uint64_t id, f.get_uint(k));
    if (id >= static_cast<uint64_t>(n_vocab))
      return invalid_argument(k + " = " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(n_vocab));
    *out = static_cast<int32_t>(id);
    return Status::ok();
  };
  CACHET_RETURN_IF_ERROR(special("bos", &sp.bos));
  CACHET_RETURN_IF_ERROR(special("eos", &sp.eos));
  CACHET_RETURN_IF_ERROR(special("eot", &sp.eot));
  CACHET_RETURN_IF_ERROR(special("padding", &sp.pad));
  CACHET_RETURN_IF_ERROR(special("unknown", &sp.unk));
  if (const GgufValue* toks = f.find("tokenizer.ggml.tokens"); toks && toks->type == GgufType::kArray) {
    if (static_cast<int64_t>(toks->count) != n_vocab)
      return invalid_argument("tokenizer has " + std::to_string(toks->count) + " tokens but the model " +
                              std::to_string(n_vocab) + " embedding rows");
  }
  return sp;
}

Result<std::unique_ptr<Model>> load_decoder_from_gguf(std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool,
                                                      const LoadOptions& opts, const ArchCustomize& customize) {
  CACHET_ASSIGN_OR_RETURN(std::string arch, f->get_string("general.architecture"));
  ArchReader r(*f, arch);
  CACHET_ASSIGN_OR_RETURN(ModelConfig cfg, r.base_config());
  // Every layer has tensors of its own: more layers than the file has tensors is a lie, refused before
  // anything is sized or looped by it (found by fuzz_gguf).
  if (cfg.n_layer > static_cast<int64_t>(f->tensors().size()))
    return invalid_argument(arch + ".block_count is " + std::to_string(cfg.n_layer) + " but the file has only " +
                            std::to_string(f->tensors().size()) + " tensors");
  DecoderTensors allowed;
  CACHET_RETURN_IF_ERROR(customize(r, &cfg, &allowed));
  CACHET_RETURN_IF_ERROR(cfg.validate());
  CACHET_ASSIGN_OR_RETURN(DecoderWeights w, read_decoder_weights(r, &cfg, allowed));
  CACHET_RETURN_IF_ERROR(r.finish());
  CACHET_ASSIGN_OR_RETURN(SpecialTokens sp, read_special_tokens(*f, cfg.n_vocab));
  std::vector<TensorView> all;
  for (const auto& ti : f->tensors()) all.push_back(view_of_tensor(&ti));
  return make_decoder_model(std::move(cfg), std::move(w), std::move(all), sp, nullptr, std::move(f), std::move(pool),
                            opts);
}

}  // namespace cachet
