// LLM::generate: requests into the engine thread, events back as text. Every front end's tokens become text
// here (TextStream: whole UTF-8 characters, stop sequences, end-of-generation tokens adding nothing).
#include <algorithm>
#include <chrono>

#include "api/llm_impl.h"
#include "engine/beam_search.h"
#include "engine/text_stream.h"

namespace cachet {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

FinishReason finish_of(RequestFinish f) {
  switch (f) {
    case RequestFinish::kStop: return FinishReason::kStop;
    case RequestFinish::kLength: return FinishReason::kLength;
    default: return FinishReason::kAborted;
  }
}

// One sample in flight.
struct Sample {
  int request = 0, index = 0;
  bool ignore_eos = false;
  RequestId id = 0;
  TextStream text;
  Completion out;
  Clock::time_point last;
  bool done = false;
};

}  // namespace

Result<std::vector<Completion>> LLM::generate(const std::vector<Request>& requests, const OutputCallback& on_event) {
  Impl& m = *impl_;
  const auto t0 = Clock::now();
  // Everything is checked before anything runs.
  std::vector<ImagePrompt> prompts;
  int total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    auto p = m.prompt(r);
    if (!p.is_ok()) return p.status().with_context("request " + std::to_string(i));
    if (!r.params.stop.empty() && !m.tok)
      return invalid_argument("request " + std::to_string(i) + ": stop sequences need the model's tokenizer");
    if (r.n < 1 || r.n > 128) return invalid_argument("request " + std::to_string(i) + ": n must be in 1..128");
    prompts.push_back(std::move(*p));
    total += r.n;
  }
  std::vector<std::unique_ptr<Sample>> samples;
  for (size_t i = 0; i < requests.size(); ++i)
    for (int k = 0; k < requests[i].n; ++k) {
      auto s = std::make_unique<Sample>(Sample{static_cast<int>(i), k, requests[i].ignore_eos, 0,
                                               TextStream(m.tok.get(), requests[i].params.stop), {}, t0, false});
      s->out.prompt_tokens = static_cast<int>(prompts[i].ids.size());
      samples.push_back(std::move(s));
    }
  auto stream = std::make_shared<RequestStream>(total);
  auto cancel_all = [&] {
    for (auto& s : samples)
      if (!s->done && s->id) m.service->cancel(s->id);
  };
  int first = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    if (r.params.max_tokens == 0) {  // nothing to generate: done before it starts
      for (int k = 0; k < r.n; ++k) samples[first + k]->done = true;
      first += r.n;
      continue;
    }
    auto id = m.service->add(std::move(prompts[i].ids), r.params, {}, !r.ignore_eos, r.n, r.cache_namespace,
                             std::nullopt, stream, first, std::move(prompts[i].images));
    if (!id.is_ok()) {
      cancel_all();
      return id.status().with_context("request " + std::to_string(i));
    }
    for (int k = 0; k < r.n; ++k) samples[first + k]->id = *id + k;
    first += r.n;
  }

  std::string error;
  auto all_done = [&] {
    return std::all_of(samples.begin(), samples.end(), [](const auto& s) { return s->done; });
  };
  std::vector<StreamEvent> evs;
  while (!all_done()) {
    evs.clear();
    if (!stream->wait(&evs, std::chrono::milliseconds(100))) continue;
    for (StreamEvent& se : evs) {
      Sample& s = *samples[se.index];
      if (s.done) continue;
      const RequestEvent& ev = se.ev;
      OutputEvent out;
      out.request = s.request;
      out.sample = s.index;
      s.out.cached_tokens = ev.cached_tokens;
      if (ev.token) {
        const auto now = Clock::now();
        if (s.out.token_ids.empty()) s.out.ttft_ms = ms_between(t0, now);
        else s.out.tbt_ms.push_back(ms_between(s.last, now));
        s.last = now;
        s.out.token_ids.push_back(*ev.token);
        s.out.tokens.push_back(TokenInfo{*ev.token, ev.logprob, ev.top});
        s.out.spec_draft_tokens = ev.spec_drafted;
        s.out.spec_accepted_tokens = ev.spec_accepted;
        out.token = s.out.tokens.back();
        // A token that ended the request by itself (end of generation) adds no text.
        const bool is_end = ev.finish == RequestFinish::kStop && !s.ignore_eos;
        out.text = s.text.push(*ev.token, is_end);
        if (s.text.stopped()) {  // a stop sequence: the request ends here, whatever the engine does next
          out.finish = FinishReason::kStop;
          m.service->cancel(s.id);
        }
      }
      if (!out.finish && ev.finish != RequestFinish::kNone) {
        out.text += s.text.finish();
        out.finish = finish_of(ev.finish);
        if (!se.error.empty() && error.empty()) error = se.error;
      }
      s.out.text += out.text;
      if (out.finish) {
        s.done = true;
        s.out.finish = *out.finish;
      }
      if (on_event && (out.token || !out.text.empty() || out.finish) && !on_event(out) && !s.done) {
        s.done = true;
        s.out.text += s.text.finish();
        s.out.finish = FinishReason::kAborted;
        m.service->cancel(s.id);
      }
    }
  }
  if (!error.empty()) return unavailable("generation failed: " + error);
  std::vector<Completion> result;
  for (auto& s : samples) result.push_back(std::move(s->out));
  return result;
}

Result<Completion> LLM::generate(const Request& request, const OutputCallback& on_event) {
  CACHET_ASSIGN_OR_RETURN(std::vector<Completion> all, generate(std::vector<Request>{request}, on_event));
  return std::move(all.front());
}

Result<Completion> LLM::chat(const std::vector<ChatMessage>& messages, const SamplingParams& params,
                             const OutputCallback& on_event) {
  // A message's images without markers go before its text.
  std::vector<ChatMessage> marked = messages;
  Request r;
  for (ChatMessage& msg : marked) {
    size_t marks = 0;
    for (size_t at = msg.content.find(kImageMarker); at != std::string::npos;
         at = msg.content.find(kImageMarker, at + kImageMarker.size()))
      ++marks;
    if (marks == 0)
      for (size_t i = 0; i < msg.images.size(); ++i) msg.content = std::string(kImageMarker) + msg.content;
    r.images.insert(r.images.end(), msg.images.begin(), msg.images.end());
  }
  CACHET_ASSIGN_OR_RETURN(std::string text, apply_chat_template(marked, true));
  // The template writes BOS and the role markers itself: nothing is added, special tokens are parsed.
  r.prompt = std::move(text);
  r.add_special = false;
  r.params = params;
  return generate(r, on_event);
}

Result<BeamCompletion> LLM::beam_search(const Request& request, const BeamParams& params) {
  if (!request.images.empty()) return unimplemented("beam search over a prompt with images");
  CACHET_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, impl_->prompt_ids(request));
  BeamSearchParams p;
  p.width = params.width;
  p.max_tokens = params.max_tokens;
  p.length_penalty = params.length_penalty;
  if (!params.ignore_eos) p.end_ids = impl_->end_ids;
  CACHET_ASSIGN_OR_RETURN(BeamResult r, beam_search_model(*impl_->model, prompt, p));
  BeamCompletion c;
  c.token_ids = r.tokens;
  c.logprob = r.logprob;
  c.score = r.score;
  if (impl_->tok) {
    std::vector<int32_t> shown = r.tokens;
    if (!shown.empty() && std::find(p.end_ids.begin(), p.end_ids.end(), shown.back()) != p.end_ids.end())
      shown.pop_back();
    TextStream ts(impl_->tok.get(), {});
    for (int32_t t : shown) c.text += ts.push(t);
    c.text += ts.finish();
  }
  return c;
}

}  // namespace cachet
