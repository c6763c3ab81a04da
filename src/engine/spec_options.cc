#include "engine/spec_options.h"

#include "io/gguf.h"

namespace cachet {

Status SpecOptions::validate() const {
  if (int(!draft_model.empty()) + int(lookup) + int(mtp) > 1)
    return invalid_argument("give one of --draft-model, --mtp and --lookup");
  if (!(draft_p_min >= 0.0f && draft_p_min <= 1.0f)) return invalid_argument("--draft-p-min is a probability, 0..1");
  return Status::ok();
}

Status load_speculation(const SpecOptions& o, const RopeOverrides& rope, Model& target, EngineConfig* cfg,
                        std::unique_ptr<Model>* draft) {
  CACHET_RETURN_IF_ERROR(o.validate());
  cfg->draft_max = o.draft_max;
  cfg->draft_p_min = o.draft_p_min;
  cfg->draft_own_kv = o.draft_own_kv;
  cfg->spec_adaptive = !o.fixed;
  if (o.lookup) cfg->spec = SpecMode::kLookup;
  if (o.mtp) {
    // The head comes from the target's own file, on the target's threads.
    if (!target.gguf()) return invalid_argument("--mtp needs a GGUF model (its multi-token-prediction layers)");
    LoadOptions lo;
    lo.pool = target.shared_pool();
    lo.rope = rope;
    lo.mtp_head = true;
    lo.logit_rows = o.draft_vocab;  // --draft-vocab: the head proposes from the start of the vocabulary too
    CACHET_ASSIGN_OR_RETURN(*draft, load_model(target.gguf()->path(), lo));
    cfg->mtp_model = draft->get();
    cfg->spec = SpecMode::kMtp;
    return Status::ok();
  }
  if (o.draft_model.empty()) return Status::ok();
  LoadOptions lo;
  lo.pool = target.shared_pool();  // one set of threads for both models
  lo.rope = rope;
  lo.logit_rows = o.draft_vocab;
  CACHET_ASSIGN_OR_RETURN(*draft, load_model(o.draft_model, lo));
  cfg->draft_model = draft->get();
  cfg->spec = SpecMode::kDraft;
  return Status::ok();
}

}  // namespace cachet
