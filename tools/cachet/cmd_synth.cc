// cachet synth: write a synthetic GGUF (random weights, fixed seed) of a chosen architecture, shape and type.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "model/synthetic.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

void add_synth_command(CLI::App& app, int* exit_code) {
  struct Args {
    SyntheticSpec spec;
    std::string out, type = "F32", embd_type, expert_type, preset;
    bool untied = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("synth", "write a synthetic GGUF of any architecture with random weights (tests, benches)");
  c->add_option("-o,--output", a->out, "output path")->required();
  c->add_option("--preset", a->preset, "a real model's shape")
      ->check(CLI::IsMember({"smollm2-135m", "llama-3.2-1b", "qwen3-0.6b", "gemma-3-1b", "qwen3-moe-small",
                             "qwen3.5-2b", "qwen3.5-9b", "qwen3.6-moe-small", "tiny"}));
  c->add_option("--arch", a->spec.arch, "architecture")
      ->check(CLI::IsMember({"llama", "qwen2", "qwen2vl", "qwen3", "qwen3moe", "qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe", "qwen3next", "lfm2", "lfm2moe", "gpt-oss", "smollm3", "mistral3", "gemma2", "gemma3", "gemma4", "phi3", "gemma-embedding", "granite", "granitemoe", "granitehybrid", "nemotron_h", "nemotron_h_moe", "deepseek2",
                             "bert", "nomic-bert", "nomic-bert-moe", "modern-bert", "mmproj-gemma3", "mmproj-gemma4",
                             "mmproj-qwen2vl", "mmproj-qwen25vl", "mmproj-qwen3vl"}));
  c->add_option("--image-size", a->spec.image_size, "mmproj-*: the square side images are resized to");
  c->add_option("--patch-size", a->spec.patch_size, "mmproj-*: the ViT's patch side");
  c->add_option("--proj-dim", a->spec.n_proj, "mmproj-*: the language model's width (the output rows')");
  c->add_option("--merge", a->spec.n_merge, "mmproj-*: patches pooled (gemma3) or merged (qwen3vl) N x N into a row");
  c->add_option("--deepstack", a->spec.n_deepstack, "mmproj-qwen3vl: deepstack layers (default min(3, layers); "
                                                     "0 for Qwen3.5's)");
  c->add_option("--head-dim", a->spec.head_dim, "width of one head (default n_embd / n_head)");
  c->add_option("--experts", a->spec.n_expert, "experts per layer (llama, qwen3moe)");
  c->add_option("--experts-used", a->spec.n_expert_used, "experts per token");
  c->add_option("--ssm-head-dim", a->spec.ssm_head_dim, "qwen35: gated delta net head width");
  c->add_option("--ssm-k-heads", a->spec.ssm_k_heads, "qwen35: gated delta net key heads");
  c->add_option("--ssm-v-heads", a->spec.ssm_v_heads, "qwen35: gated delta net value heads");
  c->add_option("--ssm-conv", a->spec.ssm_conv_kernel, "qwen35: causal conv width");
  c->add_option("--ssm-state", a->spec.ssm_state, "granitehybrid: Mamba-2 state width");
  c->add_option("--ssm-groups", a->spec.ssm_groups, "granitehybrid: Mamba-2 groups of B and C");
  c->add_option("--full-attn-interval", a->spec.full_attn_interval, "qwen35, lfm2: every n-th layer attends; gemma4: every n-th is global");
  c->add_flag("--legacy-ssm-in", a->spec.legacy_ssm_in, "qwen3next: q, k, v, z fused per key head (ssm_in)");
  c->add_option("--shared-ff", a->spec.n_ff_shared, "qwen35moe: the shared expert's width");
  c->add_option("--dense-lead", a->spec.n_dense_lead, "lfm2moe: leading layers with a dense FFN");
  c->add_option("--dense-ff", a->spec.n_ff_dense, "lfm2moe: their FFN width; gemma4: the dense MLP beside the experts (the experts': --n-ff)");
  c->add_option("--global-head-dim", a->spec.global_head_dim, "gemma4: the global layers' head width (default 2 x head dim)");
  c->add_option("--global-kv-heads", a->spec.n_head_kv_global, "gemma4: the global layers' KV heads (default --n-head-kv)");
  c->add_option("--kv-shared", a->spec.n_kv_shared, "gemma4: the last layers reusing earlier layers' KV");
  c->add_option("--per-layer-embd", a->spec.n_embd_per_layer, "gemma4: per-layer embedding width (0: none)");
  c->add_flag("--k-eq-v", a->spec.k_eq_v, "gemma4: global layers without attn_v (K is V)");
  c->add_flag("--double-wide-mlp", a->spec.double_wide_mlp, "gemma4: the shared-KV layers' dense FFN twice as wide");
  c->add_option("--mtp", a->spec.n_mtp, "qwen35 / qwen35moe / deepseek2: multi-token-prediction blocks after the trunk (nextn)");
  c->add_flag("--mtp-echo", a->spec.mtp_echo,
              "tests, benches: the MTP block proposes the token it is given again (agrees where the target repeats)");
  c->add_option("--kv-lora", a->spec.kv_lora_rank, "deepseek2: the KV latent's width");
  c->add_option("--q-lora", a->spec.q_lora_rank, "deepseek2: the compressed query's width (0: none)");
  c->add_option("--mla-rope-dim", a->spec.mla_rope_dim, "deepseek2: a key head's rotated part (the rest: --head-dim)");
  c->add_option("--mla-v-dim", a->spec.mla_v_dim, "deepseek2: a value head's width (default --head-dim)");
  c->add_flag("--sigmoid-router", a->spec.sigmoid_router, "deepseek2: sigmoid routing with a selection bias");
  c->add_option("--expert-groups", a->spec.n_expert_groups, "deepseek2: experts in groups ...");
  c->add_option("--expert-groups-used", a->spec.n_expert_groups_used, "... of which the best this many are chosen from");
  c->add_option("--moe-latent", a->spec.moe_latent, "nemotron_h_moe: the experts' latent width (Nemotron 3 Super)");
  c->add_option("--yarn-log-mul", a->spec.rope_yarn_log_mul, "deepseek2: YaRN's mscale_all_dim");
  c->add_flag("--rope-freqs", a->spec.rope_freqs, "llama: write Llama 3-style rope_freqs factors");
  c->add_option("--sliding-window", a->spec.sliding_window, "gemma2/3: sliding window of the local layers");
  c->add_option("--attn-softcap", a->spec.attn_softcap, "gemma2: attention logit soft-cap");
  c->add_option("--final-softcap", a->spec.final_softcap, "gemma2/3: final logit soft-cap");
  c->add_option("--rope-theta", a->spec.rope_theta, "RoPE base");
  c->add_option("--rope-scaling", a->spec.rope_scaling, "write rope.scaling.type (linear, yarn)")
      ->check(CLI::IsMember({"linear", "yarn"}));
  c->add_option("--rope-scale", a->spec.rope_scale, "rope.scaling.factor");
  c->add_option("--rope-orig-ctx", a->spec.rope_orig_ctx, "rope.scaling.original_context_length");
  c->add_option("--rope-attn-factor", a->spec.rope_attn_factor, "rope.scaling.attn_factor");
  c->add_option("--attn-temp-scale", a->spec.attn_temp_scale, "mistral3: attention.temperature_scale");
  c->add_option("--type", a->type, "matmul weight type (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K)");
  c->add_option("--embd-type", a->embd_type, "token embedding type (default: Q8_0 for 4-bit types, else --type)");
  c->add_option("--expert-type", a->expert_type, "gpt-oss: the experts' type (default --type; MXFP4 as shipped)");
  c->add_option("--n-vocab", a->spec.n_vocab);
  c->add_option("--n-embd", a->spec.n_embd);
  c->add_option("--n-layer", a->spec.n_layer);
  c->add_option("--n-head", a->spec.n_head);
  c->add_option("--n-head-kv", a->spec.n_head_kv);
  c->add_option("--n-ff", a->spec.n_ff);
  c->add_option("--n-ctx", a->spec.n_ctx);
  c->add_option("--seed", a->spec.seed);
  c->add_option("--cls-out", a->spec.n_cls_out, "a reranker's classifier outputs (qwen3, bert, nomic-bert, modern-bert)");
  c->add_option("--dense", a->spec.n_dense, "gemma-embedding: width of the dense_2 / dense_3 projections");
  c->add_option("--pooling-type", a->spec.pooling_type, "write {arch}.pooling_type (1 mean, 2 cls, 3 last, 4 rank)")
      ->check(CLI::Range(0, 4));
  c->add_flag("--untied", a->untied, "separate output head");
  c->add_flag("--neox", a->spec.rope_neox, "NeoX RoPE layout");
  c->callback([a, exit_code] {
    SyntheticSpec s = a->spec;
    if (a->preset == "smollm2-135m") {
      s.n_vocab = 49152, s.n_embd = 576, s.n_layer = 30, s.n_head = 9, s.n_head_kv = 3, s.n_ff = 1536;
      s.n_ctx = 8192, s.rope_theta = 100000.0;
    } else if (a->preset == "llama-3.2-1b") {
      s.n_vocab = 128256, s.n_embd = 2048, s.n_layer = 16, s.n_head = 32, s.n_head_kv = 8, s.n_ff = 8192;
      s.n_ctx = 131072, s.rope_theta = 500000.0;
    } else if (a->preset == "qwen3-0.6b") {
      s.arch = "qwen3", s.n_vocab = 151936, s.n_embd = 1024, s.n_layer = 28, s.n_head = 16, s.n_head_kv = 8;
      s.head_dim = 128, s.n_ff = 3072, s.n_ctx = 40960, s.rope_theta = 1000000.0;
    } else if (a->preset == "gemma-3-1b") {
      s.arch = "gemma3", s.n_vocab = 262144, s.n_embd = 1152, s.n_layer = 26, s.n_head = 4, s.n_head_kv = 1;
      s.head_dim = 256, s.n_ff = 6912, s.n_ctx = 32768, s.rope_theta = 1000000.0, s.sliding_window = 512;
    } else if (a->preset == "qwen3-moe-small") {  // Qwen3-30B-A3B's block at a laptop's size: 16 experts, 4 active
      s.arch = "qwen3moe", s.n_vocab = 151936, s.n_embd = 1024, s.n_layer = 24, s.n_head = 16, s.n_head_kv = 4;
      s.head_dim = 128, s.n_ff = 768, s.n_expert = 16, s.n_expert_used = 4, s.n_ctx = 40960, s.rope_theta = 1000000.0;
    } else if (a->preset == "qwen3.5-2b" || a->preset == "qwen3.5-9b") {
      // Qwen3.5's hybrid stack (docs/hybrid.md): 3 gated delta nets then 1 gated attention layer, attention heads of
      // 256 with a quarter rotated, delta-net heads of 128 (16 key heads; value heads 16 on 2B, 32 on 9B).
      const bool big = a->preset == "qwen3.5-9b";
      s.arch = "qwen35", s.n_vocab = 248320, s.n_embd = big ? 4096 : 2048, s.n_layer = big ? 32 : 24;
      s.n_head = big ? 16 : 8, s.n_head_kv = big ? 4 : 2, s.head_dim = 256, s.n_ff = big ? 12288 : 6144;
      s.ssm_head_dim = 128, s.ssm_k_heads = 16, s.ssm_v_heads = big ? 32 : 16, s.ssm_conv_kernel = 4;
      s.n_ctx = 262144, s.rope_theta = 10000000.0;
    } else if (a->preset == "qwen3.6-moe-small") {  // Qwen3.6-35B-A3B's block (256 experts, 8 + 1 shared active)
      s.arch = "qwen35moe", s.n_vocab = 248320, s.n_embd = 2048, s.n_layer = 12, s.n_head = 16, s.n_head_kv = 2;
      s.head_dim = 256, s.n_ff = 512, s.n_expert = 256, s.n_expert_used = 8, s.n_ff_shared = 512;
      s.ssm_head_dim = 128, s.ssm_k_heads = 16, s.ssm_v_heads = 32, s.ssm_conv_kernel = 4;
      s.n_ctx = 262144, s.rope_theta = 10000000.0;
    }
    s.tied_output = !a->untied;
    auto t = dtype_from_name(a->type);
    if (!t || !dtype_computable(*t)) {
      *exit_code = fail(invalid_argument("unsupported --type " + a->type));
      return;
    }
    s.type = *t;
    std::string et = a->embd_type;
    if (et.empty()) et = (*t == DType::kQ4_0 || *t == DType::kQ4_1) ? "Q8_0" : a->type;
    auto e = dtype_from_name(et);
    if (!e || !dtype_computable(*e)) {
      *exit_code = fail(invalid_argument("unsupported --embd-type " + et));
      return;
    }
    s.embd_type = *e;
    s.expert_type = s.type;
    if (!a->expert_type.empty()) {
      auto x = dtype_from_name(a->expert_type);
      if (!x || !dtype_computable(*x)) {
        *exit_code = fail(invalid_argument("unsupported --expert-type " + a->expert_type));
        return;
      }
      s.expert_type = *x;
    }
    Status st = write_synthetic_model(s, a->out);
    *exit_code = st.is_ok() ? 0 : fail(st);
  });
}

}  // namespace cachet::cli
