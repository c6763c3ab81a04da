#include "server/openai.h"

#include <cmath>
#include <set>
#include <variant>

#include "cachet/llm.h"
#include "server/data_uri.h"

namespace cachet::server {

using nlohmann::json;

json ApiError::body() const {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

namespace {

ApiError bad(const std::string& param, const std::string& message) {
  return ApiError{400, message, "invalid_request_error", param, ""};
}

// Field readers: absent or null -> keep the default; wrong type or range -> an error naming the field.
std::optional<ApiError> read_number(const json& b, const char* key, double lo, double hi, float* out) {
  if (!b.contains(key) || b[key].is_null()) return std::nullopt;
  const json& v = b[key];
  if (!v.is_number()) return bad(key, std::string("'") + key + "' must be a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    return bad(key, std::string("'") + key + "' must be between " + json(lo).dump() + " and " + json(hi).dump() +
                        ", got " + v.dump());
  *out = static_cast<float>(x);
  return std::nullopt;
}

std::optional<ApiError> read_int(const json& b, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  if (!b.contains(key) || b[key].is_null()) return std::nullopt;
  const json& v = b[key];
  if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
    return bad(key, std::string("'") + key + "' must be an integer");
  if (v.is_number_float() && std::fabs(v.get<double>()) > 9e15)
    return bad(key, std::string("'") + key + "' is out of range");
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                        ? INT64_MAX
                        : (v.is_number_float() ? static_cast<int64_t>(v.get<double>()) : v.get<int64_t>());
  if (x < lo || x > hi)
    return bad(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " +
                        std::to_string(hi) + ", got " + v.dump());
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> read_bool(const json& b, const char* key, bool* out) {
  if (!b.contains(key) || b[key].is_null()) return std::nullopt;
  if (!b[key].is_boolean()) return bad(key, std::string("'") + key + "' must be a boolean");
  *out = b[key].get<bool>();
  return std::nullopt;
}

std::optional<ApiError> read_id(const json& b, const char* key, std::string* out) {
  if (!b.contains(key) || b[key].is_null()) return std::nullopt;
  if (!b[key].is_string()) return bad(key, std::string("'") + key + "' must be a string");
  const std::string& v = b[key].get_ref<const std::string&>();
  if (v.size() > kMaxIdBytes)
    return bad(key, std::string("'") + key + "' is longer than " + std::to_string(kMaxIdBytes) + " bytes");
  *out = v;
  return std::nullopt;
}

// response_format, grammar / json_schema, tools and reasoning: shapes here; schemas are checked when compiled.
std::optional<ApiError> read_structured(const json& b, const nlohmann::ordered_json& ob, bool chat,
                                        GenerationRequest* r) {
  int given = 0;
  if (b.contains("response_format") && !b["response_format"].is_null()) {
    const json& f = b["response_format"];
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
      return bad("response_format", "'response_format' must be an object with a 'type'");
    const std::string t = f["type"];
    if (t == "json_schema") {
      if (!f.contains("json_schema") || !f["json_schema"].is_object())
        return bad("response_format", "'response_format.json_schema' must be an object");
      const json& js = f["json_schema"];
      // OpenAI's shape: {"name", "schema", "strict"}; some clients send the schema itself.
      const json schema = js.contains("schema") ? js["schema"] : js;
      if (!schema.is_object() && !schema.is_boolean())
        return bad("response_format", "'response_format.json_schema.schema' must be a JSON schema object");
    } else if (t != "text" && t != "json_object") {
      return bad("response_format", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    }
    if (t != "text") {
      r->response_format = ob["response_format"];
      ++given;
    }
  }
  if (b.contains("json_schema") && !b["json_schema"].is_null()) {
    if (!b["json_schema"].is_object()) return bad("json_schema", "'json_schema' must be a JSON schema object");
    r->response_format = {{"type", "json_schema"}, {"json_schema", {{"schema", ob["json_schema"]}}}};
    ++given;
  }
  if (b.contains("grammar") && !b["grammar"].is_null()) {
    if (!b["grammar"].is_string() || b["grammar"].get_ref<const std::string&>().empty())
      return bad("grammar", "'grammar' must be a non-empty GBNF string");
    if (b["grammar"].get_ref<const std::string&>().size() > kMaxTemplateBytes)
      return bad("grammar", "'grammar' is longer than " + std::to_string(kMaxTemplateBytes) + " bytes");
    r->grammar = b["grammar"];
    ++given;
  }
  if (given > 1) return bad("response_format", "give one of 'response_format', 'json_schema' and 'grammar'");
  if (!chat) return std::nullopt;
  if (b.contains("tools") && !b["tools"].is_null()) {
    const json& tools = b["tools"];
    if (!tools.is_array()) return bad("tools", "'tools' must be an array");
    std::set<std::string> names;
    for (size_t i = 0; i < tools.size(); ++i) {
      const json& t = tools[i];
      const std::string w = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || string_field(t, "type") != "function" || !t.contains("function") || !t["function"].is_object())
        return bad(w, w + " must be {\"type\": \"function\", \"function\": {...}}");
      const json& f = t["function"];
      if (!f.contains("name") || !f["name"].is_string() || f["name"].get_ref<const std::string&>().empty())
        return bad(w + ".function.name", w + ".function.name must be a non-empty string");
      if (!names.insert(f["name"].get<std::string>()).second)
        return bad(w + ".function.name", "two tools are named '" + f["name"].get<std::string>() + "'");
      if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
        return bad(w + ".function.parameters", w + ".function.parameters must be a JSON schema object");
    }
    if (!tools.empty()) r->tools = ob["tools"];
  }
  if (b.contains("tool_choice") && !b["tool_choice"].is_null()) {
    const json& c = b["tool_choice"];
    if (c.is_string()) {
      const std::string v = c;
      if (v != "auto" && v != "none" && v != "required")
        return bad("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or a named function");
    } else if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
               !c["function"].contains("name") || !c["function"]["name"].is_string()) {
      return bad("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                                "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (!c.is_string() || c != "none") {
      if (r->tools.is_null() && !(c.is_string() && c == "auto"))
        return bad("tool_choice", "'tool_choice' needs 'tools'");
    }
    if (c.is_object()) {
      bool found = false;
      for (const json& t : r->tools) found = found || t["function"]["name"] == c["function"]["name"];
      if (!found) return bad("tool_choice", "'tool_choice' names '" + c["function"]["name"].get<std::string>() +
                                                "', which is not among 'tools'");
    }
    r->tool_choice = c;
  }
  if (auto e = read_bool(b, "parallel_tool_calls", &r->parallel_tool_calls)) return e;
  if (!r->tools.is_null() && !r->response_format.is_null() && r->tool_choice != "none")
    return bad("response_format", "'response_format' with 'tools' is not supported: use tool_choice \"none\"");
  if (b.contains("chat_template_kwargs") && !b["chat_template_kwargs"].is_null()) {
    if (!b["chat_template_kwargs"].is_object())
      return bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r->template_kwargs = ob["chat_template_kwargs"];
  }
  if (b.contains("reasoning_effort") && !b["reasoning_effort"].is_null()) {
    const json& e = b["reasoning_effort"];
    if (!e.is_string() || (e != "low" && e != "medium" && e != "high" && e != "minimal" && e != "none"))
      return bad("reasoning_effort", "'reasoning_effort' must be \"none\", \"minimal\", \"low\", \"medium\" or \"high\"");
    r->reasoning_effort = e;
  }
  int64_t budget = 0;
  if (auto e = read_int(b, "thinking_budget", 1, 1 << 20, &budget)) return e;
  r->thinking_budget = static_cast<int>(budget);
  (void)read_bool(b, "separate_reasoning", &r->separate_reasoning);  // its type was checked with the extensions
  return std::nullopt;
}

}  // namespace

std::variant<json, ApiError> parse_body(const std::string& body) {
  // The parser calls back at every value with its depth: past the limit, stop before building anything deeper.
  bool too_deep = false;
  json::parser_callback_t cb = [&too_deep](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) too_deep = true;
    return !too_deep;
  };
  try {
    json j = json::parse(body, cb);
    if (too_deep)
      return bad("", "invalid JSON body: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    return j;
  } catch (const json::exception& e) {
    if (too_deep)
      return bad("", "invalid JSON body: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    return bad("", std::string("invalid JSON body: ") + e.what());
  }
}

std::variant<GenerationRequest, ApiError> parse_generation_request(const json& b, Endpoint endpoint,
                                                                   int64_t n_vocab,
                                                                   const nlohmann::ordered_json* ordered) {
  if (!b.is_object()) return bad("", "the request body must be a JSON object");
  const bool chat = endpoint == Endpoint::kChat;
  static const std::set<std::string> kCommon = {
      "model", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop", "seed",
      "presence_penalty", "frequency_penalty", "logit_bias", "user", "logprobs",
      // ours
      "top_k", "min_p", "repetition_penalty", "ignore_eos", "cache_salt", "speculative",
      // structured output: OpenAI's response_format, llama.cpp's grammar and json_schema
      "response_format", "grammar", "json_schema"};
  // vLLM's: a template for this request (refused unless the server trusts request templates).
  static const std::set<std::string> kChatExtra = {"chat_template"};
  static const std::set<std::string> kCompletions = {"prompt", "echo", "best_of", "suffix"};
  static const std::set<std::string> kChat = {"messages", "max_completion_tokens", "top_logprobs", "tools",
                                              "tool_choice", "parallel_tool_calls", "chat_template_kwargs",
                                              "reasoning_effort", "thinking_budget"};
  // SGLang's extensions, which its router (sglang-router, docs/replicas.md) writes into every request it
  // forwards, at their defaults. Accepted where the value asks for what we do anyway; a value asking for
  // something else is refused by name rather than ignored.
  struct Ext {
    const char* key;
    bool ours;        // the value that means what cachet does
    bool any = false; // no effect here either way (no reasoning parser: content is returned as generated)
  };
  static const Ext kExt[] = {{"skip_special_tokens", true},  {"no_stop_trim", false},
                             {"return_hidden_states", false}, {"continue_final_message", false},
                             {"separate_reasoning", true, true}, {"stream_reasoning", true, true}};

  auto is_ext = [&](const std::string& k) {
    for (const Ext& e : kExt)
      if (k == e.key && (chat || (k != "continue_final_message" && k != "separate_reasoning" &&
                                  k != "stream_reasoning")))
        return true;
    return false;
  };
  for (const auto& [k, v] : b.items())
    if (!kCommon.count(k) && !(chat ? kChat : kCompletions).count(k) && !(chat && kChatExtra.count(k)) &&
        !is_ext(k))
      return bad(k, "Unrecognized request argument supplied: " + k);
  for (const Ext& e : kExt) {
    if (!is_ext(e.key)) continue;
    bool val = e.ours;
    if (auto err = read_bool(b, e.key, &val)) return *err;
    if (val != e.ours && !e.any)
      return bad(e.key, std::string("'") + e.key + "': " + (val ? "true" : "false") + " is not supported");
  }

  GenerationRequest r;
  r.endpoint = endpoint;
  // `model` may be omitted (one model is served); when given it must be a string naming it.
  if (auto e = read_id(b, "model", &r.model)) return *e;
  std::string user;
  if (auto e = read_id(b, "user", &user)) return *e;
  if (b.contains("cache_salt")) {
    if (!b["cache_salt"].is_string() || b["cache_salt"].get<std::string>().empty())
      return bad("cache_salt", "'cache_salt' must be a non-empty string");
    if (auto e = read_id(b, "cache_salt", &r.cache_salt)) return *e;
  }
  if (chat && b.contains("chat_template") && !b["chat_template"].is_null()) {
    if (!b["chat_template"].is_string()) return bad("chat_template", "'chat_template' must be a string");
    if (b["chat_template"].get_ref<const std::string&>().size() > kMaxTemplateBytes)
      return bad("chat_template", "'chat_template' is longer than " + std::to_string(kMaxTemplateBytes) + " bytes");
    r.chat_template = b["chat_template"].get<std::string>();
  }
  if (b.contains("speculative")) {
    const json& v = b["speculative"];
    const std::string s = v.is_string() ? v.get<std::string>() : "";
    if (s == "off") r.speculative = SpecMode::kOff;
    else if (s == "lookup") r.speculative = SpecMode::kLookup;
    else if (s == "draft") r.speculative = SpecMode::kDraft;
    else if (s == "mtp") r.speculative = SpecMode::kMtp;
    else return bad("speculative", "'speculative' must be \"off\", \"lookup\", \"draft\" or \"mtp\"");
  }

  if (chat) {
    if (!b.contains("messages") || !b["messages"].is_array() || b["messages"].empty())
      return bad("messages", "'messages' must be a non-empty array");
    r.messages = nlohmann::ordered_json::array();
    for (size_t i = 0; i < b["messages"].size(); ++i) {
      const json& m = b["messages"][i];
      const std::string where = "messages[" + std::to_string(i) + "]";
      if (!m.is_object()) return bad(where, where + " must be an object");
      if (!m.contains("role") || !m["role"].is_string()) return bad(where + ".role", where + ".role must be a string");
      const std::string role = m["role"];
      if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
        return bad(where + ".role", "unknown role '" + role + "' (system, developer, user, assistant, tool)");
      std::string content;
      const bool has_calls = role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null();
      if (!m.contains("content") || m["content"].is_null()) {
        if (role != "assistant") return bad(where + ".content", where + ".content is required");
      } else if (m["content"].is_string()) {
        content = m["content"];
      } else if (m["content"].is_array()) {
        for (size_t k = 0; k < m["content"].size(); ++k) {
          const json& part = m["content"][k];
          const std::string pw = where + ".content[" + std::to_string(k) + "]";
          const std::string type = string_field(part, "type");
          if (type == "image_url") {
            if (role != "user") return bad(pw, "only user messages carry images");
            const json& iu = part.contains("image_url") ? part["image_url"] : json();
            const json& url = iu.is_object() && iu.contains("url") ? iu["url"] : iu;
            if (!url.is_string()) return bad(pw + ".image_url", pw + ".image_url must be {\"url\": \"data:...\"}");
            DataUri d = parse_data_uri(url.get<std::string>());
            if (!d.error.empty()) return bad(pw + ".image_url", pw + ": " + d.error);
            r.images.push_back(std::move(d.bytes));
            content += kImageMarker;
            continue;
          }
          if (type != "text" || !part.contains("text") || !part["text"].is_string())
            return bad(pw, "content parts are {\"type\": \"text\", \"text\"} or {\"type\": \"image_url\", "
                           "\"image_url\": {\"url\"}}");
          content += part["text"].get<std::string>();
        }
      } else {
        return bad(where + ".content", where + ".content must be a string or an array of content parts");
      }
      nlohmann::ordered_json msg = {{"role", role == "developer" ? "system" : role}, {"content", content}};
      if (has_calls) {
        if (!m["tool_calls"].is_array()) return bad(where + ".tool_calls", where + ".tool_calls must be an array");
        nlohmann::ordered_json calls = nlohmann::ordered_json::array();
        for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
          const json& c = m["tool_calls"][k];
          const std::string cw = where + ".tool_calls[" + std::to_string(k) + "]";
          if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
              !c["function"].contains("name") || !c["function"]["name"].is_string())
            return bad(cw, cw + " must be {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
          const json& f = c["function"];
          // Templates read the arguments as an object (HF's convention); the API sends them as JSON text.
          nlohmann::ordered_json args = nlohmann::ordered_json::object();
          if (f.contains("arguments") && f["arguments"].is_string()) {
            try {
              args = nlohmann::ordered_json::parse(f["arguments"].get<std::string>());
            } catch (const std::exception&) {
              return bad(cw + ".function.arguments", cw + ".function.arguments is not valid JSON");
            }
          } else if (f.contains("arguments") && f["arguments"].is_object()) {
            args = f["arguments"];
          }
          calls.push_back({{"id", c.value("id", "")}, {"type", "function"},
                           {"function", {{"name", f["name"]}, {"arguments", args}}}});
        }
        msg["tool_calls"] = calls;
      }
      if (role == "tool") {
        if (m.contains("tool_call_id") && m["tool_call_id"].is_string()) msg["tool_call_id"] = m["tool_call_id"];
        if (m.contains("name") && m["name"].is_string()) msg["name"] = m["name"];
      }
      if (role == "assistant")
        for (const char* k : {"reasoning_content", "reasoning"})
          if (m.contains(k) && m[k].is_string()) msg["reasoning_content"] = m[k];
      r.messages.push_back(std::move(msg));
    }
  } else {
    if (!b.contains("prompt")) return bad("prompt", "'prompt' is required");
    const json& p = b["prompt"];
    if (p.is_string()) {
      r.prompt_text = p;
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      r.prompt_text = p[0];
    } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
      for (const json& t : p) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab)
          return bad("prompt", "token ids in 'prompt' must be integers in [0, " + std::to_string(n_vocab) + ")");
        r.prompt_ids.push_back(t.get<int32_t>());
      }
    } else if (p.is_array() && p.size() > 1) {
      return bad("prompt", "one prompt per request: send a string, a one-string array or an array of token ids");
    } else {
      return bad("prompt", "'prompt' must be a string, an array of one string or an array of token ids");
    }
    if (r.prompt_text.empty() && r.prompt_ids.empty()) return bad("prompt", "'prompt' must not be empty");
    bool echo = false;
    if (auto e = read_bool(b, "echo", &echo)) return *e;
    if (echo) return bad("echo", "'echo' is not supported");
    if (b.contains("suffix") && !b["suffix"].is_null()) return bad("suffix", "'suffix' is not supported");
  }

  int64_t v = 0;
  SamplingParams& s = r.sampling;
  s.max_tokens = chat ? -1 : 16;  // OpenAI's defaults: 16 for completions, up to the context for chat
  const char* max_key = chat && b.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  v = s.max_tokens;
  if (auto e = read_int(b, max_key, 1, 1 << 30, &v)) return *e;
  s.max_tokens = static_cast<int32_t>(v);
  s.temperature = 1.0f;  // OpenAI's default
  if (auto e = read_number(b, "temperature", 0.0, 2.0, &s.temperature)) return *e;
  if (auto e = read_number(b, "top_p", 0.0, 1.0, &s.top_p)) return *e;
  if (b.contains("top_p") && b["top_p"].is_number() && s.top_p <= 0.0f) return bad("top_p", "'top_p' must be > 0");
  if (auto e = read_number(b, "presence_penalty", -2.0, 2.0, &s.presence_penalty)) return *e;
  if (auto e = read_number(b, "frequency_penalty", -2.0, 2.0, &s.frequency_penalty)) return *e;
  if (auto e = read_number(b, "min_p", 0.0, 1.0, &s.min_p)) return *e;
  if (auto e = read_number(b, "repetition_penalty", 0.01, 100.0, &s.repetition_penalty)) return *e;
  v = 0;
  if (auto e = read_int(b, "top_k", 0, 1 << 30, &v)) return *e;
  s.top_k = static_cast<int32_t>(v);
  v = 1;
  if (auto e = read_int(b, "n", 1, 16, &v)) return *e;
  r.n = static_cast<int>(v);
  if (b.contains("best_of") && !b["best_of"].is_null() && b["best_of"] != b.value("n", json(1)))
    return bad("best_of", "'best_of' is not supported unless equal to 'n'");
  if (b.contains("seed") && !b["seed"].is_null()) {
    if (!b["seed"].is_number_integer()) return bad("seed", "'seed' must be an integer");
    s.seed = b["seed"].is_number_unsigned() ? b["seed"].get<uint64_t>()
                                            : static_cast<uint64_t>(b["seed"].get<int64_t>());
  } else {
    s.seed = std::random_device{}();
  }
  if (auto e = read_bool(b, "stream", &r.stream)) return *e;
  if (auto e = read_bool(b, "ignore_eos", &r.ignore_eos)) return *e;
  if (b.contains("stream_options") && !b["stream_options"].is_null()) {
    const json& so = b["stream_options"];
    if (!so.is_object()) return bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) return bad("stream_options", "'stream_options' is only allowed with 'stream': true");
    for (const auto& [k, x] : so.items())
      if (k != "include_usage") return bad("stream_options", "Unrecognized stream option: " + k);
    if (auto e = read_bool(so, "include_usage", &r.include_usage)) return *e;
  }
  if (b.contains("stop") && !b["stop"].is_null()) {
    const json& st = b["stop"];
    if (st.is_string()) {
      r.stop.push_back(st);
    } else if (st.is_array() && st.size() <= 4) {
      for (const json& x : st) {
        if (!x.is_string()) return bad("stop", "'stop' must be a string or an array of up to 4 strings");
        r.stop.push_back(x);
      }
    } else {
      return bad("stop", "'stop' must be a string or an array of up to 4 strings");
    }
    for (const auto& x : r.stop) {
      if (x.empty()) return bad("stop", "stop sequences must not be empty");
      if (x.size() > kMaxStopBytes)
        return bad("stop", "stop sequences must be at most " + std::to_string(kMaxStopBytes) + " bytes");
    }
  }
  if (b.contains("logit_bias") && !b["logit_bias"].is_null()) {
    const json& lb = b["logit_bias"];
    if (!lb.is_object()) return bad("logit_bias", "'logit_bias' must be an object of token id -> bias");
    for (const auto& [k, x] : lb.items()) {
      char* end = nullptr;
      const long id = std::strtol(k.c_str(), &end, 10);
      if (k.empty() || *end || id < 0 || id >= n_vocab)
        return bad("logit_bias", "logit_bias key '" + k + "' is not a token id in [0, " + std::to_string(n_vocab) + ")");
      if (!x.is_number() || x.get<double>() < -100 || x.get<double>() > 100)
        return bad("logit_bias", "logit_bias values must be numbers in [-100, 100]");
      s.logit_bias[static_cast<int32_t>(id)] = x.get<float>();
    }
  }
  if (chat) {
    bool want = false;
    if (auto e = read_bool(b, "logprobs", &want)) return *e;
    v = 0;
    if (auto e = read_int(b, "top_logprobs", 0, 20, &v)) return *e;
    if (b.contains("top_logprobs") && !b["top_logprobs"].is_null() && !want)
      return bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.logprobs = want ? static_cast<int>(v) : -1;
  } else {
    v = -1;
    if (auto e = read_int(b, "logprobs", 0, 20, &v)) return *e;
    r.logprobs = static_cast<int>(v);
  }
  s.logprobs = r.logprobs;
  s.stop.clear();  // the server matches stop strings itself, per choice
  const nlohmann::ordered_json ob = ordered ? *ordered : nlohmann::ordered_json::parse(b.dump());
  if (auto e = read_structured(b, ob, chat, &r)) return *e;
  return r;
}

}  // namespace cachet::server
