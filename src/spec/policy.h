// SpecPolicy: how many tokens each speculating request drafts this step, from measurements, not guesses.
// - Cost: the target's forward time as a function of the step's tokens, t(n) = a + b n, fitted online to every
//   step the engine runs (least squares with exponential forgetting); likewise the draft model's time per
//   pass. Decode is memory-bound (a is the weight read), so extra positions are nearly free while b n << a; a
//   large batch is compute-bound and they are not.
// - Gain: a request's per-token acceptance rate alpha, counted over its own recent drafts; the j-th draft token
//   is emitted with probability alpha^j (it needs all before it accepted).
// choose() adds draft tokens, the likeliest-to-be-accepted first, while the expected emitted tokens per second
// of the whole step rise; a step where no draft token pays drafts nothing (speculation off under load).
// Model-free: tested alone (tests/test_speculative.cc).
#pragma once

#include <vector>

namespace cachet {

// y = a + b x by weighted least squares, each new point weighing 1 and older ones decaying.
class LinearFit {
 public:
  explicit LinearFit(double decay = 0.98) : decay_(decay) {}
  void add(double x, double y);
  bool fitted() const { return n_ >= 2 && var_x() > 1e-9; }
  double a() const;
  double b() const;
  double mean_y() const { return sw_ > 0 ? sy_ / sw_ : 0.0; }
  double samples() const { return n_; }

 private:
  double var_x() const { return sw_ > 0 ? sxx_ / sw_ - (sx_ / sw_) * (sx_ / sw_) : 0.0; }
  double decay_;
  double sw_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
  double n_ = 0;
};

// Per-request acceptance, forgetting slowly (a request's text changes character as it goes).
struct Acceptance {
  double accepted = 0, tried = 0;
  void add(int proposed, int accepted_n);
  double alpha() const { return (accepted + 1.0) / (tried + 2.0); }
};

class SpecPolicy {
 public:
  explicit SpecPolicy(int k_max) : k_max_(k_max) {}
  int k_max() const { return k_max_; }
  void observe_target(int n_tokens, double seconds) { target_.add(n_tokens, seconds); }
  void observe_draft(int n_seqs_per_pass, double seconds_per_pass) { draft_.add(n_seqs_per_pass, seconds_per_pass); }

  // alphas: the candidates' acceptance rates; uses_draft_model[i]: its draft costs draft passes; other_tokens:
  // the step's tokens besides the candidates' own (prefill chunks, other decodes). Returns k per candidate.
  std::vector<int> choose(const std::vector<double>& alphas, const std::vector<bool>& uses_draft_model,
                          int other_tokens) const;

  // The fitted costs (seconds): target a + b n, draft pass c + d m.
  double target_a() const;
  double target_b() const;
  double draft_c() const;
  double draft_d() const;

 private:
  int k_max_;
  LinearFit target_, draft_;
};

}  // namespace cachet
