// The speculative decoding flags shared by run, chat, serve and batch (docs/speculative.md).
#include <CLI/CLI.hpp>

#include "tools/cachet/common.h"

namespace cachet::cli {

void add_spec_flags(CLI::App* c, SpecOptions* f) {
  c->add_option("--draft-model", f->draft_model,
                "speculative decoding with this draft model (same vocabulary, e.g. a low-bit quantization of -m)");
  c->add_flag("--lookup", f->lookup, "speculative decoding by prompt lookup: drafts copied from the text so far");
  c->add_flag("--mtp", f->mtp,
              "speculative decoding with the model's own multi-token-prediction head (Qwen3.5 / 3.6 files carry one)");
  c->add_option("--draft-max", f->draft_max, "most draft tokens per step (the engine picks fewer when they do not pay)")
      ->check(CLI::Range(1, 64));
  c->add_option("--draft-vocab", f->draft_vocab,
                "the draft model proposes only token ids below N (the frequent start of a BPE vocabulary), skipping most "
                "of its head; output stays exact (0: every id)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--draft-p-min", f->draft_p_min,
                "greedy: the draft model stops drafting where its own top probability falls below P (default 0.2)")
      ->check(CLI::Range(0.0, 1.0));
  c->add_flag("--draft-own-kv", f->draft_own_kv,
              "the draft model keeps a KV cache of its own even when it has -m's shape (by default such a draft, a "
              "requantization of -m, reads -m's cache: no second pool, no draft prefill of each prompt)");
  c->add_flag("--draft-fixed", f->fixed,
              "always draft --draft-max tokens, even when the cost model says it does not pay (measuring, testing)");
}

}  // namespace cachet::cli
