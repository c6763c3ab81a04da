// The decoder-only transformer every supported architecture is an instance of: token embedding (optionally
// scaled), then per layer RMSNorm -> attention (GQA, RoPE, optional Q/K/V biases, per-head Q/K norms,
// sliding window, soft-capping) -> optional post-norm -> residual, RMSNorm -> gated FFN (SiLU or GELU) or a
// mixture of experts -> optional post-norm -> residual; final RMSNorm and head (optionally soft-capped).
// Architecture files (llama.cc, qwen2.cc, ...) read their GGUF files into a ModelConfig and DecoderWeights;
// the forward pass decides by what the config and weights hold, never by the architecture's name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "model/model.h"

namespace cachet {

class ArchReader;

struct DecoderLayerWeights {
  TensorView attn_norm;       // [n_embd] f32
  TensorView wq;              // [n_embd, n_head * head_dim] (a view into attn_qkv when the file fuses them)
  TensorView wk;              // [n_embd, n_head_kv * head_dim]
  TensorView wv;              // [n_embd, n_head_kv * head_dim]
  TensorView bq, bk, bv;      // optional biases [q_dim], [kv_dim], [kv_dim] f32
  TensorView q_norm, k_norm;  // optional per-head RMSNorm weights [head_dim] f32
  TensorView wo;              // [n_head * head_dim, n_embd]
  TensorView bo;              // optional [n_embd] f32 (attn_output.bias)
  TensorView sinks;           // optional [n_head] f32: attention sinks (attn_sinks.weight)
  TensorView post_attn_norm;  // optional [n_embd] f32
  // Multi-head latent attention (cfg.is_mla(), model/mla.h): Q from wq (attn_q, or attn_q_b after wq_a and
  // its norm), the latent and the shared rotated key from wkv_a, per head the key and value decompressions.
  TensorView wq_a;            // [n_embd, q_lora_rank] (attn_q_a), optional
  TensorView q_a_norm;        // [q_lora_rank] f32
  TensorView wkv_a;           // [n_embd, kv_lora_rank + rope_dim] (attn_kv_a_mqa)
  TensorView kv_a_norm;       // [kv_lora_rank] f32
  std::vector<TensorView> k_b;  // n_head views of [nope dims, kv_lora_rank] (attn_k_b): q_nope -> the latent
  std::vector<TensorView> v_b;  // n_head views of [kv_lora_rank, mla_v_dim] (attn_v_b): the latent -> a value head
  TensorView ffn_norm;        // [n_embd] f32
  TensorView w_gate;          // [n_embd, n_ff] (dense FFN; a view into ffn_up when the file fuses gate|up)
  TensorView w_up;            // [n_embd, n_ff]
  TensorView w_down;          // [n_ff, n_embd]
  TensorView post_ffn_norm;   // optional [n_embd] f32
  TensorView out_scale;       // optional [1] f32: the layer's output (the residual stream) times this
  // Per-layer embeddings (cfg.n_embd_per_layer > 0): x += post_norm(proj(gelu(inp_gate x) * this layer's input)).
  TensorView pl_gate;         // [n_embd, n_embd_per_layer] (inp_gate)
  TensorView pl_proj;         // [n_embd_per_layer, n_embd] (proj)
  TensorView pl_post_norm;    // [n_embd] f32 (post_norm)
  // A dense MLP beside the experts (cfg.moe_beside_dense): it reads ffn_norm(x) through w_gate / w_up / w_down
  // (n_ff_dense wide) and is post-normed by post_dense_norm; the experts read pre_moe_norm(x), are routed by
  // router(rms(x) / sqrt(n_embd) * router_scale), scaled per expert by down_exps_scale, post-normed by
  // post_moe_norm; the two are summed.
  TensorView router_scale;     // [n_embd] f32 (ffn_gate_inp.scale)
  TensorView down_exps_scale;  // [n_expert] f32 (ffn_down_exps.scale)
  TensorView pre_moe_norm, post_dense_norm, post_moe_norm;  // [n_embd] f32 (pre_ffw_norm_2, post_ffw_norm_1, _2)
  // Mixture of experts (cfg.is_moe(l)) instead of w_gate / w_up / w_down.
  TensorView router;                    // [n_embd, n_expert]
  TensorView router_bias;               // [n_expert] f32, optional: a selection bias (exp_probs_b.bias)
  TensorView router_logit_bias;         // [n_expert] f32, optional: added to the logits (ffn_gate_inp.bias)
  TensorView gate_exps_b, up_exps_b;    // optional [n_ff, n_expert] f32 (ffn_{gate,up}_exps.bias)
  TensorView down_exps_b;               // optional [n_embd, n_expert] f32 (ffn_down_exps.bias)
  std::vector<TensorView> gate_exps;    // n_expert views of [n_embd, n_ff]
  std::vector<TensorView> up_exps;      // n_expert views of [n_embd, n_ff]
  std::vector<TensorView> down_exps;    // n_expert views of [n_ff, n_embd]
  // Experts in a latent width (cfg.moe_latent > 0; their views' n_embd is it): the input projected down to it,
  // their weighted sum back up.
  TensorView latent_down;  // [n_embd, moe_latent] (ffn_latent_down)
  TensorView latent_up;    // [moe_latent, n_embd] (ffn_latent_up)
  // A shared expert beside the routed ones (cfg.n_ff_shared > 0), its output times sigmoid(x . shexp_gate).
  TensorView shexp_gate;  // [n_embd, 1] (optional)
  TensorView shexp_w_gate, shexp_w_up;  // [n_embd, n_ff_shared]
  TensorView shexp_w_down;              // [n_ff_shared, n_embd]
  // A gated delta net (cfg.is_recurrent(l)) in place of the attention tensors (model/gated_delta_net.h).
  TensorView ssm_qkv;     // [n_embd, conv_dim] q | k | v before the conv (attn_qkv)
  TensorView ssm_z;       // [n_embd, value_dim] the output gate (attn_gate)
  TensorView ssm_conv;    // [conv_kernel, conv_dim] f32 conv taps, oldest first
  TensorView ssm_dt;      // [v_heads] f32 decay bias
  TensorView ssm_a;       // [v_heads] f32 -exp(A_log)
  TensorView ssm_beta;    // [n_embd, v_heads]
  TensorView ssm_alpha;   // [n_embd, v_heads]
  TensorView ssm_norm;    // [ssm_head_dim] f32
  TensorView ssm_out;     // [value_dim, n_embd]
  // Mamba-2 (cfg.is_mamba2(l)) in place of attention (model/mamba2.h): ssm_conv over x | B | C, ssm_dt, ssm_a,
  // ssm_norm (d_inner wide, per group) and ssm_out as above, and these.
  TensorView ssm_in;      // [n_embd, 2 d_inner + 2 groups state + heads] z | x B C | dt
  TensorView ssm_conv_b;  // optional [conv_dim] f32 the conv's bias
  TensorView ssm_d;       // [heads] f32 the skip D
  // LFM2's short conv (cfg.is_short_conv(l)) in place of attention (model/short_conv.h).
  TensorView sc_in;       // [n_embd, 3 n_embd] B | C | x (shortconv.in_proj)
  TensorView sc_conv;     // [conv_kernel, n_embd] f32 taps, oldest first (shortconv.conv)
  TensorView sc_out;      // [n_embd, n_embd] (shortconv.out_proj)
};

struct DecoderWeights {
  TensorView tok_embd;     // [n_embd, n_vocab]
  TensorView output_norm;  // [n_embd] f32
  TensorView output;       // [n_embd, n_vocab]; equals tok_embd when tied
  TensorView rope_freqs;   // optional [rope_dim / 2] f32: each pair's frequency is divided by its factor (the
                           // global layers')
  // Per-layer embeddings (cfg.n_embd_per_layer > 0): layer l's input for a token is
  // (rms_norm(pl_model_proj(x0) / sqrt(n_embd))[l] + pl_tok_embd[token][l] * sqrt(width)) / sqrt(2).
  TensorView pl_tok_embd;     // [n_embd_per_layer * n_layer, n_vocab] (per_layer_token_embd)
  TensorView pl_model_proj;   // [n_embd, n_embd_per_layer * n_layer] (per_layer_model_proj)
  TensorView pl_proj_norm;    // [n_embd_per_layer] f32 (per_layer_proj_norm)
  std::vector<DecoderLayerWeights> layers;
  // Embedding models' heads on a pooled vector (Model::pooled_head), all optional.
  TensorView cls_out;      // [n_embd, n_cls_out]: a causal reranker's classifier (Qwen3-Reranker: yes / no)
  TensorView cls_out_b;    // [n_cls_out] f32
  TensorView dense_2;      // [n_embd, n_dense]: sentence-transformers' projections (EmbeddingGemma) ...
  TensorView dense_3;      // [n_dense, n_embd]: ... and back
  std::vector<AlignedBuffer<uint8_t>> regrouped;  // rows of fused tensors copied into the order a view needs
  // A multi-token-prediction head (cfg.mtp_head): its input x = eh_proj(enorm(embedding) | hnorm(trunk hidden)).
  // Its own embedding, output norm and head (nextn.embed_tokens, shared_head_norm, shared_head_head) replace
  // tok_embd, output_norm and output where the file has them.
  TensorView eh_proj;  // [2 n_embd, n_embd]
  TensorView enorm;    // [n_embd] f32
  TensorView hnorm;    // [n_embd] f32
};

// Which of the optional tensors an architecture's files carry (the rest of its file is an error).
struct DecoderTensors {
  bool qkv_bias = false;       // attn_{q,k,v}.bias
  bool qk_norm = false;        // attn_{q,k}_norm.weight
  bool post_norms = false;     // post_attention_norm.weight, post_ffw_norm.weight
  bool fused_qkv = false;      // attn_qkv.weight may replace attn_{q,k,v}
  bool fused_gate_up = false;  // ffn_up.weight [n_embd, 2 n_ff] holds gate then up; no ffn_gate
  bool rope_freqs = false;     // rope_freqs.weight
  bool classifier = false;     // cls.output.weight / .bias (a reranker)
  bool dense_out = false;      // dense_2.weight, dense_3.weight (projections of the pooled embedding)
  bool fused_ba = false;       // ssm_ba.weight: beta then alpha rows per key head (Qwen3-Next)
  bool legacy_ssm_in = false;  // ssm_in.weight: q, k, v, z rows per key head (Qwen3-Next's first files)
  bool nextn = false;          // layer 0's nextn.* tensors (a multi-token-prediction head)
  bool router_bias = false;    // exp_probs_b.bias: the MoE router's selection bias
  bool attn_sinks = false;     // attn_sinks.weight
  bool out_bias = false;       // attn_output.bias
  bool expert_biases = false;  // ffn_gate_inp.bias, ffn_{gate,up,down}_exps.bias
  bool layer_out_scale = false;  // layer_output_scale.weight
  bool per_layer_embd = false;   // per_layer_{token_embd,model_proj,proj_norm}, blk.*.{inp_gate,proj,post_norm}
  bool moe_beside_dense = false;  // ffn_gate_inp.scale, {pre,post}_ffw_norm_{1,2}, ffn_gate_up_exps, .._exps.scale
  const char* ffn_norm = "ffn_norm.weight";  // the FFN's input norm (Qwen3.5: post_attention_norm.weight)
  const char* output_norm = "output_norm.weight";  // the final norm (LFM2's files: token_embd_norm.weight)
  bool need_qk_norm = false;   // the architecture cannot run without them
  bool need_post_norms = false;
};

// Multi-token-prediction blocks (`nextn_predict_layers`, after the trunk's; Qwen3.5, GLM-4.7-Flash): loading the
// trunk, c->n_layer drops them and their tensors are read past, not run; loading the head (mtp_head), the trunk's
// tensors are read past, the first block becomes layer 0 (later ones read past, as llama.cpp runs one) with its
// nextn.* tensors (allowed->nextn), c->mtp_head set. The architecture then sizes the head's one layer.
Status take_mtp_blocks(ArchReader& r, ModelConfig* c, DecoderTensors* allowed, bool mtp_head);

// Reads the standard GGUF tensor names (llama.cpp's) of every layer into weights, splits fused matrices and
// experts into views, and records the features found in cfg (qkv_bias, qk_norm, post_norms, rope_freq_factors).
Result<DecoderWeights> read_decoder_weights(ArchReader& r, ModelConfig* cfg, const DecoderTensors& allowed);

// A forward batch's lists, token ids, positions, slots, blocks and copies against a model of config `cfg`
// (a batch may come from another rank's bytes).
// embeddings_in: whether the model reads ForwardBatch::input_embd / embd_row / attn_end (else they must be empty).
Status check_forward_batch(const ModelConfig& cfg, const ForwardBatch& b, bool embeddings_in = false);

// Rows [r0, r0 + n) of a matrix, as a matrix of its own (fused Q|K|V, gate|up); `part` names it.
TensorView row_slice(const TensorView& t, int64_t r0, int64_t n, const char* part);
// Elements [e0, e0 + n) of a 1-D weight (F32 / F16 / BF16), as a vector of its own (a fused bias).
TensorView elem_slice(const TensorView& t, int64_t e0, int64_t n, const char* part);

// A weight's checks: present, shaped [ne0, ne1], aligned, of a type cachet computes with (layer < 0: global).
Status check_tensor(const TensorView& t, const std::string& what, int64_t ne0, int64_t ne1, int64_t layer);
// A 1-D weight (norm, bias) of n values as f32: converted into `owned` when stored as F16 / BF16.
Status vector_to_f32(TensorView* t, int64_t n, std::vector<AlignedBuffer<float>>* owned, int64_t layer,
                     const std::string& what);

// n_expert matrices of [ne0, ne1] stacked in a 3-D tensor, one view each (layer: for the error message).
Status split_experts(const TensorView& t, const std::string& what, int64_t ne0, int64_t ne1, int64_t n_expert,
                     int64_t layer, std::vector<TensorView>* out);

// Checks every weight's shape and type against the config; 1-D weights stored as F16/BF16 are converted to
// f32 into `owned`.
Status validate_decoder_weights(const ModelConfig& cfg, DecoderWeights* w, std::vector<AlignedBuffer<float>>* owned);

// Builds the model over weights that live in `storage` or in `gguf` (kept alive by the model).
Result<std::unique_ptr<Model>> make_decoder_model(ModelConfig cfg, DecoderWeights weights,
                                                  std::vector<TensorView> all_tensors, SpecialTokens special,
                                                  std::shared_ptr<void> storage, std::unique_ptr<GgufFile> gguf,
                                                  std::shared_ptr<ThreadPool> pool, const LoadOptions& opts);

// The special tokens of a GGUF file's tokenizer, checked against the vocabulary.
Result<SpecialTokens> read_special_tokens(const GgufFile& f, int64_t n_vocab);

// An architecture's factory from its config reader: reads the base config, lets `customize` add the
// architecture's own keys and tensors, then validates and builds (the shared part of every arch file).
using ArchCustomize = std::function<Status(ArchReader& r, ModelConfig* cfg, DecoderTensors* allowed)>;
Result<std::unique_ptr<Model>> load_decoder_from_gguf(std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool,
                                                      const LoadOptions& opts, const ArchCustomize& customize);

}  // namespace cachet
