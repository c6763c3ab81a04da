// Synthetic Llama GGUF files with random weights from a fixed seed: test fixtures of any shape and type,
// and bench models of real models' shapes. With a vocabulary, so other engines (llama.cpp) load them too.
#pragma once

#include <cstdint>
#include <string>

#include "base/dtype.h"
#include "cachet/status.h"

namespace cachet {

struct SyntheticSpec {
  int64_t n_vocab = 256;
  int64_t n_embd = 64;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t n_ff = 128;
  int64_t n_ctx = 1024;
  DType type = DType::kF32;        // the matmul weights
  DType embd_type = DType::kF32;   // token embedding (and the tied head)
  bool tied_output = true;
  bool rope_neox = false;
  double rope_theta = 10000.0;
  uint64_t seed = 42;
  bool with_vocab = true;          // an SPM-style vocabulary of placeholder pieces
};

Status write_synthetic_llama(const SyntheticSpec& spec, const std::string& path);

}  // namespace cachet
