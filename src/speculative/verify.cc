#include "speculative/verify.h"

#include <algorithm>

namespace cachet {

namespace {

// Draws from norm(max(0, p - q)) by inverse CDF over ids in ascending order; q == nullptr means all of q's mass
// is on x. Only ids where p > 0 can carry residual mass.
int32_t draw_residual(const TokenDist& p, const TokenDist* q, int32_t x, double u) {
  const double p_total = p.total_weight();
  const double q_total = q ? q->total_weight() : 1.0;
  const float* pw = p.weights();
  const float* qw = q ? q->weights() : nullptr;
  auto residual = [&](int32_t i) {
    const double pi = pw[i] / p_total;
    const double qi = q ? qw[i] / q_total : (i == x ? 1.0 : 0.0);
    return std::max(0.0, pi - qi);
  };
  const std::vector<int32_t>& live = p.live();
  const int32_t n = static_cast<int32_t>(p.size());
  double total = 0.0;
  if (!live.empty()) {
    for (int32_t i : live) total += residual(i);
  } else {
    for (int32_t i = 0; i < n; ++i)
      if (pw[i] > 0.0f) total += residual(i);
  }
  if (!(total > 0.0)) return p.draw(u);  // p == q up to rounding: p itself is the residual's limit
  const double target = u * total;
  double acc = 0.0;
  int32_t last = -1;
  auto visit = [&](int32_t i) {
    const double r = residual(i);
    if (r <= 0.0) return false;
    acc += r;
    last = i;
    return target < acc;
  };
  if (!live.empty()) {
    for (int32_t i : live)
      if (visit(i)) return i;
  } else {
    for (int32_t i = 0; i < n; ++i)
      if (pw[i] > 0.0f && visit(i)) return i;
  }
  return last;
}

}  // namespace

Verdict verify_draft_token(const TokenDist& p, const TokenDist* q, int32_t x, double u_accept, double u_resample) {
  const double px = p.prob(x);
  const double qx = q ? q->prob(x) : 1.0;
  // u < p/q  <=>  u * q < p; q(x) = 0 (cannot happen for a token drawn from q) is a rejection.
  if (qx > 0.0 && u_accept * qx < px) return {true, x};
  return {false, draw_residual(p, q, x, u_resample)};
}

}  // namespace cachet
