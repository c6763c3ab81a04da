// Pieces the synthetic-model writers share (model/synthetic.h): not part of any public interface.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "cachet/status.h"
#include "model/synthetic.h"

namespace cachet {

class GgufWriter;

// Uniform in [-a, a) from a 64-bit engine: identical on every platform for a seed.
class Uniform {
 public:
  explicit Uniform(uint64_t seed) : rng_(seed) {}
  float next(float a) { return (static_cast<float>(rng_() >> 40) * 0x1.0p-24f * 2.0f - 1.0f) * a; }

 private:
  std::mt19937_64 rng_;
};

// general.* keys and the {arch}.* sizes every decoder file has.
void add_common_keys(GgufWriter* w, const SyntheticSpec& s);
// The decoders' placeholder SentencePiece vocabulary.
void add_spm_vocab(GgufWriter* w, int64_t n_vocab);

// qwen35 / qwen35moe (model/synthetic_hybrid.cc).
Status write_synthetic_qwen35(const SyntheticSpec& s, const std::string& path);

}  // namespace cachet
