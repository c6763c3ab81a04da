// The speculative decoding flags shared by run, chat, serve and batch (docs/speculative.md).
#include <CLI/CLI.hpp>

#include "engine/engine.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

void add_spec_flags(CLI::App* c, SpecFlags* f) {
  c->add_option("--draft-model", f->draft_model,
                "speculative decoding with this draft model (same vocabulary, e.g. a low-bit quantization of -m)");
  c->add_flag("--lookup", f->lookup, "speculative decoding by prompt lookup: drafts copied from the text so far");
  c->add_option("--draft-max", f->draft_max, "most draft tokens per step (the engine picks fewer when they do not pay)")
      ->check(CLI::Range(1, 64));
  c->add_option("--draft-vocab", f->draft_vocab,
                "the draft model proposes only token ids below N (the frequent start of a BPE vocabulary), skipping most "
                "of its head; output stays exact (0: every id)")
      ->check(CLI::NonNegativeNumber);
  c->add_flag("--draft-fixed", f->fixed,
              "always draft --draft-max tokens, even when the cost model says it does not pay (measuring, testing)");
}

Status apply_spec_flags(const SpecFlags& f, Model& target, EngineConfig* cfg, std::unique_ptr<Model>* draft) {
  if (!f.draft_model.empty() && f.lookup) return invalid_argument("give --draft-model or --lookup, not both");
  cfg->draft_max = f.draft_max;
  cfg->spec_adaptive = !f.fixed;
  if (f.lookup) cfg->spec = SpecMode::kLookup;
  if (f.draft_model.empty()) return Status::ok();
  LoadOptions lo;
  lo.pool = target.shared_pool();  // one set of threads for both models
  lo.rope = f.rope;
  lo.logit_rows = f.draft_vocab;
  CACHET_ASSIGN_OR_RETURN(*draft, load_model(f.draft_model, lo));
  cfg->draft_model = draft->get();
  cfg->spec = SpecMode::kDraft;
  if (auto e = Engine::create(target, *cfg); !e.is_ok()) return e.status();
  return Status::ok();
}

}  // namespace cachet::cli
