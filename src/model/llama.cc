// `llama`: Llama 1/2/3.x, Mistral, SmolLM, TinyLlama... and Mixtral-style mixtures of experts (the same
// architecture name with ffn_gate_inp and ffn_*_exps). Interleaved RoPE (the converter permutes Q and K for it),
// Llama 3.x's per-pair frequency factors (rope_freqs.weight).
#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

void register_llama_arch() {
  register_arch("llama", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts,
                                  [](ArchReader& r, ModelConfig* c, DecoderTensors* allowed) {
                                    allowed->rope_freqs = true;
                                    return r.experts(c);  // Mixtral: softmax, top-k, renormalized
                                  });
  });
}

}  // namespace cachet
