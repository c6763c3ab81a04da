// Pieces the synthetic-model writers share (model/synthetic.h): not part of any public interface.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cachet/status.h"
#include "io/gguf_writer.h"
#include "model/synthetic.h"

namespace cachet {

// Uniform in [-a, a) from a 64-bit engine: identical on every platform for a seed.
class Uniform {
 public:
  explicit Uniform(uint64_t seed) : rng_(seed) {}
  float next(float a) { return (static_cast<float>(rng_() >> 40) * 0x1.0p-24f * 2.0f - 1.0f) * a; }

 private:
  std::mt19937_64 rng_;
};

// Tensors of offset + uniform [-lim, lim) values from one engine, drawn in call order (so a file is the same
// bits for a seed): add(name, type, ne0, ne1, ...) writes a matrix (a vector when ne1 == 1), nd() any shape.
class RandomTensors {
 public:
  RandomTensors(GgufWriter* w, uint64_t seed) : w_(w), u_(seed) {}
  Status nd(const std::string& name, DType type, std::vector<int64_t> ne, float lim, float offset) {
    int64_t n = 1;
    for (int64_t x : ne) n *= x;
    buf_.resize(static_cast<size_t>(n));
    for (float& x : buf_) x = offset + u_.next(lim);
    return w_->add_tensor_f32(name, type, ne, buf_.data());
  }
  Status operator()(const std::string& name, DType type, int64_t ne0, int64_t ne1, float lim, float offset) {
    return nd(name, type, ne1 == 1 ? std::vector<int64_t>{ne0} : std::vector<int64_t>{ne0, ne1}, lim, offset);
  }

 private:
  GgufWriter* w_;
  Uniform u_;
  std::vector<float> buf_;
};

// The uniform limit that keeps a matmul's outputs near unit scale: sqrt(3 / fan_in).
inline float fan_in_limit(int64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); }

// A layer's attn_q, attn_k, attn_v and attn_output (prefix p: "blk.N."), in that order, Q qd and K/V kvd wide.
inline Status add_attention(RandomTensors& add, const SyntheticSpec& s, const std::string& p, int64_t qd,
                            int64_t kvd) {
  const float lim = fan_in_limit(s.n_embd);
  CACHET_RETURN_IF_ERROR(add(p + "attn_q.weight", s.type, s.n_embd, qd, lim, 0.0f));
  CACHET_RETURN_IF_ERROR(add(p + "attn_k.weight", s.type, s.n_embd, kvd, lim, 0.0f));
  CACHET_RETURN_IF_ERROR(add(p + "attn_v.weight", s.type, s.n_embd, kvd, lim, 0.0f));
  return add(p + "attn_output.weight", s.type, qd, s.n_embd, fan_in_limit(qd), 0.0f);
}

// general.* keys and the {arch}.* sizes every decoder file has (feed_forward_length unless the writer gives
// one per layer).
void add_common_keys(GgufWriter* w, const SyntheticSpec& s, bool ff_key = true);
// rope.dimension_count, rope.freq_base and, when the spec scales RoPE, its rope.scaling.* keys.
void add_rope_keys(GgufWriter* w, const SyntheticSpec& s, int64_t rope_dim);
// The decoders' placeholder SentencePiece vocabulary.
void add_spm_vocab(GgufWriter* w, int64_t n_vocab);

// qwen35 / qwen35moe (model/synthetic_hybrid.cc).
Status write_synthetic_qwen35(const SyntheticSpec& s, const std::string& path);
// lfm2 (model/synthetic_lfm2.cc).
Status write_synthetic_lfm2(const SyntheticSpec& s, const std::string& path);
// gpt-oss (model/synthetic_gpt_oss.cc).
Status write_synthetic_gpt_oss(const SyntheticSpec& s, const std::string& path);
// granite, granitemoe, granitehybrid and nemotron_h (model/synthetic_mamba_hybrid.cc).
Status write_synthetic_granite(const SyntheticSpec& s, const std::string& path);
Status write_synthetic_nemotron_h(const SyntheticSpec& s, const std::string& path);
// mmproj-gemma3: a projector file (model/synthetic_projector.cc).
Status write_synthetic_projector(const SyntheticSpec& s, const std::string& path);
// deepseek2 (model/synthetic_deepseek2.cc).
Status write_synthetic_deepseek2(const SyntheticSpec& s, const std::string& path);
// gemma4 (model/synthetic_gemma4.cc).
Status write_synthetic_gemma4(const SyntheticSpec& s, const std::string& path);

}  // namespace cachet
