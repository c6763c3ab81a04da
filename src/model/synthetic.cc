#include "model/synthetic.h"

#include <cmath>
#include <random>
#include <vector>

#include "io/gguf_writer.h"

namespace cachet {

namespace {

// Uniform in [-a, a) from a 64-bit engine: identical on every platform for a seed.
class Uniform {
 public:
  explicit Uniform(uint64_t seed) : rng_(seed) {}
  float next(float a) { return (static_cast<float>(rng_() >> 40) * 0x1.0p-24f * 2.0f - 1.0f) * a; }

 private:
  std::mt19937_64 rng_;
};

}  // namespace

Status write_synthetic_llama(const SyntheticSpec& s, const std::string& path) {
  if (s.n_embd % s.n_head != 0 || s.n_head % s.n_head_kv != 0)
    return invalid_argument("synthetic model: heads must divide the width and KV heads the heads");
  const int64_t hd = s.n_embd / s.n_head;
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "cachet synthetic");
  w.set_u32("general.alignment", 32);
  w.set_u32("llama.context_length", static_cast<uint32_t>(s.n_ctx));
  w.set_u32("llama.embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32("llama.block_count", static_cast<uint32_t>(s.n_layer));
  w.set_u32("llama.feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32("llama.attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32("llama.attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.set_u32("llama.rope.dimension_count", static_cast<uint32_t>(hd));
  w.set_f32("llama.rope.freq_base", static_cast<float>(s.rope_theta));
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u32("llama.vocab_size", static_cast<uint32_t>(s.n_vocab));
  if (s.rope_neox) w.set_bool("cachet.rope.neox", true);
  if (s.with_vocab) {
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
    tokens.reserve(s.n_vocab);
    for (int64_t i = 0; i < s.n_vocab; ++i) {
      std::string t;
      int32_t type = 1;  // normal
      if (i == 0) { t = "<unk>"; type = 2; }
      else if (i == 1) { t = "<s>"; type = 3; }
      else if (i == 2) { t = "</s>"; type = 3; }
      else if (i < 3 + 256) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", static_cast<unsigned>(i - 3));
        t = buf;
        type = 6;  // byte
      } else {
        t = "\xE2\x96\x81t" + std::to_string(i);
      }
      tokens.push_back(t);
      scores.push_back(-static_cast<float>(i));
      types.push_back(type);
    }
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_f32_array("tokenizer.ggml.scores", scores);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  }

  Uniform u(s.seed);
  std::vector<float> buf;
  auto add = [&](const std::string& name, DType type, int64_t ne0, int64_t ne1, float a, float offset) {
    buf.resize(ne0 * ne1);
    for (float& x : buf) x = offset + u.next(a);
    return w.add_tensor_f32(name, type, ne1 == 1 ? std::vector<int64_t>{ne0} : std::vector<int64_t>{ne0, ne1},
                            buf.data());
  };
  auto lim = [](int64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
  CACHET_RETURN_IF_ERROR(add("token_embd.weight", s.embd_type, s.n_embd, s.n_vocab, 1.0f, 0.0f));
  CACHET_RETURN_IF_ERROR(add("output_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
  if (!s.tied_output)
    CACHET_RETURN_IF_ERROR(add("output.weight", s.type, s.n_embd, s.n_vocab, lim(s.n_embd), 0.0f));
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    CACHET_RETURN_IF_ERROR(add(p + "attn_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
    CACHET_RETURN_IF_ERROR(add(p + "attn_q.weight", s.type, s.n_embd, s.n_head * hd, lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "attn_k.weight", s.type, s.n_embd, s.n_head_kv * hd, lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "attn_v.weight", s.type, s.n_embd, s.n_head_kv * hd, lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "attn_output.weight", s.type, s.n_head * hd, s.n_embd, lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_gate.weight", s.type, s.n_embd, s.n_ff, lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_up.weight", s.type, s.n_embd, s.n_ff, lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_down.weight", s.type, s.n_ff, s.n_embd, lim(s.n_ff), 0.0f));
  }
  return w.write(path);
}

}  // namespace cachet
