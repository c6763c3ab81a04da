// The RoPE scaling flags shared by run, chat, serve, batch, perplexity, logits and passkey (docs/rope.md):
// they replace the model file's settings, as llama.cpp's flags of the same names do.
#include <CLI/CLI.hpp>

#include "tools/cachet/common.h"

namespace cachet::cli {

void add_rope_flags(CLI::App* c, RopeOverrides* r) {
  c->add_option_function<std::string>("--rope-scaling", [r](const std::string& v) { r->scaling = v; },
                                      "RoPE scaling: none, linear, yarn or ntk (NTK-aware base change)")
      ->check(CLI::IsMember({"none", "linear", "yarn", "ntk"}));
  c->add_option_function<double>("--rope-scale", [r](double v) { r->scale = v; },
                                 "context extension factor (linear, yarn, ntk)");
  c->add_option_function<double>("--rope-freq-base", [r](double v) { r->freq_base = v; }, "RoPE base frequency");
  c->add_option_function<int64_t>("--yarn-orig-ctx", [r](int64_t v) { r->yarn_orig_ctx = v; },
                                  "YaRN: the context the model was trained at (default: the file's)");
  c->add_option_function<double>("--yarn-beta-fast", [r](double v) { r->yarn_beta_fast = v; },
                                 "YaRN: low correction dim (default 32)");
  c->add_option_function<double>("--yarn-beta-slow", [r](double v) { r->yarn_beta_slow = v; },
                                 "YaRN: high correction dim (default 1)");
  c->add_option_function<double>("--yarn-attn-factor", [r](double v) { r->yarn_attn_factor = v; },
                                 "RoPE attention factor (replaces the file's rope.scaling.attn_factor)");
}

}  // namespace cachet::cli
