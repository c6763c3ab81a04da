// SpecPolicy: how many tokens each speculating request drafts this step, from measurements, not guesses.
// - Cost: the target's forward time as a function of the step's tokens, measured on every step the engine
//   runs (CostCurve); likewise the draft model's passes. Decode is memory-bound (the weight read dominates),
//   so extra positions are nearly free up to a knee; a large batch is compute-bound and they are not.
// - Gain: a request's per-token acceptance rate alpha, counted over its own recent drafts; the j-th draft token
//   is emitted with probability alpha^j (it needs all before it accepted).
// choose() adds draft tokens, the likeliest-to-be-accepted first, up to every candidate's cap, and keeps the
// prefix of that order with the most expected emitted tokens per second of the whole step (the measured curve
// has knees, so one more token can lose where three more win); a step where no prefix pays drafts nothing
// (speculation off under load).
// Model-free: tested alone (tests/test_speculative.cc).
#pragma once

#include <utility>
#include <vector>

namespace cachet {

// Seconds of a forward pass as a function of its tokens, measured: the mean of recent passes per bucket of
// token counts (each count up to 32, then powers of two), linear between measured buckets. Below the smallest
// measured count, that bucket's time; above the largest, time grows in proportion to tokens (compute-bound,
// the pessimistic side). Decode steps, prefill chunks and speculative steps all feed it, so the knee where
// extra positions stop being nearly free is read off this machine and this model.
class CostCurve {
 public:
  void observe(int n_tokens, double seconds);
  double predict(int n_tokens) const;  // 0 when nothing was measured
  bool measured() const;
  // Some pass of at most n tokens was measured (below that, predict() is a guess).
  bool measured_at_or_below(int n_tokens) const;
  // The mean token count of the largest measured bucket (0: nothing measured).
  double largest_measured() const;

 private:
  static int bucket(int n);
  struct Bucket {
    double w = 0, n = 0, t = 0;  // decayed count, sum of token counts, sum of seconds
  };
  Bucket b_[48];
};

// A request's acceptance as two rates: `first`, that a draft's first token is accepted, and `cont`, that a token
// is accepted given the one before it was. Draft j (1-based) is then emitted with probability first * cont^(j-1).
// One rate alone (first == cont) fits a draft model's independent misses; prompt lookup is all-or-nothing: its
// first token is the gamble (does the text copy here?) and, once copying, the rest follow (cont near 1).
struct AcceptRates {
  double first = 0.5, cont = 0.5;
  AcceptRates() = default;
  AcceptRates(double alpha) : first(alpha), cont(alpha) {}  // NOLINT: one rate for both is the geometric model
  AcceptRates(double f, double c) : first(f), cont(c) {}
};

// The prior of a proposer kind nothing has measured yet: optimistic, so the first requests draft and measure it
// (a neutral 0.5 predicts no gain for a draft model whose pass costs a third of the target's, so it would never
// be tried, never measured, and never used). Two pseudo-observations: real drafts outweigh it within a few steps.
inline AcceptRates unmeasured_prior() { return {0.8, 0.8}; }

// Acceptance counts, forgetting as they go: per request (a request's text changes character as it goes; decay
// 0.9 per verified draft) or engine-wide per proposer kind (a longer memory, kEngineDecay).
struct Acceptance {
  static constexpr double kRequestDecay = 0.9, kEngineDecay = 0.98;
  double first_accepted = 0, first_tried = 0, cont_accepted = 0, cont_tried = 0;
  double decay = kRequestDecay;
  void add(int proposed, int accepted_n);
  // With `weight` pseudo-observations at `prior` (a new request starts from what its kind of draft has been
  // doing). Prompt lookup: 2, its acceptance is the request's own text. A draft model: kDraftPriorWeight, since
  // its misses are mostly the draft's, not the request's: with 2, four first-token misses in a row (common at a
  // 0.7 rate) took one request's estimate from 0.96 to 0.38 and it never drafted again (the 2026-11-25 run (caa4463), open chat).
  static constexpr double kLookupPriorWeight = 2.0, kDraftPriorWeight = 8.0;
  AcceptRates rates(AcceptRates prior = {}, double weight = kLookupPriorWeight) const {
    return {(first_accepted + weight * prior.first) / (first_tried + weight),
            (cont_accepted + weight * prior.cont) / (cont_tried + weight)};
  }
};

class SpecPolicy {
 public:
  explicit SpecPolicy(int k_max) : k_max_(k_max) {}
  int k_max() const { return k_max_; }
  void observe_target(int n_tokens, double seconds) { target_.observe(n_tokens, seconds); }
  void observe_draft(int n_tokens, double seconds) { draft_.observe(n_tokens, seconds); }

  // A whole decode step as it happened (drafting, the pass, verification, sampling): tokens emitted per second,
  // kept apart for steps that verified drafts and steps that did not, per batch size (powers of two). When
  // drafting steps have been measured slower than plain ones at this batch size, choose() drafts nothing: the
  // guard that keeps speculation from ever costing throughput, whatever the cost model missed. A draft model's
  // catch-up prefill is left out of `seconds`: the guard compares steady drafting with plain steps, and
  // catch-ups are bounded apart (choose(), idle_retry()). The 2026-11-24 run charged them to the drafting steps as a
  // debt; one request's prompt then made drafting look slower at one client (53 vs 81 tok/s), the guard held,
  // no drafting step ever measured it again, and the draft model ran at 0.94-1.02x (2026-11-25, caa4463). While the
  // guard holds speculation off, every 32nd step at that batch size may draft, so a rate measured once does
  // not rule forever.
  void observe_step(int batch, bool drafted, int tokens, double seconds);

  // rates: the candidates' acceptance rates; uses_draft_model[i]: its draft costs draft passes; other_tokens:
  // the step's tokens besides the candidates' own (prefill chunks, other decodes). Returns k per candidate.
  // batch: the requests decoding this step (the guard's bucket); 0: candidates + other_tokens.
  // A catch-up of more than 8 tokens at a batch size where drafting steps have not been measured faster than
  // plain ones is an experiment: paid from the retry credit (idle_retry) or not run. 8 clients starting at
  // once would otherwise each prefill their prompt through the draft before anything said it pays (0.90x).
  // catch_up[i] / remaining[i] (optional): tokens the draft model must prefill before candidate i can draft
  // (its prompt, the first time) and the tokens the request may still generate: the prefill's cost is charged to
  // this step in proportion to the steps it will serve, so a draft that cannot earn its prefill back is not run.
  std::vector<int> choose(const std::vector<AcceptRates>& rates, const std::vector<bool>& uses_draft_model,
                          int other_tokens, int batch = 0, const std::vector<int>* catch_up = nullptr,
                          const std::vector<int>* remaining = nullptr);
  // True every 16th call per batch size: that step drafts nothing, so the plain rate the guard compares against
  // stays measured while drafting pays.
  bool plain_probe(int batch);
  // True on every 16th step per batch size, half-way between plain probes (it reads plain_probe's step count, so
  // ask it after plain_probe in the same step): that step one drafting request drafts a token more than chosen.
  // Longer verifies' cost and the acceptance of later draft tokens (`cont`) are learned only at the sizes chosen;
  // without this, a calibration pass that met a slow moment held k at 1 for a whole run (t(3) measured 16 ms at
  // startup, 11.6 when run; the 2026-11-27 run (1e659e5)).
  bool explore_probe(int batch) const;
  // A request the policy keeps from drafting still tries now and then, so its acceptance rate (and the draft's
  // cost) stay measured as its text and the load change: one token every 32nd idle step while its draft is
  // caught up (at most 8 tokens behind). A draft model that fell behind while its request did not draft needs
  // a catch-up first, paid from an engine-wide credit that every step earns 1/20 of its time: a retry of two
  // tokens when the credit covers the catch-up's predicted cost, or after 256 idle steps on any credit not in
  // debt (the catch-up grows by one token a step, so where 20 prefill tokens of the draft cost more than a step
  // the credit alone would never reach it). So catch-up retries take at most ~5% of the time however many
  // requests wait (one budget: with one per request, 16 idle clients retried together, a 4,245-token catch-up).
  // Without any retry a request that stopped drafting never drafted again (2026-11-25, caa4463). Never while the guard
  // holds speculation off at this batch size. Returns the retry's draft tokens, 0 while none is due.
  int idle_retry(int idle_steps, int catch_up, int batch);
  void earn_retry_credit(double step_secs) { retry_credit_ = std::min(retry_credit_ + step_secs / 50.0, 1.0); }
  // The guard holds speculation off at this batch size: drafting steps measured slower than plain ones.
  bool guard_holds(int batch) const;
  // Drafting steps at this batch size measured faster than plain ones.
  bool drafting_proven(int batch) const;
  // The guard's measured rates at this batch size, tokens/s: {drafting steps, plain steps} (0: unmeasured).
  std::pair<double, double> step_rates(int batch) const {
    const int b = batch_bucket(batch);
    return {drafted_[b].rate(), plain_[b].rate()};
  }

  // The draft model's predicted seconds for a pass of n tokens. Past its largest measured pass (a catch-up
  // prefill of a prompt, before one was timed), not its own slope: the target's curve at n scaled by the
  // draft/target ratio at that largest pass, whichever is more. A draft costs the target's FLOPs per token
  // (same shape, fewer bits), so a prefill the target measured predicts the draft's.
  double draft_time(int n_tokens) const;

  const CostCurve& target_cost() const { return target_; }
  const CostCurve& draft_cost() const { return draft_; }

 private:
  // choose() for one step's shape, without the guard: the best prefix of the likeliest-first order.
  std::vector<int> best_split(const std::vector<AcceptRates>& rates, const std::vector<bool>& uses_draft_model,
                              int other_tokens, const std::vector<int>* catch_up,
                              const std::vector<int>* remaining) const;

  int k_max_;
  CostCurve target_, draft_;
  struct Rate {
    double w = 0, tokens = 0, seconds = 0;
    double rate() const { return seconds > 0 ? tokens / seconds : 0.0; }
  };
  Rate drafted_[16], plain_[16];
  double retry_credit_ = 0.1;  // seconds of catch-up that experiments may spend (idle_retry, choose)
  int probe_[16] = {}, retry_[16] = {};
  static int batch_bucket(int batch);
};

}  // namespace cachet
