// Synthetic GGUF files with random weights from a fixed seed, for every architecture cachet runs: test
// fixtures of any shape and type, and bench models of real models' shapes. Tensor names and keys as llama.cpp's
// converter writes them, with a vocabulary, so other engines (llama.cpp) load them too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/dtype.h"
#include "cachet/status.h"

namespace cachet {

struct SyntheticSpec {
  // llama qwen2 qwen3 qwen3moe qwen35 qwen35moe qwen3next lfm2 lfm2moe gpt-oss gemma2 gemma3 gemma4 phi3 smollm3
  // mistral3 granite granitemoe granitehybrid nemotron_h nemotron_h_moe deepseek2; embedding models: gemma-embedding, and the encoders bert
  // (a WordPiece vocabulary), nomic-bert, modern-bert
  std::string arch = "llama";
  int64_t n_vocab = 256;
  int64_t n_embd = 64;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t n_ff = 128;           // of one expert when n_expert > 0
  int64_t head_dim = 0;         // 0: n_embd / n_head (written as attention.key_length when different)
  int64_t n_expert = 0;         // experts per layer (llama: Mixtral-style; qwen3moe needs them)
  int64_t n_expert_used = 0;
  bool rope_freqs = false;      // llama: a rope_freqs.weight of per-pair factors (Llama 3.x style)
  int64_t sliding_window = 0;   // gemma2 / gemma3: attention.sliding_window (0: gemma2's default, gemma3 none)
  double attn_softcap = 0.0;    // gemma2: attn_logit_softcapping written when > 0
  double final_softcap = 0.0;   // gemma2 / gemma3: final_logit_softcapping written when > 0
  int64_t n_ctx = 1024;
  DType type = DType::kF32;        // the matmul weights
  DType embd_type = DType::kF32;   // token embedding (and the tied head)
  std::optional<DType> expert_type;  // gpt-oss: the experts' matrices (default: type)
  bool tied_output = true;
  bool rope_neox = false;
  double rope_theta = 10000.0;
  std::string rope_scaling;        // "", linear or yarn: rope.scaling.type / .factor / .original_context_length
  double rope_scale = 1.0;
  int64_t rope_orig_ctx = 0;       // 0: not written
  double rope_attn_factor = 0.0;   // 0: not written
  double attn_temp_scale = 0.0;    // mistral3: attention.temperature_scale (0: not written)
  int64_t pooling_type = -1;       // >= 0: {arch}.pooling_type (1 mean, 2 cls, 3 last, 4 rank), an embedding model
  int64_t n_cls_out = 0;           // a reranker's classifier outputs: qwen3 cls.output (labels "yes", "no", ...);
                                   // encoders cls + cls.output (bert: tanh head; modern-bert: GELU head + norm)
  int64_t n_dense = 0;             // gemma-embedding: dense_2 (n_embd -> n_dense) and dense_3 (back)
  // qwen35 / qwen35moe: the gated delta net layers' shape, every `full_attn_interval`-th layer attending (lfm2
  // too, its other layers short convs of kernel ssm_conv_kernel).
  int64_t ssm_head_dim = 32;
  int64_t ssm_k_heads = 2;
  int64_t ssm_v_heads = 4;
  int64_t ssm_conv_kernel = 4;
  int64_t full_attn_interval = 4;
  int64_t n_ff_shared = 0;         // qwen35moe / qwen3next / granite*: the shared expert's width (0: none)
  // granitehybrid: Mamba-2 layers of ssm_v_heads heads (2 n_embd / heads wide each), B and C in ssm_groups
  // groups of ssm_state; nemotron_h: the same, heads ssm_head_dim wide.
  int64_t ssm_state = 16;
  int64_t ssm_groups = 1;
  bool legacy_ssm_in = false;      // qwen3next: q, k, v, z fused per key head in ssm_in (its first files)
  int64_t n_dense_lead = 0;        // lfm2moe: leading layers with a dense FFN ...
  int64_t n_ff_dense = 0;          // ... this wide (the file's feed_forward_length; n_ff is the experts')
  int64_t n_mtp = 0;               // qwen35 / qwen35moe / deepseek2: multi-token-prediction blocks after the trunk (nextn)
  // Tests: an MTP block that proposes the token it is given again (eh_proj passes hnorm(h) through, the attention
  // and FFN outputs are zero, the norms ones; the head then reads a positive multiple of the trunk's state that
  // predicted that token), so it agrees with a target wherever the target repeats a token.
  bool mtp_echo = false;
  // gemma4: the global layers' head width and KV heads (0: 2 x head_dim; n_head_kv), every
  // `full_attn_interval`-th layer global; its last `n_kv_shared` layers reuse earlier layers' KV; per-layer
  // embeddings `n_embd_per_layer` wide (0: none); global layers without attn_v (K is V); with experts, a dense
  // MLP n_ff_dense wide (0: n_ff) beside them.
  int64_t global_head_dim = 0;
  int64_t n_head_kv_global = 0;
  int64_t n_kv_shared = 0;
  int64_t n_embd_per_layer = 0;
  bool k_eq_v = false;
  bool double_wide_mlp = false;  // gemma4: the shared-KV layers' dense FFN twice n_ff wide (E2B)
  // deepseek2 (MLA): the latent's width, the compressed query's (0: none, as the Lite models), the rotated
  // part of a key head (the unrotated part is head_dim wide) and a value head's width; its experts routed by
  // sigmoid with a selection bias (else softmax), in n_expert_groups groups of which the best
  // n_expert_groups_used are chosen from; n_ff_shared a multiple of n_ff (expert_shared_count).
  int64_t kv_lora_rank = 64;
  int64_t q_lora_rank = 0;
  int64_t mla_rope_dim = 16;
  int64_t mla_v_dim = 0;           // 0: head_dim
  bool sigmoid_router = false;
  int64_t n_expert_groups = 1;
  int64_t moe_latent = 0;          // nemotron_h_moe: experts in this latent width (Nemotron 3 Super; 0: n_embd)
  int64_t n_expert_groups_used = 1;
  double rope_yarn_log_mul = 0.0;  // deepseek2: mscale_all_dim (written as 0.1 x it, as llama.cpp's converter)
  // mmproj-gemma3: a projector file (vision encoder) for a language model n_proj wide; n_embd, n_ff, n_layer and
  // n_head are the ViT's, images image_size square in patches of patch_size, pooled n_merge x n_merge.
  int64_t image_size = 56;
  int64_t patch_size = 14;
  int64_t n_proj = 64;
  int64_t n_merge = 2;
  int64_t n_deepstack = -1;        // mmproj-qwen3vl: deepstack layers (-1: min(3, n_layer), as synthetic qwen3vl's)
  uint64_t seed = 42;
  bool with_vocab = true;          // an SPM-style vocabulary of placeholder pieces
};

Status write_synthetic_model(const SyntheticSpec& spec, const std::string& path);

}  // namespace cachet
