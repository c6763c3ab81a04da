// `nemotron_h`: NVIDIA's Nemotron-H and Nemotron Nano 2 (4B to 56B), hybrids whose every layer is one block behind
// one RMSNorm and one residual add: a Mamba-2 mixer (model/mamba2.h; attention.head_count_kv and
// feed_forward_length both 0), attention without RoPE (head_count_kv > 0), or an FFN that is not gated,
// down(relu(up x)^2) (feed_forward_length > 0). Queries times attention.scale where the file gives one. The files
// carry attention.layer_norm_epsilon beside (or instead of) the RMS epsilon. `nemotron_h_moe` (Nemotron 3 Nano
// 30B-A3B): the FFN layers are mixtures of ungated ReLU^2 experts (expert_feed_forward_length wide) routed by
// each expert's sigmoid probability, chosen with a selection bias (exp_probs_b), the top-k weights renormalized
// (expert_weights_norm) and scaled (expert_weights_scale), optionally group-limited (expert_group_count), beside
// an ungated ReLU^2 shared expert. Nemotron 3 Super: the experts work in a latent width (moe_latent_size) between
// ffn_latent_down and ffn_latent_up; the router and the shared expert read the layer's input.
#include <string>

#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

namespace {

Status nemotron_h(ArchReader& r, ModelConfig* c, DecoderTensors* allowed, bool moe, bool mtp_head) {
  const std::string a = r.arch() + ".";
  // Nemotron 3's files carry a multi-token-prediction block after the trunk (attention, then experts behind
  // post_attention_norm, in one layer): the trunk reads past it; as a proposer it does not run yet.
  if (mtp_head)
    return unimplemented("Nemotron-H's multi-token-prediction block does not run as a proposer yet (--mtp); the "
                         "model runs without it");
  CACHET_RETURN_IF_ERROR(take_mtp_blocks(r, c, allowed, false));
  c->one_block_layers = true;
  c->ffn_act = "relu2";
  c->nope_interval = 1;                  // no layer sees positions: the Mamba-2 layers carry the order
  r.consume("rope.scaling.finetuned");   // (the converter writes it false)
  if (r.has("attention.layer_norm_rms_epsilon")) {
    r.consume("attention.layer_norm_epsilon");
  } else {
    CACHET_ASSIGN_OR_RETURN(c->rms_eps, r.real("attention.layer_norm_epsilon", 1e-5));
  }
  CACHET_RETURN_IF_ERROR(r.experts(c, moe ? "expert_feed_forward_length" : nullptr));
  if (!moe && c->n_expert > 0) return invalid_argument(a + "expert_count: a nemotron_h file has no experts");
  if (moe) {
    if (c->n_expert == 0 || c->n_expert_used <= 0)
      return invalid_argument("a nemotron_h_moe file without " + a + "expert_count / expert_used_count");
    CACHET_ASSIGN_OR_RETURN(c->moe_latent, r.dim("moe_latent_size", int64_t{0}));  // Nemotron 3 Super
    CACHET_RETURN_IF_ERROR(r.expert_groups(c));
    r.consume("expert_shared_count");
    CACHET_ASSIGN_OR_RETURN(c->n_ff_shared, r.dim("expert_shared_feed_forward_length"));
    r.consume("expert_weights_norm");
    if (r.file().find(a + "expert_weights_norm")) {
      CACHET_ASSIGN_OR_RETURN(c->expert_norm, r.file().get_bool(a + "expert_weights_norm"));
    } else {
      c->expert_norm = false;  // llama.cpp's default
    }
    c->expert_gating = "sigmoid";
    allowed->router_bias = true;
  }
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
  for (const char* name : {"nemotron_h", "nemotron_h_moe"}) {
    const bool moe = std::string(name) == "nemotron_h_moe";
    register_arch(name, [moe](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
      return load_decoder_from_gguf(std::move(f), std::move(pool), opts,
                                    [moe, &opts](ArchReader& r, ModelConfig* c, DecoderTensors* t) {
                                      return nemotron_h(r, c, t, moe, opts.mtp_head);
                                    });
    });
  }
}

}  // namespace cachet
