// `qwen2`: Qwen2 and Qwen2.5 (dense). Llama's block with biases on the Q, K and V projections, NeoX RoPE.
// `qwen2vl`: Qwen2-VL's and Qwen2.5-VL's language models, qwen2 under consecutive M-RoPE sections
// (rope.dimension_sections: time, height, width pairs; a text token turns every pair with its position).
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
  register_arch("qwen2vl", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts,
                                  [](ArchReader& r, ModelConfig* c, DecoderTensors* allowed) {
                                    c->rope_neox = true;
                                    c->mrope_interleaved = false;
                                    allowed->qkv_bias = true;
                                    return r.mrope_sections(c, true);
                                  });
  });
}

}  // namespace cachet
