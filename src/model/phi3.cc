// `phi3`: Phi-3 and Phi-3.5 mini/medium, Phi-4-mini. Fused QKV (attn_qkv) and fused gate|up (ffn_up holds the
// gate's n_ff rows, then the up projection's), NeoX RoPE. The files' attention.sliding_window is read and not
// applied, as llama.cpp does (its converter writes a window the models' long-context use contradicts:
// docs/architectures.md). LongRoPE files (rope_factors_long/short) are refused until #18's scaling lands.
#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

void register_phi3_arch() {
  register_arch("phi3", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts,
                                  [](ArchReader& r, ModelConfig* c, DecoderTensors* allowed) -> Status {
                                    c->rope_neox = true;
                                    allowed->fused_qkv = allowed->fused_gate_up = true;
                                    r.consume("attention.sliding_window");
                                    return Status::ok();
                                  });
  });
}

}  // namespace cachet
