// `lfm2`: Liquid AI's LFM2 (350M to 2.6B, and LFM2-VL's language model), a CPU-first hybrid: short conv layers
// (model/short_conv.h: where the file's per-layer attention.head_count_kv is 0) beside GQA attention layers with
// per-head Q/K RMSNorm and NeoX RoPE; every layer's FFN a dense SwiGLU behind ffn_norm; the final norm is stored
// as token_embd_norm. The short conv's window (shortconv.l_cache - 1 inputs of the width) is each sequence's
// recurrent state in the engine's StateStore, as Qwen3.5's. An optional attention.sliding_window applies to the
// attention layers. (lfm2moe, with sigmoid-routed experts and a selection bias, is not read yet: refused by name.)
#include <string>

#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

namespace {

Status lfm2(ArchReader& r, ModelConfig* c, DecoderTensors* allowed) {
  c->rope_neox = true;
  allowed->qk_norm = allowed->need_qk_norm = true;
  allowed->output_norm = "token_embd_norm.weight";
  CACHET_ASSIGN_OR_RETURN(c->ssm_conv_kernel, r.dim("shortconv.l_cache"));
  if (c->ssm_conv_kernel < 2) return invalid_argument(r.arch() + ".shortconv.l_cache must be at least 2");
  const std::vector<int64_t>& kv = r.kv_heads_per_layer();
  c->layer_kinds.assign(static_cast<size_t>(c->n_layer), 'A');
  for (size_t l = 0; l < kv.size(); ++l)
    if (kv[l] == 0) c->layer_kinds[l] = 'C';
  if (r.has("attention.sliding_window")) {
    CACHET_ASSIGN_OR_RETURN(c->sliding_window, r.dim("attention.sliding_window"));
    if (c->sliding_window > 0) {
      c->swa_layers.assign(static_cast<size_t>(c->n_layer), 'G');
      for (int64_t l = 0; l < c->n_layer; ++l)
        if (!c->is_recurrent(l)) c->swa_layers[l] = 'S';
      c->rope_theta_swa = c->rope_theta;
    }
  }
  return Status::ok();
}

}  // namespace

void register_lfm2_arch() {
  register_arch("lfm2", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts, lfm2);
  });
}

}  // namespace cachet
