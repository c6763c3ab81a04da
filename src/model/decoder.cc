#include "model/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "io/gguf.h"
#include "kernels/kernels.h"
#include "model/mla.h"
#include "model/moe.h"
#include "model/mrope.h"
#include "model/ops.h"
#include "model/recurrent_mixer.h"

namespace cachet {

namespace {

// Gated activations of at most this many elements run on the calling thread (SmolLM2's 1536 per decoded token:
// ~1 us of work against a few us for a parallel region's hand-off and join).
constexpr int64_t kInlineActivation = 4096;

class DecoderModel final : public Model {
 public:
  DecoderModel(ModelConfig cfg, DecoderWeights w, std::vector<TensorView> all, SpecialTokens special,
             std::shared_ptr<void> storage, std::unique_ptr<GgufFile> gguf, std::shared_ptr<ThreadPool> pool,
             std::vector<AlignedBuffer<float>> owned, std::vector<AlignedBuffer<uint8_t>> packed,
             std::shared_ptr<TpReducer> reducer, TpLayout tp, int64_t logit_rows)
      : cfg_(std::move(cfg)), w_(std::move(w)), all_(std::move(all)), special_(special),
        storage_(std::move(storage)), gguf_(std::move(gguf)), pool_(std::move(pool)), owned_(std::move(owned)),
        packed_(std::move(packed)), reducer_(std::move(reducer)), tp_(std::move(tp)), logit_rows_(logit_rows) {
    const float* factors = cfg_.rope_freq_factors ? reinterpret_cast<const float*>(w_.rope_freqs.data) : nullptr;
    rope_ = rope_freqs(cfg_, false, factors);
    rope_swa_ = rope_freqs(cfg_, true, nullptr);  // rope_freqs are the global layers' (Gemma 4's proportional RoPE)
    if (!cfg_.rope_sections.empty()) mrope_pairs_ = mrope_pair_sections(cfg_.rope_sections, cfg_.rope_dim / 2, cfg_.mrope_interleaved);
  }

  const ModelConfig& config() const override { return cfg_; }
  const std::vector<TensorView>& tensors() const override { return all_; }
  const SpecialTokens& special_tokens() const override { return special_; }
  const GgufFile* gguf() const override { return gguf_.get(); }
  ThreadPool& pool() override { return *pool_; }

  Status forward(const ForwardBatch& batch, float* logits, float* hidden = nullptr) override;
  int64_t pooled_dim(Pooling p) const override { return p == Pooling::kRank ? cfg_.n_cls_out : cfg_.n_embd; }
  Status pooled_head(const float* pooled, Pooling p, float* out) override;
  Status accepts_image_rows(bool both_ways, int64_t deepstack_rows, bool mrope) const override {
    if (deepstack_rows != cfg_.n_deepstack_layers)
      return invalid_argument("the projector gives " + std::to_string(deepstack_rows) + " deepstack rows per image "
                              "row; the model takes " + std::to_string(cfg_.n_deepstack_layers));
    if (mrope && cfg_.rope_sections.empty())
      return invalid_argument("the projector places images by M-RoPE positions; the model has no M-RoPE sections");
    if (both_ways && cfg_.is_mla())
      return unimplemented("an image's two-way attention in an MLA model's latent attention");
    return Status::ok();
  }

 private:
  void ensure_scratch(int n_tokens);
  // The batch as its `r`-th recurrent layer reads it (positions, sequences, state slots, snapshot slots).
  RecurrentBatch recurrent_batch(const ForwardBatch& batch, int r, int T);
  // The shared expert of a MoE layer on xn_, added to proj_.
  void shared_expert(const DecoderLayerWeights& L, int T);
  // Per-layer embeddings: every layer's input for the batch's tokens into pl_in_ (x_ holds the embeddings).
  void per_layer_inputs(const ForwardBatch& batch, int T);
  // Layer l's per-layer embedding block on x_, added to x_.
  void per_layer_block(int64_t l, int T);
  // Gemma 4's MoE block on x_ into proj_: a dense MLP beside the experts, each post-normed, summed.
  void moe_beside_dense(const DecoderLayerWeights& L, int T);

  ModelConfig cfg_;
  DecoderWeights w_;
  std::vector<TensorView> all_;
  SpecialTokens special_;
  std::shared_ptr<void> storage_;
  std::unique_ptr<GgufFile> gguf_;
  std::shared_ptr<ThreadPool> pool_;
  std::vector<AlignedBuffer<float>> owned_;          // f32 copies of norm weights stored in other types
  std::vector<AlignedBuffer<uint8_t>> packed_;       // repacked matmul weights (kernels/packed.h)
  std::shared_ptr<TpReducer> reducer_;               // tensor parallel: joins the shards' outputs
  TpLayout tp_;                                      // every rank's share (model/tp_shard.h)
  RopeFreqs rope_, rope_swa_;                        // per-pair frequencies: global, sliding-window layers
  int64_t logit_rows_;                               // head rows computed (LoadOptions::logit_rows; 0: all)
  std::vector<int8_t> mrope_pairs_;                  // M-RoPE: the position each rotary pair turns with

  // Activations for the current batch (n_tokens rows each).
  int scratch_tokens_ = 0;
  AlignedBuffer<float> x_;        // [n_tokens, n_embd] residual stream
  AlignedBuffer<float> xn_;       // [n_tokens, n_embd] normalized
  AlignedBuffer<float> q_;        // [n_tokens, q_dim]
  AlignedBuffer<float> k_;        // [n_tokens, kv_dim]
  AlignedBuffer<float> v_;        // [n_tokens, kv_dim]
  AlignedBuffer<float> attn_;     // [n_tokens, q_dim]
  AlignedBuffer<float> proj_;     // [n_tokens, n_embd]
  AlignedBuffer<float> gate_;     // [n_tokens, n_ff]
  AlignedBuffer<float> up_;       // [n_tokens, n_ff]
  AlignedBuffer<float> cos_sin_;      // [n_tokens, rope_dim] global layers
  AlignedBuffer<float> cos_sin_swa_;  // [n_tokens, rope_dim] sliding-window layers (their own RoPE base)
  AlignedBuffer<float> router_;       // [n_tokens, n_expert]
  AlignedBuffer<float> qg_;           // [n_tokens, n_head, 2, head_dim] Q and its output gate, per head
  RecurrentMixer mixer_;              // a hybrid's recurrent layers (gated delta nets, short convs, Mamba-2)
  MlaAttention mla_;                  // multi-head latent attention's layers
  AlignedBuffer<float> sh_gate_, sh_up_;  // [n_tokens, n_ff_shared] shared expert
  AlignedBuffer<float> sh_out_;           // [n_tokens, n_embd]
  AlignedBuffer<float> sh_w_;             // [n_tokens] its gate logit
  AlignedBuffer<float> eh_in_;            // [n_tokens, 2 n_embd] an MTP head's input: enorm(embedding) | hnorm(h)
  AlignedBuffer<float> pl_in_;            // [n_tokens, n_layer, n_embd_per_layer] per-layer embedding inputs
  AlignedBuffer<float> pl_g_;             // [n_tokens, n_embd_per_layer] a layer's gated per-layer input
  AlignedBuffer<float> aux_;              // [n_tokens, n_embd] a dense MLP's output beside the experts
  AlignedBuffer<float> lat_in_, lat_out_;  // [n_tokens, moe_latent] experts' input and output in a latent width
  std::vector<float> pl_row_;             // [n_layer * n_embd_per_layer] one token's per-layer embedding row
  std::vector<StateSlot> snapshot_of_;    // [n_tokens] the checkpoint slot taking the state after it, or -1
  std::vector<KvView> views_;         // [n_seqs] the batch's sequences as attention reads them
  std::vector<int32_t> ends_;         // [n_tokens] bidirectional: the last position of each token's sequence
  std::vector<float> dense_;          // [n_dense] a pooled vector between the dense projections
  // Tensor parallel, exact mode: every rank's attention output / FFN activations, and this rank's output rows.
  AlignedBuffer<float> attn_full_;    // [n_tokens, q_dim of the whole model]
  AlignedBuffer<float> act_full_;     // [n_tokens, n_ff of the whole model]
  AlignedBuffer<float> part_;         // [n_tokens, this rank's output rows]
  std::vector<float> head_part_;      // [rows wanting logits, this rank's vocabulary rows]

  // proj_ = the output projection `w` of `in` (this rank's [T, n_in] share), joined over the ranks.
  void project(const TensorView& w, float* in, const std::vector<int64_t>& in_widths, float* in_full, int T);
};

void DecoderModel::ensure_scratch(int n) {
  if (n <= scratch_tokens_) return;
  scratch_tokens_ = n;
  x_.resize(n * cfg_.n_embd);
  xn_.resize(n * cfg_.n_embd);
  q_.resize(n * cfg_.max_q_dim());
  k_.resize(n * cfg_.max_kv_dim());
  v_.resize(n * cfg_.max_kv_dim());
  attn_.resize(n * cfg_.max_q_dim());
  proj_.resize(n * cfg_.n_embd);
  gate_.resize(n * cfg_.max_ffn_width());
  up_.resize(n * cfg_.max_ffn_width());
  cos_sin_.resize(n * cfg_.rope_dim);
  cos_sin_swa_.resize(n * std::max(cfg_.rope_dim, cfg_.rope_dim_swa));
  if (cfg_.n_embd_per_layer > 0) {
    pl_in_.resize(n * cfg_.n_layer * cfg_.n_embd_per_layer);
    pl_g_.resize(n * cfg_.n_embd_per_layer);
  }
  if (cfg_.moe_beside_dense) aux_.resize(n * cfg_.n_embd);
  if (cfg_.moe_latent > 0) {
    lat_in_.resize(n * cfg_.moe_latent);
    lat_out_.resize(n * cfg_.moe_latent);
  }
  router_.resize(n * std::max<int64_t>(cfg_.n_expert, 1));
  if (cfg_.attn_output_gate) qg_.resize(n * 2 * cfg_.q_dim());
  mixer_.reserve(cfg_, n);
  mla_.reserve(cfg_, n);
  if (cfg_.mtp_head) eh_in_.resize(n * 2 * cfg_.n_embd);
  if (cfg_.n_ff_shared > 0) {
    sh_gate_.resize(n * cfg_.n_ff_shared);
    sh_up_.resize(n * cfg_.n_ff_shared);
    sh_out_.resize(n * cfg_.n_embd);
    sh_w_.resize(n);
  }
  if (tp_.exact) {
    attn_full_.resize(n * tp_.q_full);
    act_full_.resize(n * tp_.ff_full);
    part_.resize(n * cfg_.n_embd);
  }
}

void DecoderModel::project(const TensorView& w, float* in, const std::vector<int64_t>& in_widths, float* in_full,
                           int T) {
  if (!reducer_) {
    matmul(*pool_, w, in, T, proj_.data());
  } else if (!tp_.exact) {
    matmul(*pool_, w, in, T, proj_.data());       // this rank's columns: a partial sum
    reducer_->sum(proj_.data(), T * cfg_.n_embd);  // ... of every rank's, in rank order
  } else {
    reducer_->gather(in, T, in_widths, in_full);   // the whole input, bitwise as on one rank
    matmul(*pool_, w, in_full, T, part_.data());   // this rank's output rows, whole dot products
    reducer_->gather(part_.data(), T, tp_.d_widths, proj_.data());
  }
}

Status DecoderModel::forward(const ForwardBatch& batch, float* logits, float* hidden) {
  CACHET_RETURN_IF_ERROR(check_forward_batch(cfg_, batch, /*embeddings_in=*/true));
  if (!batch.attn_end.empty() && cfg_.is_mla())
    return unimplemented("an image's two-way attention in an MLA model's latent attention");
  for (const KvBlockCopy& cp : batch.copies) batch.kv->copy_block(cp);  // copy-on-write, before any write
  for (auto [src, dst] : batch.state_copies) batch.state->copy(src, dst);  // forks of recurrent states
  const int T = batch.n_tokens();
  if (T == 0) return Status::ok();
  views_.clear();
  for (int i = 0; i < batch.n_seqs(); ++i) views_.push_back(batch.view(i));
  ensure_scratch(T);
  ThreadPool& pool = *pool_;
  const Kernels& kern = kernels();
  const ModelConfig& c = cfg_;
  const int64_t d = c.n_embd, ff = c.n_ff;
  const float eps = static_cast<float>(c.rms_eps);
  const int64_t H = c.n_head;
  const Glu act = glu_of(c.ffn_act);

  if (tracer_) {
    tracer_->begin_forward(T, batch.positions[0], static_cast<int>(c.n_layer));
    tracer_->op({"embed", w_.tok_embd.name, dtype_name(w_.tok_embd.type), w_.tok_embd.shape(), {T}, {T, d},
                 c.embd_scale != 1.0 ? "token ids -> rows of the embedding, times " + std::to_string(c.embd_scale)
                                     : "token ids -> rows of the embedding"});
  }
  // Layer 0's ops are reported; the others repeat them.
  auto trace = [&](int64_t l, TraceOp op) {
    if (tracer_ && l == 0) tracer_->op(std::move(op));
  };
  auto trace_mm = [&](int64_t l, const TensorView& w, int64_t n_in, int64_t n_out, const char* note) {
    trace(l, {"matmul", w.name, dtype_name(w.type), w.shape(), {T, n_in}, {T, n_out}, note});
  };
  // x += a block's output (Granite: times residual_scale).
  const float rs = static_cast<float>(c.residual_scale);
  const std::string residual_note = rs != 1.0f ? " * " + std::to_string(c.residual_scale) : "";
  // Over the threads by rows when the batch is large enough to pay for a parallel region (the same operation
  // per element either way).
  auto over_rows = [&](int64_t n_rows, int64_t row_floats, const auto& fn) {
    if (n_rows * row_floats < (1 << 14)) {
      fn(0, n_rows);
    } else {
      pool.parallel_for(n_rows, [&](int, int64_t b, int64_t e) { fn(b, e); });
    }
  };
  auto add_residual = [&](const float* y, int64_t n) {
    over_rows(n / d, d, [&](int64_t b, int64_t e) {
      if (rs == 1.0f) {
        for (int64_t i = b * d; i < e * d; ++i) x_[i] += y[i];
      } else {
        for (int64_t i = b * d; i < e * d; ++i) x_[i] += y[i] * rs;
      }
    });
  };
  auto norm_rows = [&](const float* x, const TensorView& w, float* y, int64_t n_rows, int64_t n) {
    pool.parallel_for(n_rows, [&](int, int64_t b, int64_t e) {
      rms_norm(x + b * n, reinterpret_cast<const float*>(w.data), y + b * n, static_cast<int>(e - b), n, eps);
    });
  };

  const int64_t d_in = d * (1 + c.n_deepstack_layers);  // an image row's width (deepstack rows beside it)
  for (int t = 0; t < T; ++t) {
    float* xt = x_.data() + t * d;
    if (!batch.embd_row.empty() && batch.embd_row[t] >= 0) {  // an image's row, as the encoder gave it
      std::copy_n(batch.input_embd.data() + batch.embd_row[t] * d_in, d, xt);
      continue;
    }
    kern.dequantize_row(w_.tok_embd.type, w_.tok_embd.row(batch.token_ids[t]), xt, d);
    if (c.embd_scale != 1.0) {
      const float s = static_cast<float>(c.embd_scale);
      for (int64_t i = 0; i < d; ++i) xt[i] *= s;
    }
  }
  if (c.mtp_head) {  // x = eh_proj(enorm(embedding) | hnorm(the trunk's hidden state before the token))
    const float* en = reinterpret_cast<const float*>(w_.enorm.data);
    const float* hn = reinterpret_cast<const float*>(w_.hnorm.data);
    for (int t = 0; t < T; ++t) {
      float* row = eh_in_.data() + t * 2 * d;
      rms_norm(x_.data() + t * d, en, row, 1, d, eps);
      rms_norm(batch.input_hidden.data() + t * d, hn, row + d, 1, d, eps);
    }
    matmul(pool, w_.eh_proj, eh_in_.data(), T, x_.data());
    trace(0, {"matmul", w_.eh_proj.name, dtype_name(w_.eh_proj.type), w_.eh_proj.shape(), {T, 2 * d}, {T, d},
              "multi-token prediction: enorm(embedding) | hnorm(trunk hidden) -> the layer's input"});
  }
  if (c.n_embd_per_layer > 0) per_layer_inputs(batch, T);
  if (!c.causal) {  // every token attends to its whole sequence (the scheduler runs it in one pass)
    std::vector<int32_t> seq_end(batch.n_seqs(), 0);
    for (int t = 0; t < T; ++t) seq_end[batch.seq_index[t]] = std::max(seq_end[batch.seq_index[t]], batch.positions[t]);
    ends_.resize(T);
    for (int t = 0; t < T; ++t) ends_[t] = seq_end[batch.seq_index[t]];
  } else if (!batch.attn_end.empty()) {  // an image's tokens see each other; the rest stay causal
    ends_.resize(T);
    for (int t = 0; t < T; ++t) ends_[t] = batch.attn_end[t] >= 0 ? batch.attn_end[t] : batch.positions[t];
  }
  if (mrope_pairs_.empty()) {
    rope_table(batch.positions.data(), T, rope_, cos_sin_.data());
  } else {
    mrope_table(batch.positions.data(), batch.rope_pos.empty() ? nullptr : batch.rope_pos.data(), T, rope_,
                mrope_pairs_, cos_sin_.data());
  }
  if (c.sliding_window > 0)  // local layers: their own base and scaling
    rope_table(batch.positions.data(), T, rope_swa_, cos_sin_swa_.data());

  int recurrent = 0;  // recurrent layers so far
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const DecoderLayerWeights& L = w_.layers[l];
    const bool swa = c.is_swa(l);
    // Attention block (or a recurrent mixer in a hybrid model's recurrent layers; none in Nemotron-H's FFN
    // layers).
    if (!c.is_ffn_only(l)) {
    norm_rows(x_.data(), L.attn_norm, xn_.data(), T, d);
    trace(l, {"rms_norm", L.attn_norm.name, "F32", L.attn_norm.shape(), {T, d}, {T, d}, "attention input"});
    if (c.is_recurrent(l)) {
      mixer_.run(pool, c, L, recurrent_batch(batch, recurrent, T), xn_.data(), proj_.data(),
                 recurrent == 0 ? tracer_ : nullptr);
      ++recurrent;
    } else if (c.is_mla()) {
      mla_.run(pool, c, L, batch, views_.data(), c.kv_layer(l), cos_sin_.data(), xn_.data(), attn_.data(),
               l == 0 ? tracer_ : nullptr);
      project(L.wo, attn_.data(), tp_.q_widths, attn_full_.data(), T);
      trace_mm(l, L.wo, H * c.mla_v_dim, d, "attention output projection");
    } else {
    const int kl = c.kv_layer(l);
    // This layer's heads (Gemma 4's global layers are wider, with fewer KV heads than its local ones).
    const int64_t hd = c.head_dim_at(l), KH = c.kv_heads_at(l), qd = c.q_dim_at(l), kvd = c.kv_dim_at(l);
    const bool own_kv = c.has_own_kv(l);  // else it reads the KV an earlier layer stored (kl)
    if (c.attn_output_gate) {
      // Q and its gate come interleaved per head: [q of head 0, gate of head 0, q of head 1, ...].
      matmul_multi(pool, {{&L.wq, qg_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}}, xn_.data(), T);
      for (int64_t th = 0; th < T * H; ++th) {
        std::copy_n(qg_.data() + th * 2 * hd, hd, q_.data() + th * hd);
        std::copy_n(qg_.data() + th * 2 * hd + hd, hd, qg_.data() + th * hd);  // gates to the front, in place
      }
    } else if (!own_kv) {
      matmul(pool, L.wq, xn_.data(), T, q_.data());
    } else if (!L.wv.data) {  // V is K's projection, taken before K's norm and RoPE
      matmul_multi(pool, {{&L.wq, q_.data()}, {&L.wk, k_.data()}}, xn_.data(), T);
      std::copy_n(k_.data(), T * kvd, v_.data());
    } else {
      matmul_multi(pool, {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}}, xn_.data(), T);
    }
    trace_mm(l, L.wq, d, H * hd, "Q");
    trace_mm(l, L.wk, d, KH * hd, "K");
    trace_mm(l, L.wv, d, KH * hd, "V");
    if (L.bq.data) {
      add_bias(q_.data(), reinterpret_cast<const float*>(L.bq.data), T, qd);
      add_bias(k_.data(), reinterpret_cast<const float*>(L.bk.data), T, kvd);
      add_bias(v_.data(), reinterpret_cast<const float*>(L.bv.data), T, kvd);
      trace(l, {"bias", L.bq.name, "F32", L.bq.shape(), {T, qd + 2 * kvd}, {T, qd + 2 * kvd}, "Q, K and V biases"});
    }
    if (L.q_norm.data) {
      norm_rows(q_.data(), L.q_norm, q_.data(), T * H, hd);
      if (own_kv) norm_rows(k_.data(), L.k_norm, k_.data(), T * KH, hd);
      trace(l, {"rms_norm", L.q_norm.name, "F32", L.q_norm.shape(), {T, H + KH, hd}, {T, H + KH, hd},
                "per-head norm of Q and K"});
    }
    if (c.v_norm && own_kv) {
      rms_norm(v_.data(), nullptr, v_.data(), static_cast<int>(T * KH), hd, eps);
      trace(l, {"rms_norm", "", "", {}, {T, KH, hd}, {T, KH, hd}, "per-head norm of V, no weight"});
    }
    const float* cs = swa ? cos_sin_swa_.data() : cos_sin_.data();
    const int rd = static_cast<int>(c.rope_dim_at(l));
    if (c.uses_rope(l)) {
      over_rows(T, (H + KH) * hd, [&](int64_t b, int64_t e) {
        const int n = static_cast<int>(e - b);
        rope(q_.data() + b * H * hd, cs + b * rd, n, static_cast<int>(H), static_cast<int>(hd), rd, c.rope_neox);
        if (own_kv)
          rope(k_.data() + b * KH * hd, cs + b * rd, n, static_cast<int>(KH), static_cast<int>(hd), rd, c.rope_neox);
      });
    }
    if (c.attn_temp_scale != 0.0) {  // Llama 4 / Mistral 3: queries scaled up past the original context
      for (int t = 0; t < T; ++t) {
        const float s = c.attn_temperature(batch.positions[t]);
        for (int64_t i = 0; i < qd; ++i) q_[t * qd + i] *= s;
      }
    }
    if (c.uses_rope(l)) trace(l, {"rope", "", "", {}, {T, H + KH, hd}, {T, H + KH, hd},
              std::string(c.rope_neox ? "NeoX" : "interleaved") + " rotation of Q and K, theta " +
                  std::to_string(static_cast<int64_t>(swa ? c.rope_theta_swa : c.rope_theta)) +
                  (c.rope_freq_factors ? ", per-pair frequency factors" : "") +
                  (!swa && c.rope_scaling != "none" ? ", " + c.rope_scaling + " scaling" : "")});
    trace(l, {"kv_store", "", "", {}, {T, 2, KH * hd}, {T, 2, KH * hd},
              "K and V of these tokens written at their positions"});
    const KvTypes kt = batch.kv->types();
    for (int t = 0; t < T && own_kv; ++t) {
      kv_store(kt.k, k_.data() + t * kvd, batch.kv->k_slot(kl, batch.slots[t]), kvd, hd);
      kv_store(kt.v, v_.data() + t * kvd, batch.kv->v_slot(kl, batch.slots[t]), kvd, hd);
    }
    AttentionArgs aa{q_.data(), attn_.data(), T, batch.positions.data(), batch.seq_index.data(), views_.data(),
                     kl, static_cast<int>(H), static_cast<int>(KH), static_cast<int>(hd),
                     c.query_scale(l)};
    aa.window = swa ? static_cast<int>(c.sliding_window) : 0;
    aa.softcap = static_cast<float>(c.attn_softcap);
    const bool image_both_ways = !batch.attn_end.empty() && c.image_attention != "causal" &&
                                 (swa || c.image_attention != "swa");
    aa.ends = c.causal && !image_both_ways ? nullptr : ends_.data();
    aa.symmetric_window = c.swa_symmetric;
    aa.sinks = reinterpret_cast<const float*>(L.sinks.data);
    attention(pool, aa);
    trace(l, {"attention", "", "", {}, {T, H, hd}, {T, H, hd},
              "scores = Q K^T * " + std::to_string(c.query_scale(l)) +
                  (aa.softcap != 0.0f ? ", soft-capped at " + std::to_string(aa.softcap) : std::string()) +
                  (aa.window > 0 ? " over the last " + std::to_string(aa.window) + " positions"
                                 : std::string(" over positions 0..pos")) +
                  (c.causal ? " (causal), " : " (bidirectional), ") + std::to_string(H / KH) +
                  " query heads per KV head; softmax" + (aa.sinks ? " with a learned sink per head" : "") +
                  "; weights @ V"});
    if (c.attn_output_gate) {
      for (int64_t i = 0; i < T * qd; ++i) attn_[i] *= 1.0f / (1.0f + std::exp(-qg_[i]));
      trace(l, {"gate", "", "", {}, {T, qd}, {T, qd}, "attention output times sigmoid(Q's gate)"});
    }
    project(L.wo, attn_.data(), tp_.q_widths, attn_full_.data(), T);
    trace_mm(l, L.wo, H * hd, d, "attention output projection");
    if (L.bo.data) add_bias(proj_.data(), reinterpret_cast<const float*>(L.bo.data), T, d);
    }
    if (L.post_attn_norm.data) {
      norm_rows(proj_.data(), L.post_attn_norm, proj_.data(), T, d);
      trace(l, {"rms_norm", L.post_attn_norm.name, "F32", L.post_attn_norm.shape(), {T, d}, {T, d},
                "attention output"});
    }
    add_residual(proj_.data(), T * d);
    trace(l, {"residual", "", "", {}, {T, d}, {T, d}, "x = x + attention" + residual_note});
    }

    // Feed-forward block: gated (SiLU or GELU) or not (ReLU^2), dense or a mixture of experts (none in
    // Nemotron-H's mixer layers).
    if (c.has_ffn(l)) {
    norm_rows(x_.data(), L.ffn_norm, xn_.data(), T, d);
    trace(l, {"rms_norm", L.ffn_norm.name, "F32", L.ffn_norm.shape(), {T, d}, {T, d}, "feed-forward input"});
    if (c.is_moe(l) && c.moe_beside_dense) {
      moe_beside_dense(L, T);
      trace(l, {"moe", L.gate_exps[0].name, dtype_name(L.gate_exps[0].type), L.gate_exps[0].shape(), {T, d}, {T, d},
                "dense MLP (" + std::to_string(c.n_ff_dense) + " wide) beside top " + std::to_string(c.n_expert_used) +
                    " of " + std::to_string(c.n_expert) + " experts routed by rms(x) / sqrt(d) * scale; each post-normed; summed"});
    } else if (c.is_moe(l)) {
      matmul(pool, L.router, xn_.data(), T, router_.data());
      if (L.router_logit_bias.data)
        add_bias(router_.data(), reinterpret_cast<const float*>(L.router_logit_bias.data), T, c.n_expert);
      const MoeRouting r = route_experts(router_.data(), T, static_cast<int>(c.n_expert),
                                         static_cast<int>(c.n_expert_used), c.expert_norm,
                                         static_cast<float>(c.expert_weights_scale), c.expert_gating == "sigmoid",
                                         reinterpret_cast<const float*>(L.router_bias.data),
                                         static_cast<int>(c.n_expert_groups), static_cast<int>(c.n_expert_groups_used));
      // Experts in a latent width (Nemotron 3 Super): the router reads x, the experts its projection.
      const bool latent = L.latent_down.data != nullptr;
      if (latent) matmul(pool, L.latent_down, xn_.data(), T, lat_in_.data());
      moe_ffn(pool,
              {L.gate_exps.empty() ? nullptr : &L.gate_exps, &L.up_exps, &L.down_exps, act,
               reinterpret_cast<const float*>(L.gate_exps_b.data),
               reinterpret_cast<const float*>(L.up_exps_b.data), reinterpret_cast<const float*>(L.down_exps_b.data)},
              r, latent ? lat_in_.data() : xn_.data(), latent ? c.moe_latent : d, ff,
              latent ? lat_out_.data() : proj_.data());
      if (latent) matmul(pool, L.latent_up, lat_out_.data(), T, proj_.data());
      if (reducer_) reducer_->sum(proj_.data(), T * d);  // this rank's FFN columns of every expert
      if (c.n_ff_shared > 0) shared_expert(L, T);
      trace_mm(l, L.router, d, c.n_expert, "router logits");
      trace(l, {"moe", L.up_exps[0].name, dtype_name(L.up_exps[0].type), L.up_exps[0].shape(), {T, d}, {T, d},
                c.expert_gating + " router" + (L.router_bias.data ? " (selection bias)" : "") +
                    (L.router_logit_bias.data ? " (logit bias; expert biases)" : "") + ", top " +
                    std::to_string(c.n_expert_used) + " of " + std::to_string(c.n_expert) +
                    " experts per token; tokens grouped per expert; weighted sum"});
    } else {
      const int64_t ff = c.ffn_width(l);  // a MoE model's leading dense layers have their own width
      if (L.w_gate.data) {
        matmul_multi(pool, {{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}}, xn_.data(), T);
        trace_mm(l, L.w_gate, d, ff, "gate");
      } else {  // not gated (Nemotron-H's ReLU^2): act(up x) * 1
        matmul(pool, L.w_up, xn_.data(), T, gate_.data());
        std::fill_n(up_.data(), T * ff, 1.0f);
      }
      trace_mm(l, L.w_up, d, ff, "up");
      const auto glu = [&](int, int64_t b, int64_t e) { glu_mul(act, gate_.data() + b, up_.data() + b, e - b); };
      // A decode step's few thousand elements take about as long as handing half of them to another thread.
      if (T * ff <= kInlineActivation) {
        glu(0, 0, T * ff);
      } else {
        pool.parallel_for(T * ff, glu, 64);
      }
      trace(l, {c.ffn_act + "_mul", "", "", {}, {T, ff}, {T, ff},
                L.w_gate.data ? c.ffn_act + "(gate) * up" : "relu(up)^2"});
      project(L.w_down, gate_.data(), tp_.ff_widths, act_full_.data(), T);
      trace_mm(l, L.w_down, ff, d, "down");
    }
    if (L.post_ffn_norm.data) {
      norm_rows(proj_.data(), L.post_ffn_norm, proj_.data(), T, d);
      trace(l, {"rms_norm", L.post_ffn_norm.name, "F32", L.post_ffn_norm.shape(), {T, d}, {T, d},
                "feed-forward output"});
    }
    add_residual(proj_.data(), T * d);
    trace(l, {"residual", "", "", {}, {T, d}, {T, d}, "x = x + feed-forward" + residual_note});
    }
    if (c.n_embd_per_layer > 0) {
      per_layer_block(l, T);
      trace(l, {"per_layer_embd", L.pl_gate.name, dtype_name(L.pl_gate.type), L.pl_gate.shape(), {T, d}, {T, d},
                "x += post_norm(proj(gelu(inp_gate x) * the layer's per-layer input))"});
    }
    if (L.out_scale.data) {
      const float s = *reinterpret_cast<const float*>(L.out_scale.data);
      for (int64_t i = 0; i < T * d; ++i) x_[i] *= s;
      trace(l, {"scale", L.out_scale.name, "F32", {1}, {T, d}, {T, d}, "x = x * the layer's output scale"});
    }
    if (l < c.n_deepstack_layers && !batch.embd_row.empty()) {  // Qwen3-VL: an image row's l-th deepstack row
      for (int t = 0; t < T; ++t) {
        if (batch.embd_row[t] < 0) continue;
        const float* ds = batch.input_embd.data() + batch.embd_row[t] * d_in + (l + 1) * d;
        for (int64_t i = 0; i < d; ++i) x_[t * d + i] += ds[i];
      }
    }
  }

  // Final hidden states (every rank holds the whole residual stream), then the final norm and head, only for
  // the rows that want logits (gathered to the front of xn_).
  if (hidden && !batch.want_hidden.empty()) {
    int n_hid = 0;
    for (int t = 0; t < T; ++t)
      if (batch.want_hidden[t])
        rms_norm(x_.data() + t * d, reinterpret_cast<const float*>(w_.output_norm.data), hidden + n_hid++ * d, 1, d,
                 eps);
  }
  int n_out = 0;
  for (int t = 0; t < T; ++t) {
    if (!batch.want_logits[t]) continue;
    float* row = xn_.data() + n_out * d;
    rms_norm(x_.data() + t * d, reinterpret_cast<const float*>(w_.output_norm.data), row, 1, d, eps);
    if (c.logit_scale != 1.0) {  // Granite: logits / logit_scale, as the head's input / logit_scale
      const float inv = static_cast<float>(1.0 / c.logit_scale);
      for (int64_t i = 0; i < d; ++i) row[i] *= inv;
    }
    ++n_out;
  }
  if (n_out > 0 && !reducer_ && logit_rows_ > 0) {
    // The first logit_rows_ rows of the head (whole packed groups of 16), the rest of each row -inf.
    TensorView head = w_.output;
    head.ne[1] = logit_rows_;
    head_part_.resize(std::max<size_t>(head_part_.size(), static_cast<size_t>(n_out) * logit_rows_));
    matmul(pool, head, xn_.data(), n_out, head_part_.data());
    if (c.final_softcap != 0.0)
      softcap(head_part_.data(), static_cast<int64_t>(n_out) * logit_rows_, static_cast<float>(c.final_softcap));
    for (int r = 0; r < n_out; ++r) {
      float* row = logits + static_cast<int64_t>(r) * c.n_vocab;
      std::copy_n(head_part_.data() + static_cast<int64_t>(r) * logit_rows_, logit_rows_, row);
      std::fill(row + logit_rows_, row + c.n_vocab, -std::numeric_limits<float>::infinity());
    }
  } else if (n_out > 0 && !reducer_) {
    matmul(pool, w_.output, xn_.data(), n_out, logits);
    if (c.final_softcap != 0.0)
      softcap(logits, static_cast<int64_t>(n_out) * c.n_vocab, static_cast<float>(c.final_softcap));
  } else if (n_out > 0) {  // this rank's vocabulary rows; rank 0 gathers every rank's
    const int64_t vl = w_.output.ne[1];
    head_part_.resize(std::max<size_t>(head_part_.size(), static_cast<size_t>(n_out) * vl));
    matmul(pool, w_.output, xn_.data(), n_out, head_part_.data());
    if (c.final_softcap != 0.0)
      softcap(head_part_.data(), static_cast<int64_t>(n_out) * vl, static_cast<float>(c.final_softcap));
    reducer_->gather(head_part_.data(), n_out, tp_.v_widths, logits, /*root_only=*/true);
  }
  if (tracer_) {
    tracer_->op({"rms_norm", w_.output_norm.name, "F32", w_.output_norm.shape(), {n_out, d}, {n_out, d},
                 "final norm, only rows that need logits"});
    tracer_->op({"lm_head", w_.output.name, dtype_name(w_.output.type), w_.output.shape(), {n_out, d},
                 {n_out, c.n_vocab},
                 std::string(c.tied_output ? "tied to the token embedding" : "separate head") +
                     (c.logit_scale != 1.0 ? ", divided by " + std::to_string(c.logit_scale) : "") +
                     (c.final_softcap != 0.0 ? ", soft-capped at " + std::to_string(c.final_softcap) : "")});
  }
  return Status::ok();
}

RecurrentBatch DecoderModel::recurrent_batch(const ForwardBatch& batch, int r, int T) {
  RecurrentBatch b;
  b.n_tokens = T;
  b.positions = batch.positions.data();
  b.seq_index = batch.seq_index.data();
  b.slots = batch.state_slots.data();
  b.n_seqs = batch.n_seqs();
  b.store = batch.state;
  b.layer = r;
  if (!batch.state_snapshots.empty()) {  // per token, the slot that also takes the state after it, or -1
    snapshot_of_.assign(static_cast<size_t>(T), -1);
    for (auto [t, slot] : batch.state_snapshots) snapshot_of_[static_cast<size_t>(t)] = slot;
    b.snapshot = snapshot_of_.data();
  }
  return b;
}

void DecoderModel::per_layer_inputs(const ForwardBatch& batch, int T) {
  const int64_t d = cfg_.n_embd, pl = cfg_.n_embd_per_layer, all = pl * cfg_.n_layer;
  const float eps = static_cast<float>(cfg_.rms_eps);
  matmul(*pool_, w_.pl_model_proj, x_.data(), T, pl_in_.data());
  const float proj_scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t i = 0; i < T * all; ++i) pl_in_[i] *= proj_scale;
  rms_norm(pl_in_.data(), reinterpret_cast<const float*>(w_.pl_proj_norm.data), pl_in_.data(),
           static_cast<int>(T * cfg_.n_layer), pl, eps);
  const float tok_scale = std::sqrt(static_cast<float>(pl)), mix = 1.0f / std::sqrt(2.0f);
  pl_row_.resize(static_cast<size_t>(all));
  const std::vector<float>& row = pl_row_;
  for (int t = 0; t < T; ++t) {
    kernels().dequantize_row(w_.pl_tok_embd.type, w_.pl_tok_embd.row(batch.token_ids[t]), pl_row_.data(), all);
    float* in = pl_in_.data() + t * all;
    for (int64_t i = 0; i < all; ++i) in[i] = (in[i] + row[i] * tok_scale) * mix;
  }
}

void DecoderModel::per_layer_block(int64_t l, int T) {
  const DecoderLayerWeights& L = w_.layers[l];
  const int64_t d = cfg_.n_embd, pl = cfg_.n_embd_per_layer, all = pl * cfg_.n_layer;
  matmul(*pool_, L.pl_gate, x_.data(), T, pl_g_.data());
  for (int t = 0; t < T; ++t) {
    float* g = pl_g_.data() + t * pl;
    gelu_mul(g, pl_in_.data() + t * all + l * pl, pl);
  }
  matmul(*pool_, L.pl_proj, pl_g_.data(), T, proj_.data());
  rms_norm(proj_.data(), reinterpret_cast<const float*>(L.pl_post_norm.data), proj_.data(), T, d,
           static_cast<float>(cfg_.rms_eps));
  for (int64_t i = 0; i < T * d; ++i) x_[i] += proj_[i];
}

void DecoderModel::moe_beside_dense(const DecoderLayerWeights& L, int T) {
  ThreadPool& pool = *pool_;
  const ModelConfig& c = cfg_;
  const int64_t d = c.n_embd, ff = c.n_ff_dense;
  const float eps = static_cast<float>(c.rms_eps);
  const Glu act = glu_of(c.ffn_act);
  // The dense MLP on ffn_norm(x) (in xn_), post-normed, kept in aux_.
  matmul_multi(pool, {{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}}, xn_.data(), T);
  pool.parallel_for(T * ff, [&](int, int64_t b, int64_t e) { glu_mul(act, gate_.data() + b, up_.data() + b, e - b); },
                    64);
  matmul(pool, L.w_down, gate_.data(), T, aux_.data());
  rms_norm(aux_.data(), reinterpret_cast<const float*>(L.post_dense_norm.data), aux_.data(), T, d, eps);
  // The router reads rms(x) / sqrt(d) * scale; each expert's output is scaled by its own factor, folded into its
  // routing weight (both multiply the same down projection).
  rms_norm(x_.data(), nullptr, xn_.data(), T, d, eps);
  const float inv = 1.0f / std::sqrt(static_cast<float>(d));
  const float* rs = reinterpret_cast<const float*>(L.router_scale.data);
  for (int t = 0; t < T; ++t)
    for (int64_t i = 0; i < d; ++i) xn_[t * d + i] = xn_[t * d + i] * inv * rs[i];
  matmul(pool, L.router, xn_.data(), T, router_.data());
  MoeRouting r = route_experts(router_.data(), T, static_cast<int>(c.n_expert), static_cast<int>(c.n_expert_used),
                               c.expert_norm, static_cast<float>(c.expert_weights_scale));
  if (L.down_exps_scale.data) {
    const float* es = reinterpret_cast<const float*>(L.down_exps_scale.data);
    for (size_t j = 0; j < r.weight.size(); ++j) r.weight[j] *= es[r.expert[j]];
  }
  rms_norm(x_.data(), reinterpret_cast<const float*>(L.pre_moe_norm.data), xn_.data(), T, d, eps);
  moe_ffn(pool, {&L.gate_exps, &L.up_exps, &L.down_exps, act}, r, xn_.data(), d, c.n_ff, proj_.data());
  rms_norm(proj_.data(), reinterpret_cast<const float*>(L.post_moe_norm.data), proj_.data(), T, d, eps);
  for (int64_t i = 0; i < T * d; ++i) proj_[i] += aux_[i];
}

void DecoderModel::shared_expert(const DecoderLayerWeights& L, int T) {
  const int64_t d = cfg_.n_embd, f = cfg_.n_ff_shared;
  if (L.shexp_w_gate.data) {
    matmul_multi(*pool_, {{&L.shexp_w_gate, sh_gate_.data()}, {&L.shexp_w_up, sh_up_.data()}}, xn_.data(), T);
  } else {  // not gated (Nemotron-H): act(up x) * 1
    matmul(*pool_, L.shexp_w_up, xn_.data(), T, sh_gate_.data());
    std::fill_n(sh_up_.data(), T * f, 1.0f);
  }
  glu_mul(glu_of(cfg_.ffn_act), sh_gate_.data(), sh_up_.data(), T * f);
  matmul(*pool_, L.shexp_w_down, sh_gate_.data(), T, sh_out_.data());
  if (L.shexp_gate.data) matmul(*pool_, L.shexp_gate, xn_.data(), T, sh_w_.data());
  for (int t = 0; t < T; ++t) {
    const float g = L.shexp_gate.data ? 1.0f / (1.0f + std::exp(-sh_w_[t])) : 1.0f;
    for (int64_t i = 0; i < d; ++i) proj_[t * d + i] += g * sh_out_[t * d + i];
  }
}

Status DecoderModel::pooled_head(const float* pooled, Pooling p, float* out) {
  const int64_t d = cfg_.n_embd;
  if (p == Pooling::kRank) {
    if (!w_.cls_out.data) return unimplemented("this model has no classifier head (cls.output) for rank pooling");
    matmul(*pool_, w_.cls_out, pooled, 1, out);
    if (w_.cls_out_b.data) add_bias(out, reinterpret_cast<const float*>(w_.cls_out_b.data), 1, cfg_.n_cls_out);
    // A causal reranker's outputs are its head's logits of its labels (Qwen3-Reranker: "yes", "no"): softmax,
    // so the first is the probability of relevance.
    float mx = out[0];
    for (int64_t i = 1; i < cfg_.n_cls_out; ++i) mx = std::max(mx, out[i]);
    double sum = 0;
    for (int64_t i = 0; i < cfg_.n_cls_out; ++i) sum += out[i] = std::exp(out[i] - mx);
    for (int64_t i = 0; i < cfg_.n_cls_out; ++i) out[i] = static_cast<float>(out[i] / sum);
    return Status::ok();
  }
  if (!w_.dense_2.data) {
    std::copy_n(pooled, d, out);
    return Status::ok();
  }
  dense_.resize(static_cast<size_t>(w_.dense_2.ne[1]));
  matmul(*pool_, w_.dense_2, pooled, 1, dense_.data());
  matmul(*pool_, w_.dense_3, dense_.data(), 1, out);
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Model>> make_decoder_model(ModelConfig cfg, DecoderWeights weights,
                                                  std::vector<TensorView> all_tensors, SpecialTokens special,
                                                  std::shared_ptr<void> storage, std::unique_ptr<GgufFile> gguf,
                                                  std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
  if (opts.rope.any()) CACHET_RETURN_IF_ERROR(apply_rope_overrides(opts.rope, &cfg));
  if (opts.logit_rows < 0) return invalid_argument("logit rows must be >= 0");
  if (opts.tp.size > 1 && (cfg.n_recurrent_layers() > 0 || cfg.attn_output_gate || cfg.n_ff_shared > 0 || cfg.mtp_head ||
                           cfg.n_dense_lead > 0 || cfg.expert_gating != "softmax" || cfg.head_dim_swa > 0 ||
                           cfg.n_head_kv_swa > 0 || cfg.kv_shared_layers > 0 || cfg.n_embd_per_layer > 0 ||
                           cfg.moe_beside_dense || cfg.n_ff_wide > 0 || cfg.is_mla()))
    return unimplemented("tensor parallelism is not implemented for " + cfg.arch + " models yet");
  if (opts.logit_rows > 0 && opts.tp.size > 1)
    return invalid_argument("a vocabulary subset of the head (--draft-vocab) is not for tensor-parallel models");
  // Whole packed groups of 16 rows; a subset as large as the vocabulary is the whole head.
  int64_t logit_rows = (opts.logit_rows + 15) / 16 * 16;
  if (logit_rows >= cfg.n_vocab) logit_rows = 0;
  CACHET_RETURN_IF_ERROR(cfg.validate());
  std::vector<AlignedBuffer<float>> owned;
  CACHET_RETURN_IF_ERROR(validate_decoder_weights(cfg, &weights, &owned));
  std::vector<AlignedBuffer<uint8_t>> cuts;  // this rank's column cuts (tensor parallel), until packed
  TpLayout tp_layout;
  CACHET_RETURN_IF_ERROR(shard_decoder_weights(opts.tp, &cfg, &weights, &cuts, &tp_layout));
  // Matmul weights of the block types are repacked once for the integer path.
  std::vector<AlignedBuffer<uint8_t>> packed;
  auto pack = [&](TensorView* t) {
    if (opts.precise || !packable(t->type)) return;
    packed.emplace_back();
    pack_weight(*pool, t, &packed.back());
    // The packed copy is what the matmuls read from now on: give the file's pages back, so the weights are not
    // resident twice (1B F16: 4.9 -> 2.5 GB). A tied embedding's rows fault back in as tokens look them up.
    if (gguf) gguf->drop_pages(t->data, t->n_bytes());
  };
  for (auto& L : weights.layers) {
    for (TensorView* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.wq_a, &L.wkv_a, &L.latent_down, &L.latent_up, &L.router,
                          &L.ssm_qkv, &L.ssm_z, &L.ssm_beta, &L.ssm_alpha, &L.ssm_out, &L.ssm_in, &L.shexp_w_gate, &L.shexp_w_up, &L.shexp_w_down, &L.sc_in, &L.sc_out})
      if (t->data) pack(t);
    for (auto* v : {&L.gate_exps, &L.up_exps, &L.down_exps, &L.k_b, &L.v_b})
      for (TensorView& t : *v) pack(&t);
    for (TensorView* t : {&L.w_gate, &L.w_up, &L.w_down, &L.pl_gate, &L.pl_proj})
      if (t->data) pack(t);
  }
  pack(&weights.output);
  if (weights.pl_model_proj.data) pack(&weights.pl_model_proj);
  if (weights.eh_proj.data) pack(&weights.eh_proj);
  // A cut that was packed is read from its packed copy from now on; only unpacked cuts stay.
  auto unpacked_user = [&](const uint8_t* p) {
    for (const auto& L : weights.layers) {
      if ((L.wo.data == p && !L.wo.packed) || (L.w_down.data == p && !L.w_down.packed)) return true;
      for (const TensorView& t : L.down_exps)
        if (t.data == p && !t.packed) return true;
    }
    return false;
  };
  for (auto& c : cuts)
    if (unpacked_user(c.data())) packed.push_back(std::move(c));
  return std::unique_ptr<Model>(new DecoderModel(std::move(cfg), std::move(weights), std::move(all_tensors), special,
                                                 std::move(storage), std::move(gguf), std::move(pool),
                                                 std::move(owned), std::move(packed),
                                                 opts.tp.size > 1 ? opts.tp.reducer : nullptr, std::move(tp_layout),
                                                 logit_rows));
}

}  // namespace cachet
