#include "server/anthropic.h"

#include "server/prepare.h"

namespace cachet::server {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

ApiError bad(const std::string& message) { return invalid_request("", message); }

json error_json(const ApiError& e) {
  std::string type = "api_error";
  if (e.status == 400) type = "invalid_request_error";
  else if (e.status == 401) type = "authentication_error";
  else if (e.status == 404) type = "not_found_error";
  else if (e.status == 429) type = "rate_limit_error";
  else if (e.status == 503) type = "overloaded_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
}

void send(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_json(e).dump(), "application/json");
}

std::string sse_event(const char* name, const json& data) {
  return std::string("event: ") + name + "\ndata: " + data.dump(-1, ' ', false, json::error_handler_t::replace) +
         "\n\n";
}

// Text of a content that is a string or a list of text blocks.
std::optional<std::string> text_of(const json& c) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) return std::nullopt;
  std::string out;
  for (const json& b : c) {
    if (!b.is_object() || string_field(b, "type") != "text" || !b.contains("text") || !b["text"].is_string())
      return std::nullopt;
    out += b["text"].get<std::string>();
  }
  return out;
}

// Anthropic's messages and tools as the OpenAI-shaped body parse_generation_request reads.
std::variant<ojson, ApiError> to_openai(const ojson& b) {
  ojson o = ojson::object();
  // Anthropic's sampling fields, and cachet's extensions (as in chat completions).
  for (const char* k : {"model", "temperature", "top_p", "top_k", "stream", "seed", "repetition_penalty", "min_p",
                        "cache_salt"})
    if (b.contains(k)) o[k] = b[k];
  if (!b.contains("max_tokens") || !b["max_tokens"].is_number_integer())
    return bad("max_tokens: Field required (an integer)");
  o["max_tokens"] = b["max_tokens"];
  if (b.contains("stop_sequences")) o["stop"] = b["stop_sequences"];
  if (b.contains("metadata") && b["metadata"].is_object() && b["metadata"].contains("user_id") &&
      b["metadata"]["user_id"].is_string())
    o["user"] = b["metadata"]["user_id"];
  static const std::set<std::string> known = {"model", "messages", "max_tokens", "system", "stop_sequences",
                                              "stream", "temperature", "top_p", "top_k", "tools", "tool_choice",
                                              "thinking", "metadata", "service_tier", "seed",
                                              "repetition_penalty", "min_p", "cache_salt"};
  for (auto it = b.begin(); it != b.end(); ++it)
    if (!known.count(it.key())) return bad(it.key() + ": Extra inputs are not permitted");
  ojson msgs = ojson::array();
  if (b.contains("system")) {
    const auto sys = text_of(b["system"]);
    if (!sys) return bad("system: must be a string or a list of text blocks");
    msgs.push_back({{"role", "system"}, {"content", *sys}});
  }
  if (!b.contains("messages") || !b["messages"].is_array() || b["messages"].empty())
    return bad("messages: Field required (a non-empty list)");
  for (size_t i = 0; i < b["messages"].size(); ++i) {
    const ojson& m = b["messages"][i];
    const std::string at = "messages." + std::to_string(i);
    if (!m.is_object() || !m.contains("role") || (m["role"] != "user" && m["role"] != "assistant"))
      return bad(at + ".role: must be 'user' or 'assistant'");
    const std::string role = m["role"];
    if (!m.contains("content")) return bad(at + ".content: Field required");
    if (m["content"].is_string()) {
      msgs.push_back({{"role", role}, {"content", m["content"]}});
      continue;
    }
    if (!m["content"].is_array()) return bad(at + ".content: must be a string or a list of content blocks");
    std::string text, thinking;
    ojson calls = ojson::array();
    ojson parts = ojson::array();  // a user message with images: OpenAI content parts, in order
    auto flush_text = [&] {
      if (!text.empty()) parts.push_back({{"type", "text"}, {"text", text}});
      text.clear();
    };
    for (size_t k = 0; k < m["content"].size(); ++k) {
      const ojson& blk = m["content"][k];
      const std::string bat = at + ".content." + std::to_string(k);
      const std::string type = string_field(blk, "type");
      if (type == "text" && blk.contains("text") && blk["text"].is_string()) {
        text += blk["text"].get<std::string>();
      } else if (type == "thinking" && role == "assistant") {
        thinking += blk.value("thinking", "");
      } else if (type == "redacted_thinking" && role == "assistant") {
      } else if (type == "tool_use" && role == "assistant") {
        if (!blk.contains("id") || !blk.contains("name") || !blk["name"].is_string())
          return bad(bat + ": a tool_use block needs 'id', 'name' and 'input'");
        calls.push_back({{"id", blk["id"]}, {"type", "function"},
                         {"function", {{"name", blk["name"]},
                                       {"arguments", blk.value("input", ojson::object()).dump()}}}});
      } else if (type == "tool_result" && role == "user") {
        // Results first, as the tool turns they answer; text in the same message follows them.
        std::string result;
        if (blk.contains("content")) {
          const auto t = text_of(blk["content"]);
          if (!t) return bad(bat + ".content: only text is supported in tool results");
          result = *t;
        }
        if (blk.value("is_error", false)) result = "Error: " + result;
        msgs.push_back({{"role", "tool"}, {"tool_call_id", blk.value("tool_use_id", "")}, {"content", result}});
      } else if (type == "image" && role == "user") {
        const ojson src = blk.value("source", ojson::object());
        const std::string st = string_field(src, "type");
        std::string url;
        if (st == "base64" && src.contains("data") && src["data"].is_string())
          url = "data:" + string_field(src, "media_type", "image/png") + ";base64," + src["data"].get<std::string>();
        else if (st == "url" && src.contains("url") && src["url"].is_string())
          url = src["url"];
        else
          return bad(bat + ".source: an image block needs {\"type\": \"base64\", \"media_type\", \"data\"}");
        flush_text();
        parts.push_back({{"type", "image_url"}, {"image_url", {{"url", url}}}});
      } else if (type == "image" || type == "document") {
        return bad(bat + ": " + type + " blocks are not supported here");
      } else {
        return bad(bat + ": unsupported content block type '" + type + "' in a " + role + " message");
      }
    }
    if (role == "assistant") {
      ojson a = {{"role", "assistant"}, {"content", text.empty() ? ojson(nullptr) : ojson(text)}};
      if (!calls.empty()) a["tool_calls"] = calls;
      if (!thinking.empty()) a["reasoning_content"] = thinking;
      msgs.push_back(std::move(a));
    } else if (!parts.empty()) {
      flush_text();
      msgs.push_back({{"role", "user"}, {"content", parts}});
    } else if (!text.empty() || msgs.empty() || msgs.back()["role"] != "tool") {
      msgs.push_back({{"role", "user"}, {"content", text}});
    }
  }
  o["messages"] = msgs;
  if (b.contains("tools")) {
    if (!b["tools"].is_array()) return bad("tools: must be a list");
    ojson tools = ojson::array();
    for (size_t i = 0; i < b["tools"].size(); ++i) {
      const ojson& t = b["tools"][i];
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
        return bad("tools." + std::to_string(i) + ".name: Field required");
      if (t.contains("type") && t["type"] != "custom")
        return bad("tools." + std::to_string(i) + ": server tools ('" + t["type"].dump() + "') are not supported");
      ojson f = {{"name", t["name"]}};
      if (t.contains("description")) f["description"] = t["description"];
      f["parameters"] = t.value("input_schema", ojson{{"type", "object"}});
      tools.push_back({{"type", "function"}, {"function", f}});
    }
    if (!tools.empty()) o["tools"] = tools;
  }
  if (b.contains("tool_choice")) {
    const ojson& c = b["tool_choice"];
    const std::string t = string_field(c, "type");
    if (t == "auto") o["tool_choice"] = "auto";
    else if (t == "any") o["tool_choice"] = "required";
    else if (t == "none") o["tool_choice"] = "none";
    else if (t == "tool" && c.contains("name")) o["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    else return bad("tool_choice: must be {type: auto | any | tool (with name) | none}");
    if (c.value("disable_parallel_tool_use", false)) o["parallel_tool_calls"] = false;
  }
  if (b.contains("thinking")) {
    const ojson& th = b["thinking"];
    const std::string t = string_field(th, "type");
    if (t == "enabled") {
      if (!th.contains("budget_tokens") || !th["budget_tokens"].is_number_integer() || th["budget_tokens"].get<int64_t>() < 1)
        return bad("thinking.budget_tokens: Field required (an integer >= 1)");
      o["thinking_budget"] = th["budget_tokens"];
      o["chat_template_kwargs"] = {{"enable_thinking", true}};
    } else if (t == "disabled") {
      o["chat_template_kwargs"] = {{"enable_thinking", false}};
    } else {
      return bad("thinking: must be {type: enabled, budget_tokens} or {type: disabled}");
    }
  }
  return o;
}

const char* stop_reason(const Generation::Choice& c) {
  if (c.finish == "tool_calls") return "tool_use";
  if (c.finish == "length") return "max_tokens";
  if (!c.text_stream.stop_sequence().empty()) return "stop_sequence";
  return "end_turn";
}

json usage(const Generation& g) {
  return {{"input_tokens", g.n_prompt() - g.cached_tokens()},
          {"cache_read_input_tokens", g.cached_tokens()},
          {"cache_creation_input_tokens", 0},
          {"output_tokens", g.completion_tokens()}};
}

json tool_input(const std::string& args) {
  try {
    json j = json::parse(args.empty() ? "{}" : args);
    return j.is_object() ? j : json{{"value", j}};
  } catch (const json::exception&) {
    return json::object();  // a call cut short by max_tokens: its arguments are incomplete
  }
}

class AnthropicShape : public ApiShape {
 public:
  std::string open(const Generation& g) override {
    json u = usage(g);
    u["output_tokens"] = 0;
    return sse_event("message_start", {{"type", "message_start"},
                                   {"message", {{"id", g.id()}, {"type", "message"}, {"role", "assistant"},
                                                {"model", g.model_id()}, {"content", json::array()},
                                                {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                                                {"usage", u}}}});
  }

  std::string event(const Generation& g, const ChoiceEvent& e) override {
    std::string out;
    const OutputDelta& d = e.delta;
    if (!d.reasoning.empty()) out += block("thinking", json{{"type", "thinking"}, {"thinking", ""}}) +
                                      delta({{"type", "thinking_delta"}, {"thinking", d.reasoning}});
    if (!d.content.empty()) out += block("text", json{{"type", "text"}, {"text", ""}}) +
                                    delta({{"type", "text_delta"}, {"text", d.content}});
    for (const ToolCallDelta& c : d.calls) {
      if (!c.id.empty()) {
        out += close_block();
        out += start_block("tool_use", {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", json::object()}});
      }
      if (!c.arguments.empty()) out += delta({{"type", "input_json_delta"}, {"partial_json", c.arguments}});
    }
    if (!e.finish.empty()) {
      out += close_block();
      const Generation::Choice& c = g.choice(0);
      const std::string& seq = c.text_stream.stop_sequence();
      out += sse_event(
          "message_delta", {{"type", "message_delta"},
                            {"delta", {{"stop_reason", stop_reason(c)},
                                       {"stop_sequence", seq.empty() ? json(nullptr) : json(seq)}}},
                            {"usage", {{"output_tokens", g.completion_tokens()}}}});
    }
    return out;
  }

  std::string close(const Generation&) override { return sse_event("message_stop", {{"type", "message_stop"}}); }

  json response(const Generation& g) override {
    const Generation::Choice& c = g.choice(0);
    json content = json::array();
    if (!c.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", c.reasoning}, {"signature", ""}});
    if (!c.content.empty()) content.push_back({{"type", "text"}, {"text", c.content}});
    for (const ToolCall& t : c.calls)
      content.push_back({{"type", "tool_use"}, {"id", t.id}, {"name", t.name}, {"input", tool_input(t.arguments)}});
    const std::string& seq = c.text_stream.stop_sequence();
    return {{"id", g.id()}, {"type", "message"}, {"role", "assistant"}, {"model", g.model_id()},
            {"content", content}, {"stop_reason", stop_reason(c)},
            {"stop_sequence", seq.empty() ? json(nullptr) : json(seq)}, {"usage", usage(g)}};
  }

  std::string error_event(const ApiError& e) override { return sse_event("error", error_json(e)); }
  json error_body(const ApiError& e) override { return error_json(e); }

 private:
  int index_ = -1;       // the open block's index (-1: none yet)
  std::string open_;     // its type ("" when closed)

  std::string start_block(const std::string& type, const json& cb) {
    ++index_;
    open_ = type;
    return sse_event("content_block_start",
                                   {{"type", "content_block_start"}, {"index", index_}, {"content_block", cb}});
  }
  std::string close_block() {
    if (open_.empty()) return {};
    std::string out;
    if (open_ == "thinking")  // the signature clients expect before a thinking block ends (none here)
      out += sse_event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_},
                                                             {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
    open_.clear();
    return out + sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
  }
  // Opens a block of this type unless one is open.
  std::string block(const std::string& type, const json& cb) {
    if (open_ == type) return {};
    return close_block() + start_block(type, cb);
  }
  std::string delta(const json& d) {
    return sse_event("content_block_delta",
                                   {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
  }
};

}  // namespace

void handle_anthropic_messages(App& app, const httplib::Request& req, httplib::Response& res) {
  const auto t0 = Clock::now();
  const std::optional<json> body_or = accept_json_body(app, req, res);
  if (!body_or) return;
  if (!body_or->is_object()) return send(res, bad("the request body must be a JSON object"));
  const ojson ob = ojson::parse(req.body);
  auto converted = to_openai(ob);
  if (auto* e = std::get_if<ApiError>(&converted)) return send(res, *e);
  const ojson& o = std::get<ojson>(converted);
  const json plain = json::parse(o.dump());
  auto parsed = parse_generation_request(plain, Endpoint::kChat, app.tok->n_vocab(), &o);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send(res, *e);
  GenerationRequest r = std::move(std::get<GenerationRequest>(parsed));
  // Anthropic's default temperature is 1; the model field names what the client thinks it talks to (Claude
  // Code sends its own model names): any is accepted.
  auto prepared = prepare_generation(app, r);
  if (auto* e = std::get_if<ApiError>(&prepared)) return send(res, *e);
  run_generation(app, req, res, std::move(r), std::move(std::get<Prepared>(prepared)),
                 std::make_shared<AnthropicShape>(), "msg_", t0);
}

void handle_anthropic_count_tokens(App& app, const httplib::Request& req, httplib::Response& res) {
  const std::optional<json> body_or = accept_json_body(app, req, res);
  if (!body_or) return;
  if (!body_or->is_object()) return send(res, bad("the request body must be a JSON object"));
  ojson ob = ojson::parse(req.body);
  if (!ob.contains("max_tokens")) ob["max_tokens"] = 1;  // count_tokens takes no max_tokens
  auto converted = to_openai(ob);
  if (auto* e = std::get_if<ApiError>(&converted)) return send(res, *e);
  const ojson& o = std::get<ojson>(converted);
  auto parsed = parse_generation_request(json::parse(o.dump()), Endpoint::kChat, app.tok->n_vocab(), &o);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send(res, *e);
  GenerationRequest r = std::move(std::get<GenerationRequest>(parsed));
  auto prepared = prepare_generation(app, r);
  if (auto* e = std::get_if<ApiError>(&prepared)) return send(res, *e);
  res.set_content(json({{"input_tokens", std::get<Prepared>(prepared).prompt.size()}}).dump(), "application/json");
}

}  // namespace cachet::server
