#include "server/openai_format.h"

namespace cachet::server {

namespace {

using json = nlohmann::json;

const char* object_name(const Generation& g, bool chunk) {
  if (g.chat()) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

json usage(const Generation& g) {
  const int completion = g.completion_tokens();
  return {{"prompt_tokens", g.n_prompt()}, {"completion_tokens", completion},
          {"total_tokens", g.n_prompt() + completion},
          {"prompt_tokens_details", {{"cached_tokens", g.cached_tokens()}}}};
}

json envelope(const Generation& g, json choices) {
  return {{"id", g.id()}, {"object", object_name(g, true)}, {"created", g.created()}, {"model", g.model_id()},
          {"choices", std::move(choices)}};
}

class OpenAiShape : public ApiShape {
 public:
  std::string open(const Generation& g) override {
    std::string out;
    if (!g.chat()) return out;
    for (int i = 0; i < g.n_choices(); ++i)
      out += sse(envelope(g, json::array({{{"index", i},
                                           {"delta", {{"role", "assistant"}, {"content", ""}}},
                                           {"logprobs", nullptr},
                                           {"finish_reason", nullptr}}})));
    return out;
  }

  std::string event(const Generation& g, const ChoiceEvent& e) override {
    json choice = {{"index", e.index}, {"logprobs", e.logprobs.is_null() ? json(nullptr) : e.logprobs},
                   {"finish_reason", e.finish.empty() ? json(nullptr) : json(e.finish)}};
    if (!g.chat()) {
      choice["text"] = e.delta.content;
      return sse(envelope(g, json::array({choice})));
    }
    json delta = json::object();
    // Both names: clients read either (vLLM renamed the field once and broke the other half).
    if (!e.delta.reasoning.empty()) delta["reasoning_content"] = delta["reasoning"] = e.delta.reasoning;
    if (!e.delta.content.empty()) delta["content"] = e.delta.content;
    if (!e.delta.calls.empty()) {
      json calls = json::array();
      for (const ToolCallDelta& c : e.delta.calls) {
        json x = {{"index", c.index}};
        if (!c.id.empty()) {
          x["id"] = c.id;
          x["type"] = "function";
          x["function"] = {{"name", c.name}, {"arguments", c.arguments}};
        } else {
          x["function"] = {{"arguments", c.arguments}};
        }
        calls.push_back(std::move(x));
      }
      delta["tool_calls"] = std::move(calls);
    }
    choice["delta"] = std::move(delta);
    return sse(envelope(g, json::array({choice})));
  }

  std::string close(const Generation& g) override {
    std::string out;
    if (g.request().include_usage) {
      json u = envelope(g, json::array());
      u["usage"] = usage(g);
      out += sse(u);
    }
    return out + "data: [DONE]\n\n";
  }

  json response(const Generation& g) override {
    json choices = json::array();
    for (int i = 0; i < g.n_choices(); ++i) {
      const Generation::Choice& c = g.choice(i);
      json ch = {{"index", i}, {"finish_reason", c.finish}, {"logprobs", nullptr}};
      if (g.chat()) {
        json msg = {{"role", "assistant"}, {"content", c.content.empty() && !c.calls.empty() ? json(nullptr)
                                                                                               : json(c.content)}};
        if (!c.reasoning.empty()) msg["reasoning_content"] = msg["reasoning"] = c.reasoning;
        if (!c.calls.empty()) {
          json calls = json::array();
          for (const ToolCall& t : c.calls)
            calls.push_back({{"id", t.id}, {"type", "function"},
                             {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
          msg["tool_calls"] = std::move(calls);
        }
        ch["message"] = std::move(msg);
        if (g.request().logprobs >= 0) ch["logprobs"] = {{"content", c.lp_content}};
      } else {
        ch["text"] = c.content;
        if (g.request().logprobs >= 0) ch["logprobs"] = c.lp_completion;
      }
      choices.push_back(std::move(ch));
    }
    return {{"id", g.id()}, {"object", object_name(g, false)}, {"created", g.created()}, {"model", g.model_id()},
            {"choices", choices}, {"usage", usage(g)}};
  }

  std::string error_event(const ApiError& e) override { return sse(e.body()); }
};

}  // namespace

std::string sse(const json& j) { return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n"; }

std::unique_ptr<ApiShape> openai_shape() { return std::make_unique<OpenAiShape>(); }

}  // namespace cachet::server
