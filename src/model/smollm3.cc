// `smollm3`: SmolLM3 (3B). Llama's block (interleaved RoPE, SwiGLU, GQA) where every fourth layer attends without
// positions: layers l with (l + 1) % 4 == 0 skip RoPE ("NoPE" layers; llama.cpp's n_no_rope_layer_step, which its
// files do not carry).
#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

void register_smollm3_arch() {
  register_arch("smollm3", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts,
                                  [](ArchReader&, ModelConfig* c, DecoderTensors*) {
                                    c->nope_interval = 4;
                                    return Status::ok();
                                  });
  });
}

}  // namespace cachet
