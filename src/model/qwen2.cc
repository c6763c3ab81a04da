// `qwen2`: Qwen2 and Qwen2.5 (dense). Llama's block with biases on the Q, K and V projections, NeoX RoPE.
#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

void register_qwen2_arch() {
  register_arch("qwen2", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts,
                                  [](ArchReader&, ModelConfig* c, DecoderTensors* allowed) {
                                    c->rope_neox = true;
                                    allowed->qkv_bias = true;
                                    return Status::ok();
                                  });
  });
}

}  // namespace cachet
