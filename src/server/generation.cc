#include "server/generation.h"

namespace cachet::server {

using json = nlohmann::json;

namespace {

std::string finish_name(RequestFinish f) {
  switch (f) {
    case RequestFinish::kStop: return "stop";
    case RequestFinish::kLength: return "length";
    default: return "abort";
  }
}

}  // namespace

Generation::Generation(App& app, GenerationRequest r, int n_prompt, Clock::time_point t0,
                       std::optional<OutputSpec> out, const std::string& id_prefix)
    : app_(app), r_(std::move(r)), n_prompt_(n_prompt), t0_(t0), created_(std::time(nullptr)) {
  id_ = id_prefix + std::to_string(t0.time_since_epoch().count());
  for (int i = 0; i < r_.n; ++i) {
    auto c = std::make_unique<Choice>(app.tok, r_.stop);
    if (out)
      c->parser = std::make_unique<ChatOutputParser>(out->format, out->reasoning, out->inside_thinking, out->tools,
                                                     "call_" + id_.substr(id_.find_first_of("0123456789")) + "_" +
                                                         std::to_string(i) + "_");
    choices_.push_back(std::move(c));
  }
  ++app_.in_flight;
}

Generation::~Generation() {
  if (stream_ && !all_done()) app_.service->cancel(stream_);
  --app_.in_flight;
}

bool Generation::all_done() const {
  for (const auto& c : choices_)
    if (!c->done) return false;
  return true;
}

void Generation::cancel() {
  if (stream_) app_.service->cancel(stream_);
}

int Generation::completion_tokens() const {
  int n = 0;
  for (const auto& c : choices_) n += c->tokens;
  return n;
}

std::vector<ChoiceEvent> Generation::pump(std::chrono::milliseconds timeout) {
  std::vector<StreamEvent> evs;
  std::vector<ChoiceEvent> out;
  if (!stream_->wait(&evs, timeout)) return out;
  for (StreamEvent& e : evs) apply(e, &out);
  return out;
}

void Generation::observe_end() {
  if (observed_end_) return;
  observed_end_ = true;
  app_.metrics.e2e.observe(std::chrono::duration<double>(Clock::now() - t0_).count());
}

void Generation::apply(StreamEvent& e, std::vector<ChoiceEvent>* events) {
  Choice& c = *choices_[static_cast<size_t>(e.index)];
  if (c.done) return;
  const RequestEvent& ev = e.ev;
  cached_tokens_ = std::max(cached_tokens_, ev.cached_tokens);
  std::string out;
  json lp = nullptr;
  // A token that ended the request by itself (end of generation) is neither text nor counted.
  const bool eog = ev.token && ev.finish == RequestFinish::kStop;
  if (ev.token && !eog) {
    const auto now = Clock::now();
    if (!first_token_) {
      first_token_ = true;
      app_.metrics.ttft.observe(std::chrono::duration<double>(now - t0_).count());
    } else {
      app_.metrics.itl.observe(std::chrono::duration<double>(now - last_token_).count());
    }
    last_token_ = now;
    ++c.tokens;
    ++app_.metrics.generation_tokens;
    out = c.text_stream.push(*ev.token);
    if (r_.logprobs >= 0) lp = record_logprobs(c, ev);
    if (c.text_stream.stopped()) {
      c.finish = "stop";
      c.done = true;
      app_.service->cancel(stream_, e.index);
    }
  }
  if (!c.done && ev.finish != RequestFinish::kNone) {
    out += c.text_stream.finish();
    c.finish = c.text_stream.stopped() ? "stop" : finish_name(ev.finish);
    c.done = true;
  }
  c.text += out;
  ChoiceEvent ce;
  ce.index = e.index;
  if (c.parser) {
    ce.delta = c.parser->push(out);
    if (c.done) ce.delta.append(c.parser->finish(c.finish == "length"));
  } else {
    ce.delta.content = out;
  }
  c.content += ce.delta.content;
  c.reasoning += ce.delta.reasoning;
  for (const ToolCallDelta& d : ce.delta.calls) {
    if (d.index >= static_cast<int>(c.calls.size())) c.calls.push_back({d.id, d.name, ""});
    c.calls[static_cast<size_t>(d.index)].arguments += d.arguments;
  }
  if (c.done && c.finish == "stop" && !c.calls.empty()) c.finish = "tool_calls";
  ce.logprobs = lp;
  ce.finish = c.done ? c.finish : "";
  if (!ce.delta.empty() || c.done || !lp.is_null()) events->push_back(std::move(ce));
  if (all_done()) observe_end();
}

json Generation::record_logprobs(Choice& c, const RequestEvent& ev) {
  const std::string piece = app_.tok->decode({*ev.token});
  auto bytes_of = [](const std::string& s) {
    json b = json::array();
    for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
    return b;
  };
  if (chat()) {
    json top = json::array();
    for (const auto& t : ev.top) {
      const std::string p = app_.tok->decode({t.id});
      top.push_back({{"token", p}, {"logprob", t.logprob}, {"bytes", bytes_of(p)}});
    }
    json item = {{"token", piece}, {"logprob", ev.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}};
    c.lp_content.push_back(item);
    return {{"content", json::array({item})}};
  }
  json top = json::object();
  for (const auto& t : ev.top) top[app_.tok->decode({t.id})] = t.logprob;
  const int offset = static_cast<int>(c.text.size());
  c.lp_completion["tokens"].push_back(piece);
  c.lp_completion["token_logprobs"].push_back(ev.logprob);
  c.lp_completion["top_logprobs"].push_back(top);
  c.lp_completion["text_offset"].push_back(offset);
  return {{"tokens", {piece}}, {"token_logprobs", {ev.logprob}}, {"top_logprobs", {top}}, {"text_offset", {offset}}};
}

}  // namespace cachet::server
