#include "io/llama2c.h"

#include <cstring>

#include "base/checked_math.h"
#include "base/mmap_file.h"
#include "io/gguf.h"
#include "model/decoder.h"

namespace cachet {

namespace {

constexpr size_t kHeaderBytes = 7 * sizeof(int32_t);

// Number of f32 values the header implies, or nullopt when a field is implausible or it overflows.
std::optional<uint64_t> expected_floats(const Llama2cHeader& h, bool* shared) {
  if (h.dim <= 0 || h.hidden_dim <= 0 || h.n_layers <= 0 || h.n_heads <= 0 || h.n_kv_heads <= 0 ||
      h.vocab_size == 0 || h.seq_len <= 0 || h.dim % h.n_heads != 0)
    return std::nullopt;
  *shared = h.vocab_size > 0;
  const uint64_t dim = h.dim, hidden = h.hidden_dim, L = h.n_layers, heads = h.n_heads, kv = h.n_kv_heads;
  const uint64_t vocab = static_cast<uint64_t>(h.vocab_size > 0 ? h.vocab_size : -static_cast<int64_t>(h.vocab_size));
  const uint64_t hs = dim / heads;
  uint64_t total = 0;
  bool ok = true;
  auto add = [&](std::initializer_list<uint64_t> dims) {
    uint64_t p = 1;
    for (uint64_t x : dims) {
      auto m = checked_mul(p, x);
      if (!m) ok = false;
      p = m.value_or(0);
    }
    auto s = checked_add(total, p);
    if (!s) ok = false;
    total = s.value_or(0);
  };
  add({vocab, dim});                 // token_embedding_table
  add({L, dim});                     // rms_att_weight
  add({L, dim, heads * hs});         // wq
  add({L, dim, kv * hs});            // wk
  add({L, dim, kv * hs});            // wv
  add({L, heads * hs, dim});         // wo
  add({L, dim});                     // rms_ffn_weight
  add({L, hidden, dim});             // w1
  add({L, dim, hidden});             // w2
  add({L, hidden, dim});             // w3
  add({dim});                        // rms_final_weight
  add({static_cast<uint64_t>(h.seq_len), hs});  // freq_cis_real + freq_cis_imag (hs/2 each)
  if (!*shared) add({vocab, dim});   // wcls
  if (!ok) return std::nullopt;
  return total;
}

}  // namespace

bool looks_like_llama2c(const uint8_t* data, size_t size) {
  if (size < kHeaderBytes) return false;
  Llama2cHeader h;
  std::memcpy(&h, data, kHeaderBytes);
  bool shared;
  auto n = expected_floats(h, &shared);
  return n && checked_mul(*n, 4).value_or(0) + kHeaderBytes == size;
}

Result<std::unique_ptr<Model>> load_llama2c(const std::string& path, std::shared_ptr<ThreadPool> pool,
                                           const LoadOptions& opts) {
  CACHET_ASSIGN_OR_RETURN(MappedFile mf, MappedFile::open(path));
  if (mf.size() < kHeaderBytes) return invalid_argument(path + ": too small for a llama2.c checkpoint");
  Llama2cHeader h;
  std::memcpy(&h, mf.data(), kHeaderBytes);
  bool shared = true;
  auto n = expected_floats(h, &shared);
  if (!n) return invalid_argument(path + ": llama2.c header has implausible fields");
  if (*n * 4 + kHeaderBytes != mf.size())
    return invalid_argument(path + ": llama2.c header implies " + std::to_string(*n * 4 + kHeaderBytes) +
                            " bytes, file has " + std::to_string(mf.size()));
  if (h.n_heads % h.n_kv_heads != 0) return invalid_argument(path + ": n_kv_heads does not divide n_heads");

  ModelConfig c;
  c.arch = "llama";
  c.n_embd = h.dim;
  c.n_ff = h.hidden_dim;
  c.n_layer = h.n_layers;
  c.n_head = h.n_heads;
  c.n_head_kv = h.n_kv_heads;
  c.n_vocab = shared ? h.vocab_size : -static_cast<int64_t>(h.vocab_size);
  c.n_ctx_train = h.seq_len;
  c.head_dim = h.dim / h.n_heads;
  c.rope_dim = c.head_dim;
  c.rope_theta = 10000.0;
  c.rope_neox = false;  // run.c rotates adjacent pairs
  c.rms_eps = 1e-5;
  c.tied_output = shared;
  CACHET_RETURN_IF_ERROR(c.validate().with_context(path));

  auto file = std::make_shared<MappedFile>(std::move(mf));
  const uint8_t* p = file->data() + kHeaderBytes;
  std::vector<TensorView> all;
  // Takes the next tensor: [ne0, ne1] per layer (n_layers of them when `per_layer`).
  auto take = [&](const std::string& name, int64_t ne0, int64_t ne1, int64_t count) {
    TensorView v;
    v.name = name;
    v.type = DType::kF32;
    v.ne = {ne0, ne1, count, 1};
    v.data = p;
    v.row_bytes = ne0 * sizeof(float);
    p += ne0 * ne1 * count * sizeof(float);
    all.push_back(v);
    return v;
  };
  auto layer = [&](const TensorView& stacked, int64_t l) {
    TensorView v = stacked;
    v.name = stacked.name + "." + std::to_string(l);
    v.ne = {stacked.ne[0], stacked.ne[1], 1, 1};
    v.data = stacked.data + l * stacked.ne[0] * stacked.ne[1] * sizeof(float);
    return v;
  };
  const int64_t L = c.n_layer;
  DecoderWeights w;
  w.tok_embd = take("token_embedding_table", c.n_embd, c.n_vocab, 1);
  TensorView rms_att = take("rms_att_weight", c.n_embd, 1, L);
  TensorView wq = take("wq", c.n_embd, c.q_dim(), L);
  TensorView wk = take("wk", c.n_embd, c.kv_dim(), L);
  TensorView wv = take("wv", c.n_embd, c.kv_dim(), L);
  TensorView wo = take("wo", c.q_dim(), c.n_embd, L);
  TensorView rms_ffn = take("rms_ffn_weight", c.n_embd, 1, L);
  TensorView w1 = take("w1", c.n_embd, c.n_ff, L);
  TensorView w2 = take("w2", c.n_ff, c.n_embd, L);
  TensorView w3 = take("w3", c.n_embd, c.n_ff, L);
  w.output_norm = take("rms_final_weight", c.n_embd, 1, 1);
  take("freq_cis", c.head_dim, h.seq_len, 1);  // precomputed RoPE table; we compute our own
  w.output = shared ? w.tok_embd : take("wcls", c.n_embd, c.n_vocab, 1);
  for (int64_t l = 0; l < L; ++l) {
    DecoderLayerWeights lw;
    lw.attn_norm = layer(rms_att, l);
    lw.wq = layer(wq, l);
    lw.wk = layer(wk, l);
    lw.wv = layer(wv, l);
    lw.wo = layer(wo, l);
    lw.ffn_norm = layer(rms_ffn, l);
    lw.w_gate = layer(w1, l);
    lw.w_down = layer(w2, l);
    lw.w_up = layer(w3, l);
    w.layers.push_back(lw);
  }
  SpecialTokens sp;
  if (c.n_vocab > 2) {
    sp.bos = 1;  // llama2.c's sentencepiece convention
    sp.eos = 2;
  }
  return make_decoder_model(std::move(c), std::move(w), std::move(all), sp, std::move(file), nullptr, std::move(pool),
                          opts);
}

}  // namespace cachet
