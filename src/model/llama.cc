#include "model/llama.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "io/gguf.h"
#include "kernels/kernels.h"
#include "model/ops.h"

namespace cachet {

namespace {

class LlamaModel final : public Model {
 public:
  LlamaModel(ModelConfig cfg, LlamaWeights w, std::vector<TensorView> all, SpecialTokens special,
             std::shared_ptr<void> storage, std::unique_ptr<GgufFile> gguf, std::shared_ptr<ThreadPool> pool,
             std::vector<AlignedBuffer<float>> owned, std::vector<AlignedBuffer<uint8_t>> packed)
      : cfg_(std::move(cfg)), w_(std::move(w)), all_(std::move(all)), special_(special),
        storage_(std::move(storage)), gguf_(std::move(gguf)), pool_(std::move(pool)), owned_(std::move(owned)),
        packed_(std::move(packed)) {}

  const ModelConfig& config() const override { return cfg_; }
  const std::vector<TensorView>& tensors() const override { return all_; }
  const SpecialTokens& special_tokens() const override { return special_; }
  const GgufFile* gguf() const override { return gguf_.get(); }
  ThreadPool& pool() override { return *pool_; }

  Status forward(const ForwardBatch& batch, float* logits) override;

 private:
  Status check_batch(const ForwardBatch& b) const;
  void ensure_scratch(int n_tokens);

  ModelConfig cfg_;
  LlamaWeights w_;
  std::vector<TensorView> all_;
  SpecialTokens special_;
  std::shared_ptr<void> storage_;
  std::unique_ptr<GgufFile> gguf_;
  std::shared_ptr<ThreadPool> pool_;
  std::vector<AlignedBuffer<float>> owned_;          // f32 copies of norm weights stored in other types
  std::vector<AlignedBuffer<uint8_t>> packed_;       // repacked matmul weights (kernels/packed.h)

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
  AlignedBuffer<float> cos_sin_;  // [n_tokens, rope_dim]
};

Status LlamaModel::check_batch(const ForwardBatch& b) const {
  const size_t n = b.token_ids.size();
  if (b.positions.size() != n || b.seq_index.size() != n || b.want_logits.size() != n)
    return invalid_argument("forward batch: token, position, sequence and logits lists differ in length");
  for (size_t i = 0; i < n; ++i) {
    if (b.token_ids[i] < 0 || b.token_ids[i] >= cfg_.n_vocab)
      return invalid_argument("token id " + std::to_string(b.token_ids[i]) + " is outside the vocabulary (0.." +
                              std::to_string(cfg_.n_vocab - 1) + ")");
    if (b.seq_index[i] < 0 || static_cast<size_t>(b.seq_index[i]) >= b.seqs.size())
      return invalid_argument("forward batch: bad sequence index");
    const KvSequence* s = b.seqs[b.seq_index[i]];
    if (b.positions[i] < 0 || b.positions[i] >= s->capacity())
      return out_of_range("position " + std::to_string(b.positions[i]) + " is outside the KV cache (capacity " +
                          std::to_string(s->capacity()) + ")");
  }
  return Status::ok();
}

void LlamaModel::ensure_scratch(int n) {
  if (n <= scratch_tokens_) return;
  scratch_tokens_ = n;
  x_.resize(n * cfg_.n_embd);
  xn_.resize(n * cfg_.n_embd);
  q_.resize(n * cfg_.q_dim());
  k_.resize(n * cfg_.kv_dim());
  v_.resize(n * cfg_.kv_dim());
  attn_.resize(n * cfg_.q_dim());
  proj_.resize(n * cfg_.n_embd);
  gate_.resize(n * cfg_.n_ff);
  up_.resize(n * cfg_.n_ff);
  cos_sin_.resize(n * cfg_.rope_dim);
}

namespace {
std::vector<int64_t> wshape(const TensorView& w) {
  std::vector<int64_t> s(w.ne.begin(), w.ne.end());
  while (s.size() > 1 && s.back() == 1) s.pop_back();
  return s;
}
}  // namespace

Status LlamaModel::forward(const ForwardBatch& batch, float* logits) {
  CACHET_RETURN_IF_ERROR(check_batch(batch));
  const int T = batch.n_tokens();
  if (T == 0) return Status::ok();
  ensure_scratch(T);
  ThreadPool& pool = *pool_;
  const Kernels& kern = kernels();
  const int64_t d = cfg_.n_embd, kvd = cfg_.kv_dim(), ff = cfg_.n_ff;
  const float eps = static_cast<float>(cfg_.rms_eps);

  const int64_t H = cfg_.n_head, KH = cfg_.n_head_kv, hd = cfg_.head_dim;
  if (tracer_) {
    tracer_->begin_forward(T, batch.positions[0], static_cast<int>(cfg_.n_layer));
    tracer_->op({"embed", w_.tok_embd.name, dtype_name(w_.tok_embd.type), wshape(w_.tok_embd), {T}, {T, d},
                 "token ids -> rows of the embedding"});
  }
  // Layer 0's ops are reported; the others repeat them.
  auto trace = [&](int64_t l, TraceOp op) {
    if (tracer_ && l == 0) tracer_->op(std::move(op));
  };
  auto trace_mm = [&](int64_t l, const TensorView& w, int64_t n_in, int64_t n_out, const char* note) {
    trace(l, {"matmul", w.name, dtype_name(w.type), wshape(w), {T, n_in}, {T, n_out}, note});
  };
  for (int t = 0; t < T; ++t)
    kern.dequantize_row(w_.tok_embd.type, w_.tok_embd.row(batch.token_ids[t]), x_.data() + t * d, d);
  rope_table(batch.positions.data(), T, static_cast<int>(cfg_.rope_dim), cfg_.rope_theta, cos_sin_.data());

  for (int64_t l = 0; l < cfg_.n_layer; ++l) {
    const LlamaLayerWeights& L = w_.layers[l];
    // Attention block.
    pool.parallel_for(T, [&](int, int64_t b, int64_t e) {
      rms_norm(x_.data() + b * d, reinterpret_cast<const float*>(L.attn_norm.data), xn_.data() + b * d,
               static_cast<int>(e - b), d, eps);
    });
    trace(l, {"rms_norm", L.attn_norm.name, "F32", wshape(L.attn_norm), {T, d}, {T, d}, "attention input"});
    matmul_multi(pool, {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}}, xn_.data(), T);
    trace_mm(l, L.wq, d, H * hd, "Q");
    trace_mm(l, L.wk, d, KH * hd, "K");
    trace_mm(l, L.wv, d, KH * hd, "V");
    rope(q_.data(), cos_sin_.data(), T, static_cast<int>(cfg_.n_head), static_cast<int>(cfg_.head_dim),
         static_cast<int>(cfg_.rope_dim), cfg_.rope_neox);
    rope(k_.data(), cos_sin_.data(), T, static_cast<int>(cfg_.n_head_kv), static_cast<int>(cfg_.head_dim),
         static_cast<int>(cfg_.rope_dim), cfg_.rope_neox);
    trace(l, {"rope", "", "", {}, {T, H + KH, hd}, {T, H + KH, hd},
              std::string(cfg_.rope_neox ? "NeoX" : "interleaved") + " rotation of Q and K, theta " +
                  std::to_string(static_cast<int64_t>(cfg_.rope_theta))});
    trace(l, {"kv_store", "", "", {}, {T, 2, KH * hd}, {T, 2, KH * hd},
              "K and V of these tokens written at their positions"});
    for (int t = 0; t < T; ++t) {
      KvSequence* s = batch.seqs[batch.seq_index[t]];
      kern.kv_store(s->dtype(), k_.data() + t * kvd, s->k_row(static_cast<int>(l), batch.positions[t]),
                    static_cast<int>(kvd));
      kern.kv_store(s->dtype(), v_.data() + t * kvd, s->v_row(static_cast<int>(l), batch.positions[t]),
                    static_cast<int>(kvd));
    }
    attention(pool, {q_.data(), attn_.data(), T, batch.positions.data(), batch.seq_index.data(), batch.seqs.data(),
                     static_cast<int>(l), static_cast<int>(cfg_.n_head), static_cast<int>(cfg_.n_head_kv),
                     static_cast<int>(cfg_.head_dim)});
    trace(l, {"attention", "", "", {}, {T, H, hd}, {T, H, hd},
              "scores = Q K^T / sqrt(" + std::to_string(hd) + ") over positions 0..pos (causal), " +
                  std::to_string(H / KH) + " query heads per KV head; softmax; weights @ V"});
    matmul(pool, L.wo, attn_.data(), T, proj_.data());
    trace_mm(l, L.wo, H * hd, d, "attention output projection");
    for (int64_t i = 0; i < T * d; ++i) x_[i] += proj_[i];
    trace(l, {"residual", "", "", {}, {T, d}, {T, d}, "x = x + attention"});

    // Feed-forward block (SwiGLU).
    pool.parallel_for(T, [&](int, int64_t b, int64_t e) {
      rms_norm(x_.data() + b * d, reinterpret_cast<const float*>(L.ffn_norm.data), xn_.data() + b * d,
               static_cast<int>(e - b), d, eps);
    });
    trace(l, {"rms_norm", L.ffn_norm.name, "F32", wshape(L.ffn_norm), {T, d}, {T, d}, "feed-forward input"});
    matmul_multi(pool, {{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}}, xn_.data(), T);
    trace_mm(l, L.w_gate, d, ff, "gate");
    trace_mm(l, L.w_up, d, ff, "up");
    pool.parallel_for(
        T * ff, [&](int, int64_t b, int64_t e) { silu_mul(gate_.data() + b, up_.data() + b, e - b); }, 64);
    trace(l, {"silu_mul", "", "", {}, {T, ff}, {T, ff}, "silu(gate) * up"});
    matmul(pool, L.w_down, gate_.data(), T, proj_.data());
    trace_mm(l, L.w_down, ff, d, "down");
    for (int64_t i = 0; i < T * d; ++i) x_[i] += proj_[i];
    trace(l, {"residual", "", "", {}, {T, d}, {T, d}, "x = x + feed-forward"});
  }

  // Final norm and head, only for the rows that want logits (gathered to the front of xn_).
  int n_out = 0;
  for (int t = 0; t < T; ++t) {
    if (!batch.want_logits[t]) continue;
    rms_norm(x_.data() + t * d, reinterpret_cast<const float*>(w_.output_norm.data), xn_.data() + n_out * d, 1, d,
             eps);
    ++n_out;
  }
  if (n_out > 0) matmul(pool, w_.output, xn_.data(), n_out, logits);
  if (tracer_) {
    tracer_->op({"rms_norm", w_.output_norm.name, "F32", wshape(w_.output_norm), {n_out, d}, {n_out, d},
                 "final norm, only rows that need logits"});
    tracer_->op({"lm_head", w_.output.name, dtype_name(w_.output.type), wshape(w_.output), {n_out, d},
                 {n_out, cfg_.n_vocab}, cfg_.tied_output ? "tied to the token embedding" : "separate head"});
  }
  return Status::ok();
}

Status check_tensor(const TensorView& t, const char* what, int64_t ne0, int64_t ne1, int64_t layer) {
  const std::string name = t.name.empty() ? std::string(what) : t.name;
  if (!t.data) {
    return not_found("missing tensor " + std::string(what) + (layer >= 0 ? " of layer " + std::to_string(layer) : ""));
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

Status norm_to_f32(TensorView* t, int64_t n, std::vector<AlignedBuffer<float>>* owned, int64_t layer,
                   const char* what) {
  CACHET_RETURN_IF_ERROR(check_tensor(*t, what, n, 1, layer));
  if (t->type == DType::kF32) return Status::ok();
  AlignedBuffer<float> buf(n);
  kernels().dequantize_row(t->type, t->data, buf.data(), n);
  t->data = reinterpret_cast<const uint8_t*>(buf.data());
  t->type = DType::kF32;
  t->row_bytes = n * sizeof(float);
  owned->push_back(std::move(buf));
  return Status::ok();
}

TensorView view_of(const GgufTensorInfo* ti) {
  TensorView v;
  if (!ti) return v;
  v.name = ti->name;
  v.type = ti->type;
  v.ne = ti->ne;
  v.data = ti->data;
  v.row_bytes = *row_bytes(ti->type, ti->ne[0]);
  return v;
}

Result<std::unique_ptr<Model>> llama_from_gguf(std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool,
                                               const LoadOptions& opts) {
  CACHET_ASSIGN_OR_RETURN(std::string arch, f->get_string("general.architecture"));
  CACHET_ASSIGN_OR_RETURN(ModelConfig cfg, llama_config_from_gguf(*f, arch));
  LlamaWeights w;
  auto get = [&](const std::string& n) { return view_of(f->find_tensor(n)); };
  w.tok_embd = get("token_embd.weight");
  w.output_norm = get("output_norm.weight");
  w.output = cfg.tied_output ? w.tok_embd : get("output.weight");
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LlamaLayerWeights L;
    L.attn_norm = get(p + "attn_norm.weight");
    L.wq = get(p + "attn_q.weight");
    L.wk = get(p + "attn_k.weight");
    L.wv = get(p + "attn_v.weight");
    L.wo = get(p + "attn_output.weight");
    L.ffn_norm = get(p + "ffn_norm.weight");
    L.w_gate = get(p + "ffn_gate.weight");
    L.w_up = get(p + "ffn_up.weight");
    L.w_down = get(p + "ffn_down.weight");
    w.layers.push_back(L);
  }
  SpecialTokens sp;
  auto special = [&](const char* key, std::optional<int32_t>* out) -> Status {
    const std::string k = std::string("tokenizer.ggml.") + key + "_token_id";
    if (!f->find(k)) return Status::ok();
    CACHET_ASSIGN_OR_RETURN(uint64_t id, f->get_uint(k));
    if (id >= static_cast<uint64_t>(cfg.n_vocab))
      return invalid_argument(k + " = " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(cfg.n_vocab));
    *out = static_cast<int32_t>(id);
    return Status::ok();
  };
  CACHET_RETURN_IF_ERROR(special("bos", &sp.bos));
  CACHET_RETURN_IF_ERROR(special("eos", &sp.eos));
  CACHET_RETURN_IF_ERROR(special("eot", &sp.eot));
  CACHET_RETURN_IF_ERROR(special("padding", &sp.pad));
  CACHET_RETURN_IF_ERROR(special("unknown", &sp.unk));
  if (const GgufValue* toks = f->find("tokenizer.ggml.tokens"); toks && toks->type == GgufType::kArray) {
    if (static_cast<int64_t>(toks->count) != cfg.n_vocab)
      return invalid_argument("tokenizer has " + std::to_string(toks->count) + " tokens but the model " +
                              std::to_string(cfg.n_vocab) + " embedding rows");
  }
  std::vector<TensorView> all;
  for (const auto& ti : f->tensors()) all.push_back(view_of(&ti));
  return make_llama_model(std::move(cfg), std::move(w), std::move(all), sp, nullptr, std::move(f), std::move(pool),
                          opts);
}

}  // namespace

Status validate_llama_weights(const ModelConfig& c, LlamaWeights* w, std::vector<AlignedBuffer<float>>* owned) {
  CACHET_RETURN_IF_ERROR(check_tensor(w->tok_embd, "token_embd.weight", c.n_embd, c.n_vocab, -1));
  CACHET_RETURN_IF_ERROR(check_tensor(w->output, "output.weight", c.n_embd, c.n_vocab, -1));
  CACHET_RETURN_IF_ERROR(norm_to_f32(&w->output_norm, c.n_embd, owned, -1, "output_norm.weight"));
  if (static_cast<int64_t>(w->layers.size()) != c.n_layer)
    return invalid_argument("expected " + std::to_string(c.n_layer) + " layers of weights");
  for (int64_t l = 0; l < c.n_layer; ++l) {
    LlamaLayerWeights& L = w->layers[l];
    CACHET_RETURN_IF_ERROR(norm_to_f32(&L.attn_norm, c.n_embd, owned, l, "attn_norm"));
    CACHET_RETURN_IF_ERROR(norm_to_f32(&L.ffn_norm, c.n_embd, owned, l, "ffn_norm"));
    CACHET_RETURN_IF_ERROR(check_tensor(L.wq, "attn_q", c.n_embd, c.q_dim(), l));
    CACHET_RETURN_IF_ERROR(check_tensor(L.wk, "attn_k", c.n_embd, c.kv_dim(), l));
    CACHET_RETURN_IF_ERROR(check_tensor(L.wv, "attn_v", c.n_embd, c.kv_dim(), l));
    CACHET_RETURN_IF_ERROR(check_tensor(L.wo, "attn_output", c.q_dim(), c.n_embd, l));
    CACHET_RETURN_IF_ERROR(check_tensor(L.w_gate, "ffn_gate", c.n_embd, c.n_ff, l));
    CACHET_RETURN_IF_ERROR(check_tensor(L.w_up, "ffn_up", c.n_embd, c.n_ff, l));
    CACHET_RETURN_IF_ERROR(check_tensor(L.w_down, "ffn_down", c.n_ff, c.n_embd, l));
  }
  return Status::ok();
}

Result<std::unique_ptr<Model>> make_llama_model(ModelConfig cfg, LlamaWeights weights,
                                                std::vector<TensorView> all_tensors, SpecialTokens special,
                                                std::shared_ptr<void> storage, std::unique_ptr<GgufFile> gguf,
                                                std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
  std::vector<AlignedBuffer<float>> owned;
  CACHET_RETURN_IF_ERROR(validate_llama_weights(cfg, &weights, &owned));
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
  for (auto& L : weights.layers)
    for (TensorView* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) pack(t);
  pack(&weights.output);
  return std::unique_ptr<Model>(new LlamaModel(std::move(cfg), std::move(weights), std::move(all_tensors), special,
                                               std::move(storage), std::move(gguf), std::move(pool),
                                               std::move(owned), std::move(packed)));
}

void register_llama_arch() { register_arch("llama", llama_from_gguf); }

}  // namespace cachet
