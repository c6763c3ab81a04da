#include "model/encoder.h"

#include <algorithm>
#include <cmath>

#include "io/gguf.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "model/arch_reader.h"
#include "model/decoder.h"
#include "model/moe.h"
#include "model/ops.h"

namespace cachet {

namespace {

class EncoderModel final : public Model {
 public:
  EncoderModel(ModelConfig cfg, EncoderSpec spec, EncoderWeights w, std::vector<TensorView> all, SpecialTokens special,
               std::unique_ptr<GgufFile> gguf, std::shared_ptr<ThreadPool> pool,
               std::vector<AlignedBuffer<float>> owned, std::vector<AlignedBuffer<uint8_t>> packed)
      : cfg_(std::move(cfg)), spec_(spec), w_(std::move(w)), all_(std::move(all)), special_(special),
        gguf_(std::move(gguf)), pool_(std::move(pool)), owned_(std::move(owned)), packed_(std::move(packed)) {
    rope_ = rope_freqs(cfg_, false, nullptr);
    rope_swa_ = rope_freqs(cfg_, true, nullptr);
  }

  const ModelConfig& config() const override { return cfg_; }
  const std::vector<TensorView>& tensors() const override { return all_; }
  const SpecialTokens& special_tokens() const override { return special_; }
  const GgufFile* gguf() const override { return gguf_.get(); }
  ThreadPool& pool() override { return *pool_; }
  Status forward(const ForwardBatch& batch, float* logits, float* hidden = nullptr) override;
  int64_t pooled_dim(Pooling p) const override { return p == Pooling::kRank ? cfg_.n_cls_out : cfg_.n_embd; }
  Status pooled_head(const float* pooled, Pooling p, float* out) override;

 private:
  void ensure_scratch(int n);
  // LayerNorm of n_rows rows of width n_embd (in parallel when there are many).
  void norm(const float* x, const TensorView& w, const TensorView& b, float* y, int n_rows);

  ModelConfig cfg_;
  EncoderSpec spec_;
  EncoderWeights w_;
  std::vector<TensorView> all_;
  SpecialTokens special_;
  std::unique_ptr<GgufFile> gguf_;
  std::shared_ptr<ThreadPool> pool_;
  std::vector<AlignedBuffer<float>> owned_;     // f32 copies of vectors stored in other types
  std::vector<AlignedBuffer<uint8_t>> packed_;  // repacked matmul weights (kernels/packed.h)
  RopeFreqs rope_, rope_swa_;

  int scratch_tokens_ = 0;
  AlignedBuffer<float> x_, xn_, q_, k_, v_, attn_, proj_, gate_, up_, ones_, cos_sin_, cos_sin_swa_;
  std::vector<KvView> views_;
  std::vector<int32_t> ends_;
  std::vector<float> head_;    // the classifier's hidden layer
  std::vector<float> router_;  // [n_tokens, n_expert] router logits
};

void EncoderModel::ensure_scratch(int n) {
  if (n <= scratch_tokens_) return;
  scratch_tokens_ = n;
  const int64_t d = cfg_.n_embd, ff = cfg_.n_ff;
  for (auto* b : {&x_, &xn_, &q_, &k_, &v_, &attn_, &proj_}) b->resize(n * d);
  gate_.resize(n * ff);
  up_.resize(n * ff);
  ones_.resize(n * ff);
  std::fill(ones_.data(), ones_.data() + n * ff, 1.0f);
  cos_sin_.resize(n * cfg_.rope_dim);
  cos_sin_swa_.resize(n * cfg_.rope_dim);
}

void EncoderModel::norm(const float* x, const TensorView& w, const TensorView& b, float* y, int n_rows) {
  const int64_t d = cfg_.n_embd;
  const float* wp = reinterpret_cast<const float*>(w.data);
  const float* bp = b.data ? reinterpret_cast<const float*>(b.data) : nullptr;
  const float eps = static_cast<float>(cfg_.rms_eps);
  pool_->parallel_for(n_rows, [&](int, int64_t r0, int64_t r1) {
    layer_norm(x + r0 * d, wp, bp, y + r0 * d, static_cast<int>(r1 - r0), d, eps);
  }, 16);
}

Status EncoderModel::forward(const ForwardBatch& batch, float* logits, float* hidden) {
  CACHET_RETURN_IF_ERROR(check_forward_batch(cfg_, batch));
  for (const KvBlockCopy& cp : batch.copies) batch.kv->copy_block(cp);
  const int T = batch.n_tokens();
  if (T == 0) return Status::ok();
  (void)logits;
  for (bool want : batch.want_logits)
    if (want) return invalid_argument("an encoder has no next-token head: it gives hidden states, not logits");
  for (int t = 0; t < T; ++t)
    if (w_.pos_embd.data && batch.positions[t] >= w_.pos_embd.ne[1])
      return out_of_range("position " + std::to_string(batch.positions[t]) + " is past the model's " +
                          std::to_string(w_.pos_embd.ne[1]) + " position embeddings");
  views_.clear();
  for (int i = 0; i < batch.n_seqs(); ++i) views_.push_back(batch.view(i));
  ensure_scratch(T);
  ThreadPool& pool = *pool_;
  const Kernels& kern = kernels();
  const ModelConfig& c = cfg_;
  const int64_t d = c.n_embd, ff = c.n_ff, H = c.n_head, hd = c.head_dim;

  // Embeddings: token, + token type 0, + absolute position; then LayerNorm.
  std::vector<float> extra(d), type0(w_.type_embd.data ? d : 0);
  if (w_.type_embd.data) kern.dequantize_row(w_.type_embd.type, w_.type_embd.row(0), type0.data(), d);
  for (int t = 0; t < T; ++t) {
    float* xt = x_.data() + t * d;
    kern.dequantize_row(w_.tok_embd.type, w_.tok_embd.row(batch.token_ids[t]), xt, d);
    for (size_t i = 0; i < type0.size(); ++i) xt[i] += type0[i];
    if (w_.pos_embd.data) {
      kern.dequantize_row(w_.pos_embd.type, w_.pos_embd.row(batch.positions[t]), extra.data(), d);
      for (int64_t i = 0; i < d; ++i) xt[i] += extra[i];
    }
  }
  norm(x_.data(), w_.embd_norm, w_.embd_norm_b, x_.data(), T);

  // Every token attends to its whole sequence (the scheduler runs an encoder's input in one pass).
  std::vector<int32_t> seq_end(batch.n_seqs(), 0);
  for (int t = 0; t < T; ++t) seq_end[batch.seq_index[t]] = std::max(seq_end[batch.seq_index[t]], batch.positions[t]);
  ends_.resize(T);
  for (int t = 0; t < T; ++t) ends_[t] = seq_end[batch.seq_index[t]];
  if (spec_.rope) {
    rope_table(batch.positions.data(), T, rope_, cos_sin_.data());
    if (c.sliding_window > 0) rope_table(batch.positions.data(), T, rope_swa_, cos_sin_swa_.data());
  }
  const bool gelu = c.ffn_act == "gelu";
  auto add_vec = [&](float* x, const TensorView& b, int64_t n) {
    if (b.data) add_bias(x, reinterpret_cast<const float*>(b.data), T, n);
  };

  for (int64_t l = 0; l < c.n_layer; ++l) {
    const EncoderLayerWeights& L = w_.layers[l];
    const bool swa = c.is_swa(l);
    // Attention: pre-norm input (modern-bert) or the residual stream itself (post-norm).
    const float* in = x_.data();
    if (L.attn_norm.data) {
      norm(x_.data(), L.attn_norm, TensorView{}, xn_.data(), T);
      in = xn_.data();
    }
    matmul_multi(pool, {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}}, in, T);
    add_vec(q_.data(), L.bq, d);
    add_vec(k_.data(), L.bk, d);
    add_vec(v_.data(), L.bv, d);
    if (spec_.rope) {
      const float* cs = swa ? cos_sin_swa_.data() : cos_sin_.data();
      rope(q_.data(), cs, T, static_cast<int>(H), static_cast<int>(hd), static_cast<int>(c.rope_dim), true);
      rope(k_.data(), cs, T, static_cast<int>(H), static_cast<int>(hd), static_cast<int>(c.rope_dim), true);
    }
    const KvTypes kt = batch.kv->types();
    for (int t = 0; t < T; ++t) {
      kv_store(kt.k, k_.data() + t * d, batch.kv->k_slot(static_cast<int>(l), batch.slots[t]), d, hd);
      kv_store(kt.v, v_.data() + t * d, batch.kv->v_slot(static_cast<int>(l), batch.slots[t]), d, hd);
    }
    AttentionArgs aa{q_.data(), attn_.data(), T, batch.positions.data(), batch.seq_index.data(), views_.data(),
                     static_cast<int>(l), static_cast<int>(H), static_cast<int>(H), static_cast<int>(hd),
                     c.query_scale()};
    aa.window = swa ? static_cast<int>(c.sliding_window) : 0;
    aa.symmetric_window = true;
    aa.ends = ends_.data();
    attention(pool, aa);
    matmul(pool, L.wo, attn_.data(), T, proj_.data());
    add_vec(proj_.data(), L.bo, d);
    for (int64_t i = 0; i < T * d; ++i) x_[i] += proj_[i];
    if (L.attn_out_norm.data) norm(x_.data(), L.attn_out_norm, L.attn_out_norm_b, x_.data(), T);

    // Feed-forward: GELU (bert), or gated: silu(gate) * up (nomic-bert), gelu(gate) * up (modern-bert).
    in = x_.data();
    if (L.ffn_norm.data) {
      norm(x_.data(), L.ffn_norm, TensorView{}, xn_.data(), T);
      in = xn_.data();
    }
    if (L.router.data) {  // mixture of experts
      router_.resize(static_cast<size_t>(T) * c.n_expert);
      matmul(pool, L.router, in, T, router_.data());
      const MoeRouting r = route_experts(router_.data(), T, static_cast<int>(c.n_expert),
                                         static_cast<int>(c.n_expert_used), c.expert_norm,
                                         static_cast<float>(c.expert_weights_scale));
      moe_ffn(pool, {nullptr, &L.up_exps, &L.down_exps, gelu ? Glu::kGelu : Glu::kSilu}, r, in, d, ff, proj_.data());
      for (int64_t i = 0; i < T * d; ++i) x_[i] += proj_[i];
      if (L.out_norm.data) norm(x_.data(), L.out_norm, L.out_norm_b, x_.data(), T);
      continue;
    }
    if (L.w_gate.data) {
      matmul_multi(pool, {{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}}, in, T);
    } else {
      matmul(pool, L.w_up, in, T, gate_.data());
      add_vec(gate_.data(), L.b_up, ff);
    }
    const float* mul = L.w_gate.data ? up_.data() : ones_.data();
    pool.parallel_for(T * ff, [&](int, int64_t b, int64_t e) {
      if (gelu) {
        gelu_mul(gate_.data() + b, mul + b, e - b);
      } else {
        silu_mul(gate_.data() + b, mul + b, e - b);
      }
    }, 64);
    matmul(pool, L.w_down, gate_.data(), T, proj_.data());
    add_vec(proj_.data(), L.b_down, d);
    for (int64_t i = 0; i < T * d; ++i) x_[i] += proj_[i];
    if (L.out_norm.data) norm(x_.data(), L.out_norm, L.out_norm_b, x_.data(), T);
  }
  if (w_.output_norm.data) norm(x_.data(), w_.output_norm, TensorView{}, x_.data(), T);
  if (hidden && !batch.want_hidden.empty()) {
    int n_hid = 0;
    for (int t = 0; t < T; ++t)
      if (batch.want_hidden[t]) std::copy_n(x_.data() + t * d, d, hidden + n_hid++ * d);
  }
  return Status::ok();
}

Status EncoderModel::pooled_head(const float* pooled, Pooling p, float* out) {
  const int64_t d = cfg_.n_embd;
  if (p != Pooling::kRank) {
    std::copy_n(pooled, d, out);
    return Status::ok();
  }
  if (!w_.cls_out.data && !w_.cls.data)
    return unimplemented("this model has no classifier head (cls, cls.output) for rank pooling");
  head_.assign(pooled, pooled + d);
  if (w_.cls.data) {  // dense layer, activation, optional norm (RoBERTa's / ModernBERT's classification head)
    std::vector<float> h(d);
    matmul(*pool_, w_.cls, head_.data(), 1, h.data());
    if (w_.cls_b.data) add_bias(h.data(), reinterpret_cast<const float*>(w_.cls_b.data), 1, d);
    if (spec_.gelu_classifier) {
      std::vector<float> one(d, 1.0f);
      gelu_mul(h.data(), one.data(), d);
    } else {
      for (float& x : h) x = std::tanh(x);
    }
    if (w_.cls_norm.data)
      layer_norm(h.data(), reinterpret_cast<const float*>(w_.cls_norm.data), nullptr, h.data(), 1, d,
                 static_cast<float>(cfg_.rms_eps));
    head_ = std::move(h);
  }
  if (w_.cls_out.data) {
    matmul(*pool_, w_.cls_out, head_.data(), 1, out);
    if (w_.cls_out_b.data) add_bias(out, reinterpret_cast<const float*>(w_.cls_out_b.data), 1, cfg_.n_cls_out);
  } else {
    std::copy_n(head_.data(), d, out);  // a head without an output layer scores with its first value
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Model>> load_encoder(ArchReader& r, ModelConfig cfg, const EncoderSpec& spec,
                                            std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool,
                                            const LoadOptions& opts) {
  if (opts.tp.size > 1)
    return unimplemented(cfg.arch + ": tensor parallelism is for the decoders (an encoder this small runs on one rank)");
  if (cfg.n_head_kv != cfg.n_head) return unimplemented(cfg.arch + ": grouped K/V heads in an encoder");
  if (cfg.q_dim() != cfg.n_embd) return invalid_argument(cfg.arch + ": heads times head width must equal n_embd");
  const int64_t d = cfg.n_embd, ff = cfg.n_ff;
  EncoderWeights w;
  w.tok_embd = r.tensor("token_embd.weight");
  w.type_embd = r.tensor("token_types.weight");
  w.pos_embd = spec.rope ? TensorView{} : r.tensor("position_embd.weight");
  w.embd_norm = r.tensor("token_embd_norm.weight");
  w.embd_norm_b = r.tensor("token_embd_norm.bias");
  w.output_norm = r.tensor("output_norm.weight");
  w.cls = r.tensor("cls.weight");
  w.cls_b = r.tensor("cls.bias");
  w.cls_norm = r.tensor("cls.norm.weight");
  w.cls_out = r.tensor("cls.output.weight");
  w.cls_out_b = r.tensor("cls.output.bias");
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    EncoderLayerWeights L;
    auto get = [&](const std::string& name) { return r.layer_tensor(l, name); };
    L.attn_norm = get("attn_norm.weight");
    const TensorView qkv = get("attn_qkv.weight");
    if (qkv.data) {
      if (qkv.ne[1] != 3 * d) return invalid_argument("tensor '" + qkv.name + "' is not Q, K and V of width n_embd");
      L.wq = row_slice(qkv, 0, d, "q");
      L.wk = row_slice(qkv, d, d, "k");
      L.wv = row_slice(qkv, 2 * d, d, "v");
    } else {
      L.wq = get("attn_q.weight");
      L.wk = get("attn_k.weight");
      L.wv = get("attn_v.weight");
    }
    const TensorView qkv_b = get("attn_qkv.bias");
    if (qkv_b.data) {
      if (!qkv.data || qkv_b.ne[0] != 3 * d) return invalid_argument("tensor '" + qkv_b.name + "' does not match Q, K and V");
      L.bq = elem_slice(qkv_b, 0, d, "q");
      L.bk = elem_slice(qkv_b, d, d, "k");
      L.bv = elem_slice(qkv_b, 2 * d, d, "v");
    } else {
      L.bq = get("attn_q.bias");
      L.bk = get("attn_k.bias");
      L.bv = get("attn_v.bias");
    }
    L.wo = get("attn_output.weight");
    L.bo = get("attn_output.bias");
    L.attn_out_norm = get("attn_output_norm.weight");
    L.attn_out_norm_b = get("attn_output_norm.bias");
    L.ffn_norm = get("ffn_norm.weight");
    L.w_gate = get("ffn_gate.weight");
    L.w_up = get("ffn_up.weight");
    if (!L.w_gate.data && L.w_up.data && L.w_up.ne[1] == 2 * ff) {  // fused gate|up (GeGLU)
      const TensorView up = L.w_up;
      L.w_gate = row_slice(up, 0, ff, "gate");
      L.w_up = row_slice(up, ff, ff, "up");
    }
    L.b_up = get("ffn_up.bias");
    if (cfg.n_expert > 0) {
      L.router = get("ffn_gate_inp.weight");
      if (L.router.data) {
        CACHET_RETURN_IF_ERROR(split_experts(get("ffn_up_exps.weight"), "ffn_up_exps", d, ff, cfg.n_expert, l, &L.up_exps));
        CACHET_RETURN_IF_ERROR(
            split_experts(get("ffn_down_exps.weight"), "ffn_down_exps", ff, d, cfg.n_expert, l, &L.down_exps));
      }
    }
    L.w_down = get("ffn_down.weight");
    L.b_down = get("ffn_down.bias");
    L.out_norm = get("layer_output_norm.weight");
    L.out_norm_b = get("layer_output_norm.bias");
    w.layers.push_back(std::move(L));
  }
  CACHET_RETURN_IF_ERROR(r.finish());
  cfg.n_cls_out = w.cls_out.data ? w.cls_out.ne[1] : (w.cls.data ? d : 0);
  CACHET_RETURN_IF_ERROR(cfg.validate());

  // Shapes and types; vectors to f32.
  std::vector<AlignedBuffer<float>> owned;
  auto vec = [&](TensorView* t, int64_t n, int64_t layer, const char* what) -> Status {
    return t->data ? vector_to_f32(t, n, &owned, layer, what) : Status::ok();
  };
  CACHET_RETURN_IF_ERROR(check_tensor(w.tok_embd, "token_embd.weight", d, cfg.n_vocab, -1));
  if (w.type_embd.data) CACHET_RETURN_IF_ERROR(check_tensor(w.type_embd, "token_types.weight", d, w.type_embd.ne[1], -1));
  if (!spec.rope) CACHET_RETURN_IF_ERROR(check_tensor(w.pos_embd, "position_embd.weight", d, w.pos_embd.ne[1], -1));
  CACHET_RETURN_IF_ERROR(check_tensor(w.embd_norm, "token_embd_norm.weight", d, 1, -1));
  CACHET_RETURN_IF_ERROR(vec(&w.embd_norm, d, -1, "token_embd_norm.weight"));
  CACHET_RETURN_IF_ERROR(vec(&w.embd_norm_b, d, -1, "token_embd_norm.bias"));
  CACHET_RETURN_IF_ERROR(vec(&w.output_norm, d, -1, "output_norm.weight"));
  if (w.cls.data) CACHET_RETURN_IF_ERROR(check_tensor(w.cls, "cls.weight", d, d, -1));
  CACHET_RETURN_IF_ERROR(vec(&w.cls_b, d, -1, "cls.bias"));
  CACHET_RETURN_IF_ERROR(vec(&w.cls_norm, d, -1, "cls.norm.weight"));
  if (w.cls_out.data) CACHET_RETURN_IF_ERROR(check_tensor(w.cls_out, "cls.output.weight", d, cfg.n_cls_out, -1));
  CACHET_RETURN_IF_ERROR(vec(&w.cls_out_b, cfg.n_cls_out, -1, "cls.output.bias"));
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    EncoderLayerWeights& L = w.layers[l];
    for (auto [t, what] : {std::pair{&L.wq, "attn_q"}, {&L.wk, "attn_k"}, {&L.wv, "attn_v"}, {&L.wo, "attn_output"}})
      CACHET_RETURN_IF_ERROR(check_tensor(*t, what, d, d, l));
    if (L.router.data) {
      CACHET_RETURN_IF_ERROR(check_tensor(L.router, "ffn_gate_inp", d, cfg.n_expert, l));
      for (int64_t e = 0; e < cfg.n_expert; ++e) {
        CACHET_RETURN_IF_ERROR(check_tensor(L.up_exps[e], "ffn_up_exps", d, ff, l));
        CACHET_RETURN_IF_ERROR(check_tensor(L.down_exps[e], "ffn_down_exps", ff, d, l));
      }
      if (L.w_up.data || L.w_down.data) return invalid_argument("layer " + std::to_string(l) + " has experts and a dense FFN");
    } else {
      CACHET_RETURN_IF_ERROR(check_tensor(L.w_up, "ffn_up", d, ff, l));
      if (L.w_gate.data) CACHET_RETURN_IF_ERROR(check_tensor(L.w_gate, "ffn_gate", d, ff, l));
      CACHET_RETURN_IF_ERROR(check_tensor(L.w_down, "ffn_down", ff, d, l));
    }
    for (auto [t, what] : {std::pair{&L.bq, "attn_q.bias"}, {&L.bk, "attn_k.bias"}, {&L.bv, "attn_v.bias"},
                           {&L.bo, "attn_output.bias"}, {&L.attn_norm, "attn_norm"}, {&L.ffn_norm, "ffn_norm"},
                           {&L.attn_out_norm, "attn_output_norm"}, {&L.attn_out_norm_b, "attn_output_norm.bias"},
                           {&L.b_down, "ffn_down.bias"}, {&L.out_norm, "layer_output_norm"},
                           {&L.out_norm_b, "layer_output_norm.bias"}})
      CACHET_RETURN_IF_ERROR(vec(t, d, l, what));
    CACHET_RETURN_IF_ERROR(vec(&L.b_up, ff, l, "ffn_up.bias"));
    // Post-norm (both norms) or pre-norm (an FFN norm; layer 0's attention norm may be the identity).
    const bool post = L.attn_out_norm.data && L.out_norm.data;
    const bool pre = L.ffn_norm.data && !L.attn_out_norm.data && !L.out_norm.data;
    if (!post && !pre)
      return invalid_argument(cfg.arch + ": layer " + std::to_string(l) +
                              " has neither post-norms (attn_output_norm, layer_output_norm) nor pre-norms");
  }
  CACHET_ASSIGN_OR_RETURN(SpecialTokens sp, read_special_tokens(*f, cfg.n_vocab));
  std::vector<AlignedBuffer<uint8_t>> packed;
  auto pack = [&](TensorView* t) {
    if (!t->data || opts.precise || !packable(t->type)) return;
    packed.emplace_back();
    pack_weight(*pool, t, &packed.back());
  };
  for (EncoderLayerWeights& L : w.layers) {
    for (TensorView* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.router}) pack(t);
    for (auto* v : {&L.up_exps, &L.down_exps})
      for (TensorView& t : *v) pack(&t);
  }
  std::vector<TensorView> all;
  for (const auto& ti : f->tensors()) all.push_back(view_of_tensor(&ti));
  return std::unique_ptr<Model>(new EncoderModel(std::move(cfg), spec, std::move(w), std::move(all), sp, std::move(f),
                                                 std::move(pool), std::move(owned), std::move(packed)));
}

}  // namespace cachet
