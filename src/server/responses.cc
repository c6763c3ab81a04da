#include "server/responses.h"

#include "server/prepare.h"

namespace cachet::server {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::optional<std::string> text_of(const ojson& c) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) return std::nullopt;
  std::string out;
  for (const ojson& p : c) {
    const std::string t = string_field(p, "type");
    if ((t != "input_text" && t != "output_text" && t != "text") || !p.contains("text") || !p["text"].is_string())
      return std::nullopt;
    out += p["text"].get<std::string>();
  }
  return out;
}

// The Responses request as the chat-completions body parse_generation_request reads. Stateless: no
// previous_response_id, nothing stored.
std::variant<ojson, ApiError> to_chat(const ojson& b, ojson* echo) {
  static const std::set<std::string> known = {
      "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text", "reasoning",
      "max_output_tokens", "temperature", "top_p", "stream", "store", "metadata", "user", "previous_response_id",
      "include", "truncation", "service_tier", "top_logprobs", "prompt_cache_key",
      // cachet's extensions, as in chat completions
      "seed", "repetition_penalty", "min_p", "top_k", "thinking_budget"};
  for (auto it = b.begin(); it != b.end(); ++it)
    if (!known.count(it.key())) return invalid_request(it.key(), "Unrecognized request argument supplied: " + it.key());
  if (b.contains("previous_response_id") && !b["previous_response_id"].is_null())
    return invalid_request("previous_response_id", "this server is stateless: send the conversation in 'input' (store: false)");
  ojson o = ojson::object();
  for (const char* k : {"model", "temperature", "top_p", "stream", "user", "parallel_tool_calls", "seed",
                        "repetition_penalty", "min_p", "top_k", "thinking_budget"})
    if (b.contains(k)) o[k] = b[k];
  if (b.contains("max_output_tokens") && !b["max_output_tokens"].is_null()) o["max_tokens"] = b["max_output_tokens"];
  if (b.contains("prompt_cache_key") && b["prompt_cache_key"].is_string()) o["cache_salt"] = b["prompt_cache_key"];
  ojson msgs = ojson::array();
  if (b.contains("instructions") && !b["instructions"].is_null()) {
    if (!b["instructions"].is_string()) return invalid_request("instructions", "'instructions' must be a string");
    msgs.push_back({{"role", "system"}, {"content", b["instructions"]}});
  }
  if (!b.contains("input")) return invalid_request("input", "'input' is required");
  const ojson& in = b["input"];
  if (in.is_string()) {
    msgs.push_back({{"role", "user"}, {"content", in}});
  } else if (in.is_array()) {
    for (size_t i = 0; i < in.size(); ++i) {
      const ojson& it = in[i];
      const std::string at = "input[" + std::to_string(i) + "]";
      if (!it.is_object()) return invalid_request(at, at + " must be an object");
      const std::string type = string_field(it, "type", it.contains("role") ? "message" : "");
      if (type == "message") {
        const std::string role = it.value("role", "");
        if (role != "user" && role != "assistant" && role != "system" && role != "developer")
          return invalid_request(at + ".role", "unknown role '" + role + "'");
        const auto text = it.contains("content") ? text_of(it["content"]) : std::nullopt;
        if (text) {
          msgs.push_back({{"role", role}, {"content", *text}});
          continue;
        }
        // Images (input_image with an image_url): the chat body's content parts, checked there.
        ojson parts = ojson::array();
        const ojson& c = it.contains("content") ? it["content"] : ojson();
        for (size_t k = 0; c.is_array() && k < c.size(); ++k) {
          const ojson& p = c[k];
          const std::string t = string_field(p, "type");
          if (t == "input_image" && p.contains("image_url") && p["image_url"].is_string())
            parts.push_back({{"type", "image_url"}, {"image_url", {{"url", p["image_url"]}}}});
          else if ((t == "input_text" || t == "output_text" || t == "text") && p.contains("text") && p["text"].is_string())
            parts.push_back({{"type", "text"}, {"text", p["text"]}});
          else
            return invalid_request(at + ".content", at + ".content[" + std::to_string(k) + "] must be input_text or "
                                   "input_image with an image_url (a data: URI)");
        }
        if (parts.empty()) return invalid_request(at + ".content", at + ".content must be text or content parts");
        msgs.push_back({{"role", role}, {"content", parts}});
      } else if (type == "function_call") {
        ojson call = {{"id", it.value("call_id", "")}, {"type", "function"},
                      {"function", {{"name", it.value("name", "")}, {"arguments", it.value("arguments", "{}")}}}};
        if (!msgs.empty() && msgs.back()["role"] == "assistant" && msgs.back().contains("tool_calls"))
          msgs.back()["tool_calls"].push_back(call);
        else
          msgs.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ojson::array({call})}});
      } else if (type == "function_call_output") {
        const ojson& out = it.contains("output") ? it["output"] : ojson("");
        const auto text = out.is_string() ? std::optional<std::string>(out.get<std::string>()) : text_of(out);
        if (!text) return invalid_request(at + ".output", at + ".output must be text");
        msgs.push_back({{"role", "tool"}, {"tool_call_id", it.value("call_id", "")}, {"content", *text}});
      } else if (type == "reasoning") {
        // Reasoning of earlier turns: templates drop it from past turns.
      } else {
        return invalid_request(at + ".type", "input items of type '" + type + "' are not supported");
      }
    }
  } else {
    return invalid_request("input", "'input' must be a string or an array of items");
  }
  if (msgs.empty()) return invalid_request("input", "'input' is empty");
  o["messages"] = msgs;
  if (b.contains("tools") && b["tools"].is_array()) {
    ojson tools = ojson::array();
    for (size_t i = 0; i < b["tools"].size(); ++i) {
      const ojson& t = b["tools"][i];
      if (!t.is_object() || string_field(t, "type") != "function")
        return invalid_request("tools[" + std::to_string(i) + "]", "only function tools are supported (no built-in tools)");
      ojson f = {{"name", t.value("name", "")}};
      if (t.contains("description")) f["description"] = t["description"];
      f["parameters"] = t.contains("parameters") && !t["parameters"].is_null() ? t["parameters"] : ojson{{"type", "object"}};
      tools.push_back({{"type", "function"}, {"function", f}});
    }
    if (!tools.empty()) o["tools"] = tools;
    (*echo)["tools"] = b["tools"];
  }
  if (b.contains("tool_choice")) {
    const ojson& c = b["tool_choice"];
    if (c.is_string()) o["tool_choice"] = c;
    else if (c.is_object() && string_field(c, "type") == "function" && c.contains("name"))
      o["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    else return invalid_request("tool_choice", "'tool_choice' must be auto, none, required or {type: function, name}");
    (*echo)["tool_choice"] = c;
  }
  if (b.contains("text") && b["text"].is_object() && b["text"].contains("format")) {
    const ojson& f = b["text"]["format"];
    const std::string t = string_field(f, "type");
    if (t == "json_schema") {
      if (!f.contains("schema")) return invalid_request("text.format.schema", "'text.format.schema' is required");
      o["response_format"] = {{"type", "json_schema"},
                              {"json_schema", {{"name", f.value("name", "output")}, {"schema", f["schema"]},
                                               {"strict", f.value("strict", true)}}}};
    } else if (t == "json_object" || t == "text") {
      o["response_format"] = {{"type", t}};
    } else {
      return invalid_request("text.format.type", "'text.format.type' must be text, json_object or json_schema");
    }
    (*echo)["text"] = b["text"];
  }
  if (b.contains("reasoning") && b["reasoning"].is_object() && b["reasoning"].contains("effort") &&
      !b["reasoning"]["effort"].is_null()) {
    o["reasoning_effort"] = b["reasoning"]["effort"];
    (*echo)["reasoning"] = b["reasoning"];
  }
  return o;
}

class ResponsesShape : public ApiShape {
 public:
  explicit ResponsesShape(ojson echo) : echo_(std::move(echo)) {}

  std::string open(const Generation& g) override {
    json r = envelope(g, "in_progress");
    return emit("response.created", {{"response", r}}) + emit("response.in_progress", {{"response", r}});
  }

  std::string event(const Generation& g, const ChoiceEvent& e) override {
    std::string out;
    const OutputDelta& d = e.delta;
    if (!d.reasoning.empty()) {
      out += item("reasoning", g);
      reasoning_ += d.reasoning;
      out += emit("response.reasoning_text.delta", {{"item_id", item_id_}, {"output_index", index_},
                                                    {"content_index", 0}, {"delta", d.reasoning}});
    }
    if (!d.content.empty()) {
      out += item("message", g);
      text_ += d.content;
      out += emit("response.output_text.delta", {{"item_id", item_id_}, {"output_index", index_},
                                                 {"content_index", 0}, {"delta", d.content}, {"logprobs", json::array()}});
    }
    for (const ToolCallDelta& c : d.calls) {
      if (!c.id.empty()) {
        out += close_item(g);
        call_ = {c.id, c.name, ""};
        out += open_item("function_call", g);
      }
      call_.arguments += c.arguments;
      if (!c.arguments.empty())
        out += emit("response.function_call_arguments.delta",
                    {{"item_id", item_id_}, {"output_index", index_}, {"delta", c.arguments}});
    }
    if (!e.finish.empty()) out += close_item(g);
    return out;
  }

  std::string close(const Generation& g) override { return emit("response.completed", {{"response", response(g)}}); }

  json response(const Generation& g) override {
    const Generation::Choice& c = g.choice(0);
    json r = envelope(g, c.finish == "length" ? "incomplete" : "completed");
    json output = json::array();
    int k = 0;
    if (!c.reasoning.empty()) output.push_back(reasoning_item(g.id() + "_" + std::to_string(k++), c.reasoning));
    if (!c.content.empty()) output.push_back(message_item(g.id() + "_" + std::to_string(k++), c.content));
    for (const ToolCall& t : c.calls) output.push_back(call_item(g.id() + "_" + std::to_string(k++), t));
    r["output"] = output;
    if (c.finish == "length") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    r["usage"] = {{"input_tokens", g.n_prompt()},
                  {"input_tokens_details", {{"cached_tokens", g.cached_tokens()}}},
                  {"output_tokens", g.completion_tokens()},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", g.n_prompt() + g.completion_tokens()}};
    return r;
  }

  std::string error_event(const ApiError& e) override {
    return emit("error", {{"code", e.code.empty() ? json(nullptr) : json(e.code)}, {"message", e.message},
                          {"param", e.param.empty() ? json(nullptr) : json(e.param)}});
  }

 private:
  ojson echo_;
  int seq_ = 0;
  int index_ = -1;
  std::string open_, item_id_, text_, reasoning_;
  ToolCall call_;

  json envelope(const Generation& g, const char* status) const {
    const GenerationRequest& rq = g.request();
    json r = {{"id", g.id()}, {"object", "response"}, {"created_at", g.created()}, {"status", status},
              {"model", g.model_id()}, {"output", json::array()}, {"parallel_tool_calls", rq.parallel_tool_calls},
              {"tool_choice", "auto"}, {"tools", json::array()}, {"temperature", rq.sampling.temperature},
              {"top_p", rq.sampling.top_p}, {"max_output_tokens", rq.sampling.max_tokens},
              {"incomplete_details", nullptr}, {"error", nullptr}, {"store", false}};
    for (auto it = echo_.begin(); it != echo_.end(); ++it) r[it.key()] = json::parse(it.value().dump());
    return r;
  }
  static json reasoning_item(const std::string& id, const std::string& text) {
    return {{"type", "reasoning"}, {"id", id}, {"summary", json::array()},
            {"content", json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
  }
  static json message_item(const std::string& id, const std::string& text) {
    return {{"type", "message"}, {"id", id}, {"status", "completed"}, {"role", "assistant"},
            {"content", json::array({{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}}})}};
  }
  static json call_item(const std::string& id, const ToolCall& t) {
    return {{"type", "function_call"}, {"id", id}, {"call_id", t.id}, {"name", t.name},
            {"arguments", t.arguments}, {"status", "completed"}};
  }

  std::string emit(const char* type, json data) {
    data["type"] = type;
    data["sequence_number"] = seq_++;
    return std::string("event: ") + type + "\ndata: " + data.dump(-1, ' ', false, json::error_handler_t::replace) +
           "\n\n";
  }
  // Opens an item of this kind unless one is open.
  std::string item(const std::string& kind, const Generation& g) {
    if (open_ == kind) return {};
    return close_item(g) + open_item(kind, g);
  }
  std::string open_item(const std::string& kind, const Generation& g) {
    ++index_;
    open_ = kind;
    item_id_ = g.id() + "_" + std::to_string(index_);
    json it;
    if (kind == "reasoning") it = reasoning_item(item_id_, "");
    else if (kind == "message") it = message_item(item_id_, "");
    else it = call_item(item_id_, call_);
    if (kind != "function_call") it["content"] = json::array();
    if (kind == "message" || kind == "function_call") it["status"] = "in_progress";
    std::string out = emit("response.output_item.added", {{"output_index", index_}, {"item", it}});
    if (kind == "message")
      out += emit("response.content_part.added", {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0},
                                                  {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
    if (kind == "reasoning")
      out += emit("response.content_part.added", {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0},
                                                  {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
    return out;
  }
  std::string close_item(const Generation&) {
    if (open_.empty()) return {};
    std::string out;
    json it;
    if (open_ == "reasoning") {
      out += emit("response.reasoning_text.done", {{"item_id", item_id_}, {"output_index", index_},
                                                   {"content_index", 0}, {"text", reasoning_}});
      out += emit("response.content_part.done", {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0},
                                                  {"part", {{"type", "reasoning_text"}, {"text", reasoning_}}}});
      it = reasoning_item(item_id_, reasoning_);
      reasoning_.clear();
    } else if (open_ == "message") {
      out += emit("response.output_text.done", {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0},
                                                {"text", text_}, {"logprobs", json::array()}});
      out += emit("response.content_part.done", {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0},
                                                  {"part", {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}}}});
      it = message_item(item_id_, text_);
      text_.clear();
    } else {
      out += emit("response.function_call_arguments.done",
                  {{"item_id", item_id_}, {"output_index", index_}, {"arguments", call_.arguments}});
      it = call_item(item_id_, call_);
    }
    open_.clear();
    return out + emit("response.output_item.done", {{"output_index", index_}, {"item", it}});
  }
};

}  // namespace

void handle_responses(App& app, const httplib::Request& req, httplib::Response& res) {
  const auto t0 = Clock::now();
  const std::optional<json> body_or = accept_json_body(app, req, res);
  if (!body_or) return;
  if (!body_or->is_object()) return send_error(res, invalid_request("", "the request body must be a JSON object"));
  const ojson ob = ojson::parse(req.body);
  ojson echo = ojson::object();
  auto converted = to_chat(ob, &echo);
  if (auto* e = std::get_if<ApiError>(&converted)) return send_error(res, *e);
  const ojson& o = std::get<ojson>(converted);
  auto parsed = parse_generation_request(json::parse(o.dump()), Endpoint::kChat, app.tok->n_vocab(), &o);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  GenerationRequest r = std::move(std::get<GenerationRequest>(parsed));
  if (!r.model.empty() && r.model != app.model_id)
    return send_error(res, {404, "The model '" + r.model + "' does not exist; this server serves '" + app.model_id + "'",
                            "invalid_request_error", "model", "model_not_found"});
  auto prepared = prepare_generation(app, r);
  if (auto* e = std::get_if<ApiError>(&prepared)) return send_error(res, *e);
  run_generation(app, req, res, std::move(r), std::move(std::get<Prepared>(prepared)),
                 std::make_shared<ResponsesShape>(std::move(echo)), "resp_", t0);
}

}  // namespace cachet::server
