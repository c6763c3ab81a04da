// `qwen35`, `qwen35moe` and `qwen3next`: Qwen3.5 / Qwen3.6 and Qwen3-Next, hybrid linear attention. Three of every four layers (the file's
// attention.recurrent_layers, else full_attention_interval, default 4: layer l attends when (l + 1) % 4 == 0)
// are gated delta nets (model/gated_delta_net.h: ssm.conv_kernel, ssm.state_size = head width,
// ssm.group_count = key heads, ssm.time_step_rank = value heads, ssm.inner_size = value width); the others are
// gated attention: Q carries a per-head sigmoid gate on the output (attn_q rows [q_h, gate_h] per head), per-head
// Q/K RMSNorm, partial NeoX RoPE under interleaved M-RoPE sections (rope.dimension_sections; text positions
// turn every covered pair). post_attention_norm is the FFN's input norm. The MoE variant adds a shared expert
// gated by sigmoid(x . ffn_gate_inp_shexp). Multi-token-prediction layers (nextn_predict_layers, after the
// trunk) are read past by the trunk; LoadOptions::mtp_head loads the first as a model of its own (a speculative
// proposer, speculative/mtp.h). Each sequence's recurrent state lives in the engine's StateStore.
// Qwen3-Next differs in layout only: beta and alpha fused per key head (ssm_ba), in its first files q, k, v and z
// fused per key head too (ssm_in), both regrouped at load; plain partial NeoX RoPE; always a MoE whose shared
// expert is feed_forward_length wide unless expert_shared_feed_forward_length says otherwise.
#include <string>

#include "io/gguf.h"
#include "model/arch_reader.h"
#include "model/decoder.h"

namespace cachet {

namespace {

Status qwen35(ArchReader& r, ModelConfig* c, DecoderTensors* allowed, bool moe, bool next, bool mtp_head) {
  c->rope_neox = true;
  allowed->fused_ba = allowed->legacy_ssm_in = next;
  c->ssm_grouped_heads = next;
  c->attn_output_gate = true;
  allowed->qk_norm = allowed->need_qk_norm = true;
  allowed->ffn_norm = "post_attention_norm.weight";
  const GgufFile& f = r.file();
  const std::string a = r.arch() + ".";

  CACHET_RETURN_IF_ERROR(take_mtp_blocks(r, c, allowed, mtp_head));

  CACHET_ASSIGN_OR_RETURN(c->ssm_conv_kernel, r.dim("ssm.conv_kernel"));
  CACHET_ASSIGN_OR_RETURN(c->ssm_head_dim, r.dim("ssm.state_size"));
  CACHET_ASSIGN_OR_RETURN(c->ssm_k_heads, r.dim("ssm.group_count"));
  CACHET_ASSIGN_OR_RETURN(c->ssm_v_heads, r.dim("ssm.time_step_rank"));
  CACHET_ASSIGN_OR_RETURN(int64_t inner, r.dim("ssm.inner_size"));
  if (c->ssm_v_heads <= 0 || inner != c->ssm_v_heads * c->ssm_head_dim)
    return invalid_argument(a + "ssm.inner_size " + std::to_string(inner) + " is not time_step_rank x state_size");

  // Which layers are recurrent (none in the head).
  c->layer_kinds.assign(static_cast<size_t>(c->n_layer), 'A');
  const std::string rk = a + "attention.recurrent_layers";
  r.consume("attention.recurrent_layers");
  if (const GgufValue* v = f.find(rk); v && v->type == GgufType::kArray) {
    if (static_cast<int64_t>(v->count) < c->n_layer || v->elem_type != GgufType::kBool)
      return invalid_argument(rk + " must hold one bool per layer");
    for (int64_t l = 0; l < c->n_layer && !mtp_head; ++l) c->layer_kinds[l] = v->int_at(l) ? 'R' : 'A';
  } else {
    CACHET_ASSIGN_OR_RETURN(int64_t interval, r.dim("full_attention_interval", int64_t{4}));
    if (interval <= 0) return invalid_argument(a + "full_attention_interval must be positive");
    for (int64_t l = 0; l < c->n_layer && !mtp_head; ++l) c->layer_kinds[l] = (l + 1) % interval != 0 ? 'R' : 'A';
  }
  if (mtp_head) c->n_layer = 1, c->layer_kinds = "A";

  // M-RoPE sections (t, h, w, e), interleaved (Qwen3-Next: plain partial NeoX RoPE).
  if (!next) CACHET_RETURN_IF_ERROR(r.mrope_sections(c, false));
  if (!moe) return Status::ok();
  const int64_t n_ff_dense = c->n_ff;
  const bool expert_ff_given = r.has("expert_feed_forward_length");
  CACHET_RETURN_IF_ERROR(r.experts(c, "expert_feed_forward_length"));
  if (c->n_expert == 0) return invalid_argument("a " + r.arch() + " file without " + a + "expert_count");
  // Qwen3-Next: experts n_ff / experts_used wide and the shared expert n_ff wide unless the file says otherwise.
  if (c->n_expert_used <= 0) return invalid_argument(a + "expert_used_count must be positive");
  if (next && !expert_ff_given) c->n_ff = n_ff_dense / c->n_expert_used;
  CACHET_ASSIGN_OR_RETURN(c->n_ff_shared, r.dim("expert_shared_feed_forward_length", next ? n_ff_dense : int64_t{0}));
  return Status::ok();
}

}  // namespace

void register_qwen35_arch() {
  register_arch("qwen35", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts,
                                  [&opts](ArchReader& r, ModelConfig* c, DecoderTensors* a) {
                                    return qwen35(r, c, a, false, false, opts.mtp_head);
                                  });
  });
  register_arch("qwen3next", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts, [&opts](ArchReader& r, ModelConfig* c, DecoderTensors* a) {
      return qwen35(r, c, a, true, true, opts.mtp_head);
    });
  });
  register_arch("qwen35moe", [](std::unique_ptr<GgufFile> f, std::shared_ptr<ThreadPool> pool, const LoadOptions& opts) {
    return load_decoder_from_gguf(std::move(f), std::move(pool), opts,
                                  [&opts](ArchReader& r, ModelConfig* c, DecoderTensors* a) {
                                    return qwen35(r, c, a, true, false, opts.mtp_head);
                                  });
  });
}

}  // namespace cachet
