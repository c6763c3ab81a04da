// `mistral3`: Ministral 3 and Mistral Small 3.x / Magistral language models. Llama's block (interleaved RoPE,
// rope_freqs where given, optional output bias) under YaRN from the file, and, when the file sets
// attention.temperature_scale, Llama 4's attention temperature: after RoPE, each query times
// log(floor(pos / n) + 1) * scale + 1, n the YaRN original context (so positions inside it are unchanged).
#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

namespace {

Status mistral3(ArchReader& r, ModelConfig* c, DecoderTensors* allowed) {
  allowed->rope_freqs = true;
  allowed->out_bias = true;
  CACHET_ASSIGN_OR_RETURN(c->attn_temp_scale, r.real("attention.temperature_scale", 0.0));
  if (c->attn_temp_scale != 0.0) {
    c->attn_temp_floor = c->rope_yarn_orig_ctx > 0 ? c->rope_yarn_orig_ctx : c->n_ctx_train;
    if (c->attn_temp_floor <= 0)
      return invalid_argument("mistral3: attention.temperature_scale needs rope.scaling.original_context_length");
  }
  return r.experts(c);
}

}  // namespace

void register_mistral3_arch() {
  register_arch("mistral3", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts, mistral3);
  });
}

}  // namespace cachet
