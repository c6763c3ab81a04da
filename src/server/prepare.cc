#include "server/prepare.h"

#include "chat/chat_template.h"
#include "chat/tool_format.h"
#include "api/llm_impl.h"
#include "grammar/schema_check.h"

namespace cachet::server {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// A template that knows no tools: calls and results become text in the generic (hermes) form, the tools a
// system message.
ojson generic_tool_messages(const ojson& messages, const std::vector<ToolSpec>& tools) {
  ojson out = ojson::array();
  if (!tools.empty()) {
    std::string sys = generic_tools_prompt(tools);
    if (!messages.empty() && messages[0]["role"] == "system")
      sys = messages[0]["content"].get<std::string>() + "\n\n" + sys;
    out.push_back({{"role", "system"}, {"content", sys}});
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    if (i == 0 && !tools.empty() && m["role"] == "system") continue;
    if (m["role"] == "tool") {
      out.push_back({{"role", "user"},
                     {"content", "<tool_response>\n" + m["content"].get<std::string>() + "\n</tool_response>"}});
    } else if (m["role"] == "assistant" && m.contains("tool_calls")) {
      std::string text = m.value("content", "");
      for (const ojson& c : m["tool_calls"])
        text += (text.empty() ? "" : "\n") + std::string("<tool_call>\n") +
                ojson{{"name", c["function"]["name"]}, {"arguments", c["function"]["arguments"]}}.dump() +
                "\n</tool_call>";
      out.push_back({{"role", "assistant"}, {"content", text}});
    } else {
      out.push_back(m);
    }
  }
  return out;
}

bool ends_with_marker(const std::string& text, const std::string& marker) {
  if (marker.empty()) return false;
  size_t end = text.size();
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == ' ')) --end;
  return end >= marker.size() && text.compare(end - marker.size(), marker.size(), marker) == 0;
}

}  // namespace

std::variant<Prepared, ApiError> prepare_generation(App& app, GenerationRequest& r) {
  Prepared p;
  const bool chat = r.endpoint == Endpoint::kChat;
  // A prompt of more bytes than n_ctx of the vocabulary's longest tokens cannot fit: refused before the
  // tokenizer spends time on it.
  auto cannot_fit = [&](const std::string& text) -> std::optional<ApiError> {
    if (text.size() <= static_cast<size_t>(app.n_ctx) * app.max_token_bytes) return std::nullopt;
    return ApiError{400,
                    "This model's maximum context length is " + std::to_string(app.n_ctx) + " tokens, and the prompt's " +
                        std::to_string(text.size()) + " bytes cannot fit in it (no token is longer than " +
                        std::to_string(app.max_token_bytes) + " bytes).",
                    "invalid_request_error", chat ? "messages" : "prompt", "context_length_exceeded"};
  };

  // The answer's format (response_format / grammar), as a structural-tag format object.
  ojson answer;
  if (!r.response_format.is_null()) {
    const std::string t = r.response_format["type"];
    if (t == "json_object") {
      answer = json_schema_format({{"type", "object"}});
    } else {
      const ojson& js = r.response_format["json_schema"];
      auto checked = check_json_schema(js.contains("schema") ? js["schema"] : js);
      if (!checked.is_ok()) return invalid_request("response_format", checked.status().message());
      answer = json_schema_format(*checked);
    }
  } else if (!r.grammar.empty()) {
    answer = {{"type", "grammar"}, {"grammar", r.grammar}};
  }

  if (!chat) {
    if (auto e = cannot_fit(r.prompt_text)) return *e;
    p.prompt = r.prompt_ids.empty() ? app.tok->encode(r.prompt_text, true, true) : r.prompt_ids;
    if (!answer.is_null()) {
      auto g = answer["type"] == "grammar" ? app.grammars->ebnf(r.grammar)
                                           : app.grammars->json_schema(answer["json_schema"].dump());
      if (!g.is_ok()) return invalid_request(answer["type"] == "grammar" ? "grammar" : "response_format", g.status().message());
      p.grammar = *g;
    }
    return p;
  }

  const std::string& chat_template = r.chat_template ? *r.chat_template : app.chat_template;
  if (chat_template.empty())
    return invalid_request("messages", "this model has no chat template; use /v1/completions");
  const ChatFormat format = detect_chat_format(chat_template);

  std::vector<ToolSpec> tools;
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const ojson& f = r.tools[i]["function"];
    ToolSpec s;
    s.name = f["name"];
    if (f.contains("parameters") && f["parameters"].is_object()) {
      auto checked = check_json_schema(f["parameters"]);
      if (!checked.is_ok())
        return invalid_request("tools[" + std::to_string(i) + "].function.parameters", checked.status().message());
      s.parameters = *checked;
    }
    tools.push_back(std::move(s));
  }
  ToolChoice choice = ToolChoice::kAuto;
  std::string named;
  if (r.tool_choice.is_string()) {
    if (r.tool_choice == "none") choice = ToolChoice::kNone;
    else if (r.tool_choice == "required") choice = ToolChoice::kRequired;
  } else if (r.tool_choice.is_object()) {
    choice = ToolChoice::kNamed;
    named = r.tool_choice["function"]["name"];
  }

  ChatTemplateInputs ti;
  ti.messages = r.messages;
  ti.kwargs = r.template_kwargs;
  if (!r.reasoning_effort.empty()) {
    ti.kwargs["reasoning_effort"] = r.reasoning_effort;
    if (r.reasoning_effort == "none" && !ti.kwargs.contains("enable_thinking")) ti.kwargs["enable_thinking"] = false;
  }
  // The tools are in the prompt whatever tool_choice says (a conversation's prefix stays the same from turn to
  // turn); with "none" the grammar keeps the model from starting a call.
  const bool offered = !tools.empty() && choice != ToolChoice::kNone;
  if (format.template_renders_tools) {
    if (!tools.empty()) ti.tools = r.tools;
    if (format.results_in_calling_turn) ti.messages = results_into_calling_turn(r.messages);
    if (format.calls_in_content) ti.messages = calls_into_content(ti.messages, format);
  } else {
    ti.messages = generic_tool_messages(r.messages, tools);
  }
  if (app.tok->bos()) ti.bos_token = app.tok->token_text(*app.tok->bos());
  if (app.tok->eos()) ti.eos_token = app.tok->token_text(*app.tok->eos());
  auto text = render_chat_template(chat_template, ti);
  if (!text.is_ok()) return invalid_request("messages", "chat template: " + text.status().message());
  if (auto e = cannot_fit(*text)) return *e;
  if (r.images.empty()) {
    p.prompt = app.tok->encode(*text, false, true);
  } else {
    const VisionEncoder* vision = app.llm->impl().vision.get();
    if (!vision)
      return invalid_request("messages", "this model takes no images: the server was started without its projector "
                                         "file (--mmproj)");
    auto ip = build_image_prompt(*app.tok, *vision, *text, r.images, false);
    if (!ip.is_ok()) return invalid_request("messages", ip.status().message());
    p.prompt = std::move(ip->ids);
    p.images = std::move(ip->images);
  }

  // Off when asked, or when the generation prompt already closes the reasoning (Gemma 4's template writes
  // <|channel>thought\n<channel|> unless enable_thinking is on, DeepSeek V3.1's <think></think>, GLM-4.7's
  // </think>).
  const bool thinks = !format.think_start.empty() &&
                      !(ti.kwargs.contains("enable_thinking") && ti.kwargs["enable_thinking"] == false) &&
                      !ends_with_marker(*text, format.think_end);
  const bool inside = thinks && ends_with_marker(*text, format.think_start);
  if (r.thinking_budget > 0 && !thinks)
    return invalid_request("thinking_budget", "'thinking_budget' needs a model that reasons (its template has no <think> "
                                  "markers, or thinking is off)");
  OutputShape shape;
  shape.format = format;
  shape.reasoning = thinks;
  shape.inside_thinking = inside;
  shape.thinking_budget = r.thinking_budget;
  shape.tools = tools;
  shape.choice = choice;
  shape.named = named;
  shape.parallel = r.parallel_tool_calls;
  shape.answer = answer;
  if (const auto tag = structural_tag_for(shape)) {
    auto g = app.grammars->structural_tag(*tag);
    if (!g.is_ok()) return invalid_request(offered ? "tools" : "response_format", g.status().message());
    p.grammar = *g;
  }
  OutputSpec out;
  out.format = format;
  out.reasoning = thinks && r.separate_reasoning;
  out.inside_thinking = inside;
  if (offered) out.tools = tools;
  p.output = out;
  return p;
}

}  // namespace cachet::server
