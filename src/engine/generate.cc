#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "base/utf8.h"
#include "kv/kv_cache.h"
#include "sampling/stop.h"

namespace cachet {

namespace {
using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

double GenerateResult::decode_tok_per_s() const {
  return decode_ms > 0 && token_ids.size() > 1 ? (token_ids.size() - 1) * 1000.0 / decode_ms : 0.0;
}

double GenerateResult::tbt_mean_ms() const {
  if (tbt_ms.empty()) return 0.0;
  return std::accumulate(tbt_ms.begin(), tbt_ms.end(), 0.0) / tbt_ms.size();
}

double GenerateResult::tbt_percentile_ms(double p) const {
  if (tbt_ms.empty()) return 0.0;
  std::vector<double> v = tbt_ms;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(std::clamp(p / 100.0, 0.0, 1.0) * (v.size() - 1) + 0.5);
  return v[i];
}

namespace {

// The shared loop. With `cache`, the prompt's first `reused` tokens are already in it; otherwise every step
// recomputes the whole sequence from scratch.
Result<GenerateResult> run_loop(Model& model, ContiguousKvCache* cache, int reused, const std::vector<int32_t>& prompt,
                                const GenerateOptions& opts, const TokenCallback& on_token) {
  const ModelConfig& cfg = model.config();
  CACHET_RETURN_IF_ERROR(opts.sampling.validate(cfg.n_vocab));
  if (prompt.empty()) return invalid_argument("the prompt is empty");
  if (!opts.sampling.stop.empty() && !opts.token_text)
    return invalid_argument("stop sequences need the model's tokenizer");
  const int max_tokens = opts.sampling.max_tokens;

  GenerateResult res;
  res.n_prompt = static_cast<int>(prompt.size());
  res.n_reused = reused;
  res.n_prefilled = static_cast<int>(prompt.size()) - reused;
  if (max_tokens == 0) return res;
  Sampler sampler(opts.sampling);
  StopMatcher stops(opts.sampling.stop);
  std::string pending_bytes;  // token bytes not yet forming whole UTF-8 characters
  std::vector<float> logits(cfg.n_vocab);
  std::vector<int32_t> seq = prompt;

  auto is_stop = [&](int32_t id) {
    const SpecialTokens& sp = model.special_tokens();
    if (opts.stop_at_eos && ((sp.eos && id == *sp.eos) || (sp.eot && id == *sp.eot))) return true;
    return std::find(opts.stop_ids.begin(), opts.stop_ids.end(), id) != opts.stop_ids.end();
  };

  const auto t0 = Clock::now();
  auto last = t0;
  for (int step = 0; step < max_tokens; ++step) {
    if (cache) {
      // Step 0 prefills the prompt (past the reused prefix) in one pass; later steps feed the newest token.
      std::vector<int32_t> feed =
          step == 0 ? std::vector<int32_t>(prompt.begin() + reused, prompt.end()) : std::vector<int32_t>{seq.back()};
      int pos0 = step == 0 ? reused : static_cast<int>(seq.size()) - 1;
      ForwardBatch b = ForwardBatch::single(*cache, feed, pos0, false);
      CACHET_RETURN_IF_ERROR(model.forward(b, logits.data()));
    } else {
      // Naive: a fresh cache and the whole sequence every step.
      ContiguousKvCache scratch(cfg, static_cast<int>(seq.size()), opts.kv_type);
      ForwardBatch b = ForwardBatch::single(scratch, seq, 0, false);
      CACHET_RETURN_IF_ERROR(model.forward(b, logits.data()));
    }
    TokenEvent ev;
    auto sampled = sampler.sample(logits.data(), cfg.n_vocab, seq, res.n_prompt);
    if (!sampled.is_ok()) return sampled.status().with_context("step " + std::to_string(step));
    ev.sample = std::move(sampled).value();
    const int32_t id = ev.sample.id;
    ev.id = id;
    const auto now = Clock::now();
    if (step == 0) {
      res.ttft_ms = ms_between(t0, now);
      res.prefill_ms = res.ttft_ms;
    } else {
      res.tbt_ms.push_back(ms_between(last, now));
    }
    last = now;
    seq.push_back(id);
    res.token_ids.push_back(id);
    res.samples.push_back(ev.sample);
    const bool stop_token = is_stop(id);
    if (opts.token_text && !stop_token) {
      // Whole UTF-8 characters only reach the stop matcher, so nothing streamed ever splits one.
      pending_bytes += opts.token_text(id);
      const size_t whole = utf8_complete_prefix(pending_bytes);
      ev.text = stops.feed(pending_bytes.substr(0, whole));
      pending_bytes.erase(0, whole);
      res.text += ev.text;
    }
    bool keep_going = on_token ? on_token(ev) : true;
    if (stop_token || stops.stopped()) {
      res.finish = FinishReason::kStop;
      break;
    }
    if (!keep_going) break;
  }
  if (opts.token_text && !stops.stopped()) {
    std::string tail = stops.feed(sanitize_utf8(pending_bytes));
    tail += stops.flush();
    res.text += tail;
    if (!tail.empty() && on_token) on_token(TokenEvent{std::nullopt, tail, {}});
  }
  res.decode_ms = ms_between(t0, last) - res.ttft_ms;
  return res;
}

}  // namespace

Session::Session(Model& model, int capacity, KvTypes kv_type) : model_(model), capacity_(capacity), kv_type_(kv_type) {
  cache_ = std::make_unique<ContiguousKvCache>(model.config(), capacity, kv_type);
}

Result<GenerateResult> Session::generate(const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                                         const TokenCallback& on_token) {
  if (prompt.empty()) return invalid_argument("the prompt is empty");
  const int64_t need = static_cast<int64_t>(prompt.size()) + opts.sampling.max_tokens;
  if (need > capacity_)
    return out_of_range("the prompt (" + std::to_string(prompt.size()) + " tokens) plus max_tokens (" +
                        std::to_string(opts.sampling.max_tokens) + ") exceeds the context of " +
                        std::to_string(capacity_) + " tokens");
  size_t common = 0;
  while (common < cached_.size() && common < prompt.size() && cached_[common] == prompt[common]) ++common;
  if (common == prompt.size()) --common;  // the last prompt token must run to produce logits
  // Whatever happens below, only the common prefix is known to be valid until the run completes.
  cached_.resize(common);
  auto res = run_loop(model_, cache_.get(), static_cast<int>(common), prompt, opts, on_token);
  if (!res.is_ok()) return res;
  // Fed through the model: the prompt and every generated token but the last (which was only sampled).
  cached_ = prompt;
  if (!res->token_ids.empty()) cached_.insert(cached_.end(), res->token_ids.begin(), res->token_ids.end() - 1);
  return res;
}

Result<GenerateResult> generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                                const TokenCallback& on_token) {
  if (!opts.use_kv_cache) return run_loop(model, nullptr, 0, prompt, opts, on_token);
  const int64_t capacity = static_cast<int64_t>(prompt.size()) + std::max(opts.sampling.max_tokens, 1);
  if (capacity > (int64_t{1} << 30)) return invalid_argument("prompt plus max_tokens is too long");
  Session s(model, static_cast<int>(capacity), opts.kv_type);
  return s.generate(prompt, opts, on_token);
}

}  // namespace cachet
