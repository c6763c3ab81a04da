// cachet kv-math: the KV cache calculator, for a model file or for given dimensions.
#include <CLI/CLI.hpp>
#include <optional>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "inspect/kv_math.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

void add_kv_math_command(CLI::App& app, int* exit_code) {
  struct Args {
    std::string model, dtype;
    KvFlags kv;
    int64_t layers = 0, kv_heads = 0, head_dim = 0, d_model = 0, context = 4096, batch = 1, block = 16;
    double budget_gib = 0, weights_gib = -1;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("kv-math", "KV cache memory: per token, sequence, batch; paging; what fits");
  c->add_option("-m,--model", a->model, "take layers, KV heads, head dim and weight size from a model file");
  c->add_option("--layers", a->layers, "transformer layers");
  c->add_option("--kv-heads", a->kv_heads, "key/value heads");
  c->add_option("--head-dim", a->head_dim, "dimension of one head");
  c->add_option("--d-model", a->d_model, "model width (with no --kv-heads: full multi-head attention)");
  c->add_option("--dtype", a->dtype, "KV element type of K and V (as --kv-type)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0", "q4r"}));
  add_kv_flags(c, &a->kv);
  c->add_option("--context", a->context, "tokens per sequence");
  c->add_option("--batch", a->batch, "sequences");
  c->add_option("--block-size", a->block, "paged KV block size in tokens");
  c->add_option("--budget-gib", a->budget_gib, "memory budget (GiB) for weights + KV");
  c->add_option("--weights-gib", a->weights_gib, "weight memory (GiB; default: the model file's tensors)");
  c->add_flag("--json", a->json, "print JSON");
  c->callback([a, exit_code] {
    KvShape s;
    int64_t weight_bytes = 0;
    int64_t window = 0, window_layers = 0;  // sliding-window attention layers of a model file
    int64_t shared_layers = 0, all_layers = 0;  // layers reading an earlier layer's KV, of all
    std::optional<ModelConfig> mla;             // a model file's multi-head latent attention
    if (!a->model.empty() || (!a->layers && !a->d_model)) {  // no dimensions given: the (default) model's
      auto m = load(a->model, 1);
      if (!m.is_ok()) {
        *exit_code = fail(m.status());
        return;
      }
      const ModelConfig& cfg = (*m)->config();
      s.n_layer = cfg.n_kv_layers();  // a hybrid model's attention layers; its recurrent ones hold a state
      s.state_bytes_per_sequence = cfg.state_bytes_per_seq();
      s.n_head_kv = cfg.n_head_kv;
      s.head_dim = cfg.head_dim;
      s.v_in_k = cfg.v_in_k();
      if (cfg.is_mla()) mla = cfg;
      if (cfg.head_dim_swa > 0 || cfg.n_head_kv_swa > 0) {
        // Gemma 4: the sliding-window layers' heads differ from the global ones'; two kinds of layer.
        s.n_layer = 0;
        for (int64_t l = 0; l < cfg.n_layer; ++l) {
          if (!cfg.has_own_kv(l)) continue;
          if (cfg.is_swa(l)) {
            ++s.n_layer_b;
          } else {
            ++s.n_layer;
          }
        }
        s.n_head_kv_b = cfg.n_head_kv_swa > 0 ? cfg.n_head_kv_swa : cfg.n_head_kv;
        s.head_dim_b = cfg.head_dim_swa > 0 ? cfg.head_dim_swa : cfg.head_dim;
      }
      all_layers = cfg.n_layer;
      for (int64_t l = 0; l < cfg.n_layer; ++l) shared_layers += cfg.attends(l) && !cfg.has_own_kv(l);
      window = cfg.sliding_window;
      for (int64_t l = 0; l < cfg.n_layer; ++l) window_layers += cfg.is_swa(l) && cfg.has_own_kv(l) ? 1 : 0;
      for (const auto& t : (*m)->tensors()) weight_bytes += static_cast<int64_t>(t.n_bytes());
    }
    if (a->layers) s.n_layer = a->layers;
    if (a->head_dim) s.head_dim = a->head_dim;
    if (a->kv_heads) s.n_head_kv = a->kv_heads;
    if (a->d_model && !a->kv_heads) {
      // Full multi-head attention: K and V rows are d_model wide.
      if (!s.head_dim) s.head_dim = a->d_model;
      s.n_head_kv = a->d_model / s.head_dim;
    }
    if (a->weights_gib >= 0) weight_bytes = static_cast<int64_t>(a->weights_gib * (1ll << 30));
    KvFlags kv = a->kv;
    if (kv.both.empty()) kv.both = a->dtype;
    s.k = kv.types().k;
    s.v = kv.types().v;
    KvMath r;
    std::string err = kv_math(s, a->context, a->batch, a->block, static_cast<int64_t>(a->budget_gib * (1ll << 30)),
                              weight_bytes, &r);
    if (!err.empty()) {
      *exit_code = fail(invalid_argument(err));
      return;
    }
    if (a->json) {
      nlohmann::json j = {{"layers", s.n_layer}, {"kv_heads", s.n_head_kv}, {"head_dim", s.head_dim},
                          {"dtype", s.k == s.v ? kv_type_name(s.k) : std::string(kv_type_name(s.k)) + "/" + kv_type_name(s.v)},
                          {"kv_type_k", kv_type_name(s.k)}, {"kv_type_v", kv_type_name(s.v)},
                          {"context", a->context}, {"batch", a->batch},
                          {"block_size", a->block}, {"bytes_per_token", r.bytes_per_token},
                          {"state_bytes_per_sequence", s.state_bytes_per_sequence},
                          {"bytes_per_sequence", r.bytes_per_sequence}, {"bytes_per_batch", r.bytes_per_batch},
                          {"paged_bytes_per_sequence", r.paged_bytes_per_sequence},
                          {"paged_waste_bytes", r.paged_waste_bytes}, {"weight_bytes", weight_bytes},
                          {"max_sequences", r.max_sequences}, {"max_sequences_paged", r.max_sequences_paged},
                          {"sliding_window", window}, {"sliding_window_layers", window_layers},
                          {"shared_kv_layers", shared_layers}};
      if (mla)
        j["mla"] = {{"kv_lora_rank", mla->kv_lora_rank}, {"rope_dim", mla->rope_dim}, {"heads", mla->n_head},
                    {"decompressed_head_dims", mla->mla_k_dim + mla->mla_v_dim}};
      if (s.n_layer_b > 0)
        j["local_layers"] = {{"layers", s.n_layer_b}, {"kv_heads", s.n_head_kv_b}, {"head_dim", s.head_dim_b}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("KV cache: %lld layers x %lld KV heads x %lld head dim, %s\n", static_cast<long long>(s.n_layer),
                  static_cast<long long>(s.n_head_kv), static_cast<long long>(s.head_dim),
                  s.k == s.v ? kv_type_name(s.k) : (std::string("K ") + kv_type_name(s.k) + ", V " + kv_type_name(s.v)).c_str());
      if (s.n_layer_b > 0)
        std::printf("  local layers:  %lld more layers x %lld KV heads x %lld head dim (the sliding-window ones)\n",
                    static_cast<long long>(s.n_layer_b), static_cast<long long>(s.n_head_kv_b),
                    static_cast<long long>(s.head_dim_b));
      if (mla) {
        // What the same layers would cache per token as the heads they decompress into (K and V of every head).
        const int64_t mha = s.n_layer * mla->n_head *
                            static_cast<int64_t>(kv_row_bytes(s.k, mla->mla_k_dim) + kv_row_bytes(s.v, mla->mla_v_dim));
        std::printf("  per token:     %s  (layers x one row: the %lld-wide latent | %lld rotated key dims; V is read "
                    "from the latent; as %lld decompressed K and V heads it would be %s, %.1fx)\n",
                    format_bytes(r.bytes_per_token).c_str(), static_cast<long long>(mla->kv_lora_rank),
                    static_cast<long long>(mla->rope_dim), static_cast<long long>(mla->n_head),
                    format_bytes(mha).c_str(), static_cast<double>(mha) / static_cast<double>(r.bytes_per_token));
      } else {
        std::printf("  per token:     %s  (2 x layers x KV heads x head dim x element size)\n",
                    format_bytes(r.bytes_per_token).c_str());
      }
      if (shared_layers > 0)
        std::printf("  shared:        %lld of %lld layers read the KV of an earlier layer of their kind and keep "
                    "none of their own\n",
                    static_cast<long long>(shared_layers), static_cast<long long>(all_layers));
      if (s.state_bytes_per_sequence > 0)
        std::printf("  state:         %s per sequence, whatever its length (recurrent layers' conv windows and, "
                    "in gated delta nets and Mamba-2, their matrices; f32)\n",
                    format_bytes(s.state_bytes_per_sequence).c_str());
      if (window_layers > 0)
        std::printf("  window:        %lld of %lld layers attend within the last %lld positions; their KV is kept for "
                    "every position, as the others' (the prefix cache reuses it whole)\n",
                    static_cast<long long>(window_layers), static_cast<long long>(s.n_layer + s.n_layer_b),
                    static_cast<long long>(window));
      std::printf("  per sequence:  %s  at %lld tokens\n", format_bytes(r.bytes_per_sequence).c_str(),
                  static_cast<long long>(a->context));
      std::printf("  per batch:     %s  for %lld sequences\n", format_bytes(r.bytes_per_batch).c_str(),
                  static_cast<long long>(a->batch));
      std::printf("  paged:         %s per sequence in %lld-token blocks (%s in the last block's unused slots)\n",
                  format_bytes(r.paged_bytes_per_sequence).c_str(), static_cast<long long>(a->block),
                  format_bytes(r.paged_waste_bytes).c_str());
      if (r.max_sequences >= 0)
        std::printf("  budget:        %lld sequences fit beside %s of weights (paged: %lld)\n",
                    static_cast<long long>(r.max_sequences), format_bytes(weight_bytes).c_str(),
                    static_cast<long long>(r.max_sequences_paged));
    }
    *exit_code = 0;
  });
}

}  // namespace cachet::cli
