// The KV cache type flags shared by run, chat, serve, batch, perplexity and logits (docs/kv_quant.md):
// --kv-type for both K and V, --kv-type-k / --kv-type-v for one of them.
#include <CLI/CLI.hpp>

#include "tools/cachet/common.h"

namespace cachet::cli {

void add_kv_flags(CLI::App* c, KvFlags* f) {
  static const std::vector<std::string> names = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4r"};
  c->add_option("--kv-type", f->both, "KV cache element type of K and V (default " + f->fallback + ")")
      ->check(CLI::IsMember(names));
  c->add_option("--kv-type-k", f->k, "element type of K (overrides --kv-type)")->check(CLI::IsMember(names));
  c->add_option("--kv-type-v", f->v, "element type of V (overrides --kv-type)")->check(CLI::IsMember(names));
}

KvTypes KvFlags::types() const {
  const std::string b = both.empty() ? fallback : both;
  const KvType kb = *kv_type_from_name(b);
  return KvTypes(k.empty() ? kb : *kv_type_from_name(k), v.empty() ? kb : *kv_type_from_name(v));
}

void KvFlags::apply(LLMConfig* c) const {
  const std::string b = both.empty() ? fallback : both;
  c->kv_type_k = k.empty() ? b : k;
  c->kv_type_v = v.empty() ? b : v;
}

}  // namespace cachet::cli
