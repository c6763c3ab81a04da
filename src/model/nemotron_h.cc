// `nemotron_h`: NVIDIA's Nemotron-H and Nemotron Nano 2 (4B to 56B), hybrids whose every layer is one block behind
// one RMSNorm and one residual add: a Mamba-2 mixer (model/mamba2.h; attention.head_count_kv and
// feed_forward_length both 0), attention without RoPE (head_count_kv > 0), or an FFN that is not gated,
// down(relu(up x)^2) (feed_forward_length > 0). Queries times attention.scale where the file gives one. The files
// carry attention.layer_norm_epsilon beside (or instead of) the RMS epsilon.
#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

namespace {

Status nemotron_h(ArchReader& r, ModelConfig* c, DecoderTensors*) {
  const std::string a = r.arch() + ".";
  c->one_block_layers = true;
  c->ffn_act = "relu2";
  c->nope_interval = 1;                  // no layer sees positions: the Mamba-2 layers carry the order
  r.consume("rope.scaling.finetuned");   // (the converter writes it false)
  if (r.has("attention.layer_norm_rms_epsilon")) {
    r.consume("attention.layer_norm_epsilon");
  } else {
    CACHET_ASSIGN_OR_RETURN(c->rms_eps, r.real("attention.layer_norm_epsilon", 1e-5));
  }
  CACHET_RETURN_IF_ERROR(r.experts(c));
  if (c->n_expert > 0)
    return unimplemented(a + "expert_count: Nemotron-H's mixture-of-experts layers (nemotron_h_moe) are not run yet");
  const std::vector<int64_t>& kv = r.kv_heads_per_layer();
  const std::vector<int64_t>& ff = r.ff_per_layer();
  if (kv.empty() || ff.empty())
    return invalid_argument(a + "attention.head_count_kv and feed_forward_length must be given per layer");
  c->layer_kinds.assign(static_cast<size_t>(c->n_layer), 'M');
  for (int64_t l = 0; l < c->n_layer; ++l) {
    if (kv[l] > 0 && ff[l] > 0)
      return invalid_argument("layer " + std::to_string(l) + " has both KV heads and an FFN: not a Nemotron-H block");
    if (ff[l] > 0 && ff[l] != c->n_ff)
      return unimplemented(a + "feed_forward_length: FFN layers of different widths are not supported");
    if (kv[l] > 0) c->layer_kinds[l] = 'A';
    if (ff[l] > 0) c->layer_kinds[l] = 'F';
  }
  return r.mamba2(c);
}

}  // namespace

void register_nemotron_h_arch() {
  register_arch("nemotron_h", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts, nemotron_h);
  });
}

}  // namespace cachet
