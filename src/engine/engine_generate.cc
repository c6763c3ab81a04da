// generate() over an Engine: one request, events streamed as the engine emits them (several per step when
// speculation accepts a draft), stop sequences matched on whole UTF-8 characters as in Session::generate.
#include <chrono>

#include "base/utf8.h"
#include "engine/generate.h"
#include "sampling/stop.h"

namespace cachet {

Result<GenerateResult> generate(Engine& engine, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                                const TokenCallback& on_token) {
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  if (!opts.sampling.stop.empty() && !opts.token_text) return invalid_argument("stop sequences need the model's tokenizer");
  GenerateResult res;
  res.n_prompt = static_cast<int>(prompt.size());
  if (opts.sampling.max_tokens == 0) return res;
  const EngineCounters before = engine.counters();
  const auto t0 = Clock::now();
  CACHET_ASSIGN_OR_RETURN(RequestId id, engine.add_request(prompt, opts.sampling, opts.stop_ids, opts.stop_at_eos));
  StopMatcher stops(opts.sampling.stop);
  std::string pending_bytes;
  auto last = t0;
  bool done = false, stopped = false;
  while (!done && engine.has_work()) {
    CACHET_ASSIGN_OR_RETURN(std::vector<RequestEvent> events, engine.step());
    for (RequestEvent& e : events) {
      if (e.id != id || done) continue;
      res.n_reused = e.cached_tokens;
      if (e.token >= 0) {
        const auto now = Clock::now();
        if (res.token_ids.empty()) res.ttft_ms = res.prefill_ms = ms(t0, now);
        else res.tbt_ms.push_back(ms(last, now));
        last = now;
        res.token_ids.push_back(e.token);
        TokenEvent ev{e.token, "", SampleResult{e.token, e.logprob, e.top}};
        res.samples.push_back(ev.sample);
        const bool stop_token = e.finish == RequestFinish::kStop;
        if (opts.token_text && !stop_token) {
          pending_bytes += opts.token_text(e.token);
          const size_t whole = utf8_complete_prefix(pending_bytes);
          ev.text = stops.feed(pending_bytes.substr(0, whole));
          pending_bytes.erase(0, whole);
          res.text += ev.text;
        }
        const bool keep_going = on_token ? on_token(ev) : true;
        if (stop_token || stops.stopped()) res.finish = FinishReason::kStop;
        if (stops.stopped() || !keep_going) {
          stopped = true;
          engine.abort(id);
        }
      }
      if (e.finish != RequestFinish::kNone || stopped) done = true;
    }
  }
  while (engine.has_work()) {  // an abort frees its blocks at the next step
    auto r = engine.step();
    if (!r.is_ok()) return r.status();
  }
  if (opts.token_text && !stops.stopped()) {
    std::string tail = stops.feed(sanitize_utf8(pending_bytes));
    tail += stops.flush();
    res.text += tail;
    if (!tail.empty() && on_token) on_token(TokenEvent{-1, tail, {}});
  }
  res.n_prefilled = res.n_prompt - res.n_reused;
  res.decode_ms = ms(t0, last) - res.ttft_ms;
  const EngineCounters after = engine.counters();
  res.spec_draft_tokens = after.spec_draft_tokens - before.spec_draft_tokens;
  res.spec_accepted_tokens = after.spec_accepted_tokens - before.spec_accepted_tokens;
  return res;
}

}  // namespace cachet
