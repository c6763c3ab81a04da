#include "chat/tool_format.h"

#include <set>

#include "chat/python_literal.h"

namespace cachet {

using json = nlohmann::ordered_json;  // schemas keep their property order

json json_schema_format(const json& schema) {
  return {{"type", "json_schema"}, {"json_schema", schema}, {"max_whitespace_cnt", kMaxJsonWhitespace}};
}

const char* tool_syntax_name(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::kHermes: return "hermes";
    case ToolSyntax::kQwenXml: return "qwen-xml";
    case ToolSyntax::kLlama3: return "llama3";
    case ToolSyntax::kMistral: return "mistral";
    case ToolSyntax::kMistralArgs: return "mistral-args";
    case ToolSyntax::kDeepSeek: return "deepseek";
    case ToolSyntax::kDeepSeekV31: return "deepseek-v3.1";
    case ToolSyntax::kGlm: return "glm";
    case ToolSyntax::kKimi: return "kimi";
    case ToolSyntax::kNemotron: return "nemotron";
    case ToolSyntax::kHarmony: return "harmony";
    case ToolSyntax::kGemma4: return "gemma4";
    case ToolSyntax::kPythonic: return "pythonic";
    case ToolSyntax::kDsml: return "dsml";
    case ToolSyntax::kDsmlV4: return "dsml-v4";
    case ToolSyntax::kGeneric: return "generic";
  }
  return "generic";
}

namespace {
bool has(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

const char* kDsCallsBegin = "<｜tool▁calls▁begin｜>";
const char* kDsCallBegin = "<｜tool▁call▁begin｜>";
const char* kDsSep = "<｜tool▁sep｜>";
const char* kDsCallEnd = "<｜tool▁call▁end｜>";
const char* kDsCallsEnd = "<｜tool▁calls▁end｜>";
const char* kHarmonyCall = "<|channel|>commentary to=functions.";
const char* kKimiSectionBegin = "<|tool_calls_section_begin|>";
const char* kKimiSectionEnd = "<|tool_calls_section_end|>";
const char* kPyCallsBegin = "<|tool_call_start|>[";
// DeepSeek V3.2 / V4's markup: its templates build each tag from the token ｜DSML｜.
std::string dsml_block(ToolSyntax s) {
  return s == ToolSyntax::kDsml ? "<｜DSML｜function_calls>" : "<｜DSML｜tool_calls>";
}
std::string dsml_block_end(ToolSyntax s) {
  return s == ToolSyntax::kDsml ? "</｜DSML｜function_calls>" : "</｜DSML｜tool_calls>";
}
const char* kPyCallsEnd = "]<|tool_call_end|>";
}  // namespace

ChatFormat detect_chat_format(const std::string& t) {
  ChatFormat f;
  f.template_renders_tools = has(t, "tools");
  if (has(t, "<|channel|>") && has(t, "<|message|>")) {  // harmony (gpt-oss): its own messages, always
    f.tools = ToolSyntax::kHarmony;
    f.think_start = "<|channel|>analysis<|message|>";
    f.think_end = "<|end|>";
    f.after_think = "<|start|>assistant";
    f.framing = {"<|start|>assistant", "<|channel|>final<|message|>", "<|channel|>commentary<|message|>", "<|end|>",
                 "<|return|>"};
    f.always_reasons = true;
    return f;
  }
  if (has(t, "<|tool_call>") && has(t, "<tool_call|>")) {  // Gemma 4: its own call syntax and thought channel
    f.tools = ToolSyntax::kGemma4;
    f.think_start = "<|channel>thought\n";
    f.think_end = "<channel|>";
    f.results_in_calling_turn =
        has(t, "tool_responses") && !has(t, "['role'] != 'tool'") && !has(t, "['role'] == 'tool'");
    return f;
  }
  // LFM2 lists the tools between <|tool_list_start|> and <|tool_list_end|>, LFM2.5 after a bare "List of tools: [".
  if (has(t, "<|tool_list_start|>") || has(t, "List of tools: [")) f.tools = ToolSyntax::kPythonic;
  // DeepSeek V3.2 names its block function_calls, V4 tool_calls (both templates build tags from dsml_token).
  else if (has(t, "dsml_token") && has(t, "DSML"))
    f.tools = has(t, "function_calls>") ? ToolSyntax::kDsml : ToolSyntax::kDsmlV4;
  else if (has(t, "<function=") && has(t, "<parameter=")) f.tools = ToolSyntax::kQwenXml;
  else if (has(t, "<tool_call>") && has(t, "<arg_key>")) f.tools = ToolSyntax::kGlm;
  else if (has(t, "<tool_call>")) f.tools = ToolSyntax::kHermes;
  else if (has(t, kKimiSectionBegin)) f.tools = ToolSyntax::kKimi;
  else if (has(t, "<TOOLCALL>")) f.tools = ToolSyntax::kNemotron;
  // DeepSeek V3 / R1 write "function", the name and a fenced JSON block; V3.1 the name and the bare JSON.
  else if (has(t, "tool▁calls▁begin") || has(t, "tool_calls_begin"))
    f.tools = has(t, "```json") ? ToolSyntax::kDeepSeek : ToolSyntax::kDeepSeekV31;
  else if (has(t, "[TOOL_CALLS]") && has(t, "[ARGS]")) f.tools = ToolSyntax::kMistralArgs;
  else if (has(t, "[TOOL_CALLS]")) f.tools = ToolSyntax::kMistral;
  else if (has(t, "<|python_tag|>") || (has(t, "<|start_header_id|>") && f.template_renders_tools)) f.tools = ToolSyntax::kLlama3;
  else f.tools = ToolSyntax::kGeneric;
  if (f.tools == ToolSyntax::kGeneric) f.template_renders_tools = false;
  f.call_ids = f.tools == ToolSyntax::kMistralArgs && has(t, "[CALL_ID]");
  f.calls_in_content = f.tools == ToolSyntax::kPythonic && !has(t, "tool_calls");
  // Mistral's calls follow each other directly; GLM-4.5 / 4.6 put a newline before each, GLM-4.7 nothing.
  if (f.tools == ToolSyntax::kMistralArgs || (f.tools == ToolSyntax::kGlm && !has(t, "'\\n<tool_call>'")))
    f.call_separator.clear();
  if (has(t, "<think>")) {
    f.think_start = "<think>";
    f.think_end = "</think>";
  } else if (has(t, "[THINK]") && has(t, "[/THINK]")) {  // Magistral, Ministral 3 Reasoning
    f.think_start = "[THINK]";
    f.think_end = "[/THINK]";
  }
  return f;
}

json results_into_calling_turn(const json& messages) {
  json out = json::array();
  for (size_t i = 0; i < messages.size();) {
    const json& m = messages[i];
    const bool calls = m.value("role", "") == "assistant" && m.contains("tool_calls") && m["tool_calls"].is_array() &&
                       !m["tool_calls"].empty();
    if (!calls) {
      out.push_back(m);
      ++i;
      continue;
    }
    json turn = m;
    turn.erase("content");
    json responses = json::array();
    for (++i; i < messages.size() && messages[i].value("role", "") == "tool"; ++i) {
      const json& r = messages[i];
      json response = r.contains("content") ? r["content"] : json();
      if (response.is_string()) {
        json parsed = json::parse(response.get<std::string>(), nullptr, false);
        if (!parsed.is_discarded()) response = std::move(parsed);
      }
      const size_t k = responses.size();
      std::string name;
      if (k < m["tool_calls"].size() && m["tool_calls"][k].contains("function"))
        name = m["tool_calls"][k]["function"].value("name", "");
      if (name.empty()) name = r.value("tool_call_id", "");
      responses.push_back({{"name", name}, {"response", response}});
    }
    if (!responses.empty()) turn["tool_responses"] = responses;
    if (i < messages.size() && messages[i].value("role", "") == "assistant" && !messages[i].contains("tool_calls")) {
      const json& next = messages[i];
      const bool text = next.contains("content") && ((next["content"].is_string() && !next["content"].get<std::string>().empty()) ||
                                                     (next["content"].is_array() && !next["content"].empty()));
      if (text) {
        turn["content"] = next["content"];
        ++i;
      }
    }
    out.push_back(std::move(turn));
  }
  return out;
}

json calls_into_content(const json& messages, const ChatFormat& format) {
  json out = json::array();
  for (const json& m : messages) {
    if (m.value("role", "") != "assistant" || !m.contains("tool_calls") || !m["tool_calls"].is_array() ||
        m["tool_calls"].empty() || format.tools != ToolSyntax::kPythonic) {
      out.push_back(m);
      continue;
    }
    std::string calls;
    for (const json& c : m["tool_calls"]) {
      const json& f = c.contains("function") ? c["function"] : c;
      json args = f.contains("arguments") ? f["arguments"] : json::object();
      if (args.is_string()) args = json::parse(args.get<std::string>(), nullptr, false);
      calls += (calls.empty() ? "" : ", ") + python_call_text(f.value("name", ""), args);
    }
    json turn = m;
    turn.erase("tool_calls");
    const std::string text = m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : "";
    turn["content"] = text + kPyCallsBegin + calls + kPyCallsEnd;
    out.push_back(std::move(turn));
  }
  return out;
}

CallMarkers call_markers(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::kPythonic: return {{"<|tool_call_start|>"}, "<|tool_call_end|>"};
    case ToolSyntax::kDsml:
    case ToolSyntax::kDsmlV4: return {{dsml_block(s)}, dsml_block_end(s)};
    case ToolSyntax::kHermes:
    case ToolSyntax::kQwenXml:
    case ToolSyntax::kGeneric: return {{"<tool_call>"}, "</tool_call>"};
    case ToolSyntax::kLlama3: return {{"<|python_tag|>", "{\"name\""}, ""};
    case ToolSyntax::kMistral:
    case ToolSyntax::kMistralArgs: return {{"[TOOL_CALLS]"}, ""};
    case ToolSyntax::kDeepSeek:
    case ToolSyntax::kDeepSeekV31: return {{kDsCallsBegin}, kDsCallsEnd};
    case ToolSyntax::kGlm: return {{"<tool_call>"}, "</tool_call>"};
    case ToolSyntax::kKimi: return {{kKimiSectionBegin}, kKimiSectionEnd};
    case ToolSyntax::kNemotron: return {{"<TOOLCALL>"}, "</TOOLCALL>"};
    // The recipient may also come first: <|start|>assistant to=functions.f<|channel|>commentary json<|message|>.
    case ToolSyntax::kHarmony: return {{kHarmonyCall, " to=functions."}, "<|call|>"};
    case ToolSyntax::kGemma4: return {{"<|tool_call>"}, "<tool_call|>"};
  }
  return {{"<tool_call>"}, "</tool_call>"};
}

std::optional<CallSection> call_section(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::kDeepSeek: return CallSection{kDsCallsBegin, kDsCallsEnd, kDsCallBegin, kDsSep, kDsCallEnd, "\n"};
    case ToolSyntax::kDeepSeekV31: return CallSection{kDsCallsBegin, kDsCallsEnd, kDsCallBegin, kDsSep, kDsCallEnd, ""};
    case ToolSyntax::kKimi:
      return CallSection{kKimiSectionBegin, kKimiSectionEnd, "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                         "<|tool_call_end|>", ""};
    case ToolSyntax::kNemotron:  // a JSON array of calls (parsed as JSON; no per-call markers)
      return CallSection{"<TOOLCALL>[", "]</TOOLCALL>", "", "", "", ", "};
    case ToolSyntax::kPythonic:  // a Python list of calls (parsed as Python; no per-call markers)
      return CallSection{kPyCallsBegin, kPyCallsEnd, "", "", "", ", "};
    case ToolSyntax::kDsml:  // invoke elements in the block (parsed as such; no per-call markers here)
    case ToolSyntax::kDsmlV4: return CallSection{dsml_block(s) + "\n", dsml_block_end(s), "", "", "", ""};
    default: return std::nullopt;
  }
}

namespace {

json schema_of(const ToolSpec& t) {
  return t.parameters.is_object() && !t.parameters.empty() ? t.parameters : json{{"type", "object"}};
}

// A string of lo..hi characters (hi < 0: unbounded) whose first and last characters are not whitespace.
std::string trimmed_string_pattern(int64_t lo, int64_t hi) {
  if (hi == 1) return lo == 0 ? "^(\\S)?$" : "^\\S$";
  const std::string mid_hi = hi < 0 ? "" : std::to_string(hi - 2);
  if (lo >= 2) return "^\\S[\\s\\S]{" + std::to_string(lo - 2) + "," + mid_hi + "}\\S$";
  const std::string two_up = "\\S([\\s\\S]{0," + mid_hi + "}\\S)?";
  return lo == 0 ? "^(" + two_up + ")?$" : "^" + two_up + "$";
}

// The XML styles (XGrammar's qwen_xml, glm_xml) allow whitespace around a parameter's value and count a length
// bound on the text between the tags, whitespace and all, so a value of 40 characters could come back as 44. The
// parser reads a bounded string trimmed; here each bounded string parameter becomes a pattern of its min..max
// characters that starts and ends with a non-space, so the bound counts exactly what the call returns.
void trim_bounded_string(json& p) {
  if (!p.is_object()) return;
  for (const char* k : {"anyOf", "oneOf"})
    if (p.contains(k) && p[k].is_array())
      for (json& branch : p[k]) trim_bounded_string(branch);
  const bool bounded = p.contains("minLength") || p.contains("maxLength");
  if (!bounded || p.value("type", json()) != "string" || p.contains("pattern") || p.contains("format") ||
      p.contains("enum") || p.contains("const"))
    return;
  const int64_t lo = p.value("minLength", int64_t{0}), hi = p.value("maxLength", int64_t{-1});
  if (hi == 0 || (hi > 0 && lo > hi)) return;  // only whitespace, read as ""; or nothing fits anyway
  p["pattern"] = trimmed_string_pattern(lo, hi);
  p.erase("minLength");
  p.erase("maxLength");
}

json xml_bounded_strings(json schema) {
  if (schema.contains("properties") && schema["properties"].is_object())
    for (auto& [name, p] : schema["properties"].items()) trim_bounded_string(p);
  return schema;
}

// name(k=v, ...): the required arguments first, in the schema's order, then each optional one or not (with no
// required one, any optional one may come first). A value is its property's JSON (JSON's strings, numbers, arrays
// and objects are Python literals; true / false / null LFM2 reads as well); a free string may also be
// single-quoted and a boolean True / False, as LFM2.5's template writes them.
json python_call_tag(const ToolSpec& t) {
  const json schema = schema_of(t);
  json defs = json::object();
  for (const char* k : {"$defs", "definitions"})
    if (schema.contains(k)) defs[k] = schema[k];
  const json props = schema.contains("properties") && schema["properties"].is_object() ? schema["properties"]
                                                                                         : json::object();
  std::set<std::string> required;
  if (schema.contains("required") && schema["required"].is_array())
    for (const json& r : schema["required"]) required.insert(r.get<std::string>());
  auto arg = [&](const std::string& key, bool first) {
    json ps = props[key];
    if (ps.is_object())
      for (auto& [k, v] : defs.items()) ps[k] = v;  // local references resolve inside the property's schema
    json alts = json::array({json_schema_format(ps)});
    const json type = ps.is_object() ? ps.value("type", json()) : json();
    const bool free_string = type == "string" && !ps.contains("enum") && !ps.contains("const") &&
                             !ps.contains("pattern") && !ps.contains("format") && !ps.contains("minLength") &&
                             !ps.contains("maxLength");
    if (free_string) alts.push_back({{"type", "regex"}, {"pattern", R"('([^'\\\n]|\\[^\n])*')"}});
    if (type == "boolean")
      for (const char* b : {"True", "False"}) alts.push_back({{"type", "const_string"}, {"value", b}});
    const json value = alts.size() == 1 ? alts[0] : json{{"type", "or"}, {"elements", alts}};
    return json{{"type", "sequence"}, {"elements", json::array({
        json{{"type", "const_string"}, {"value", (first ? "" : ", ") + key + "="}}, value})}};
  };
  std::vector<std::string> req, opt;
  for (auto& [k, v] : props.items()) (required.count(k) ? req : opt).push_back(k);
  json elems = json::array();
  for (size_t i = 0; i < req.size(); ++i) elems.push_back(arg(req[i], i == 0));
  if (!req.empty()) {
    for (const std::string& k : opt) elems.push_back({{"type", "optional"}, {"content", arg(k, false)}});
  } else if (!opt.empty()) {
    json firsts = json::array();
    for (size_t i = 0; i < opt.size(); ++i) {
      json seq = json::array({arg(opt[i], true)});
      for (size_t j = i + 1; j < opt.size(); ++j) seq.push_back({{"type", "optional"}, {"content", arg(opt[j], false)}});
      firsts.push_back({{"type", "sequence"}, {"elements", seq}});
    }
    elems.push_back({{"type", "optional"}, {"content", {{"type", "or"}, {"elements", firsts}}}});
  }
  const json content = elems.empty() ? json{{"type", "const_string"}, {"value", ""}}
                                     : json{{"type", "sequence"}, {"elements", elems}};
  return {{"type", "tag"}, {"begin", t.name + "("}, {"content", content}, {"end", ")"}};
}

// One call's tag in the family's text (begin, arguments, end).
json call_tag(const ChatFormat& f, const ToolSpec& t) {
  const bool xml = f.tools == ToolSyntax::kQwenXml || f.tools == ToolSyntax::kGlm;
  json args = json_schema_format(xml ? xml_bounded_strings(schema_of(t)) : schema_of(t));
  switch (f.tools) {
    case ToolSyntax::kMistralArgs:
      if (f.call_ids)
        return {{"type", "tag"}, {"begin", "[TOOL_CALLS]" + t.name + "[CALL_ID]"},
                {"content", {{"type", "sequence"}, {"elements", json::array({
                    json{{"type", "regex"}, {"pattern", "[a-zA-Z0-9]{9}"}},
                    json{{"type", "const_string"}, {"value", "[ARGS]"}}, args})}}},
                {"end", ""}};
      return {{"type", "tag"}, {"begin", "[TOOL_CALLS]" + t.name + "[ARGS]"}, {"content", args}, {"end", ""}};
    case ToolSyntax::kQwenXml:
      args["style"] = "qwen_xml";
      return {{"type", "tag"}, {"begin", "<tool_call>\n<function=" + t.name + ">\n"}, {"content", args},
              {"end", "\n</function>\n</tool_call>"}};
    case ToolSyntax::kLlama3:
      return {{"type", "tag"}, {"begin", "{\"name\": \"" + t.name + "\", \"parameters\": "}, {"content", args},
              {"end", "}"}};
    case ToolSyntax::kMistral:
      return {{"type", "tag"}, {"begin", "[TOOL_CALLS][{\"name\": \"" + t.name + "\", \"arguments\": "},
              {"content", args}, {"end", "}]"}};
    // The section families: one call, without its section (structural_tag_for wraps the calls in it).
    case ToolSyntax::kDeepSeek:
      return {{"type", "tag"}, {"begin", std::string(kDsCallBegin) + "function" + kDsSep + t.name + "\n```json\n"},
              {"content", args}, {"end", std::string("\n```") + kDsCallEnd}};
    case ToolSyntax::kDeepSeekV31:
      return {{"type", "tag"}, {"begin", std::string(kDsCallBegin) + t.name + kDsSep}, {"content", args},
              {"end", kDsCallEnd}};
    case ToolSyntax::kKimi:  // the model numbers its calls: functions.NAME:N
      return {{"type", "tag"}, {"begin", "<|tool_call_begin|>functions." + t.name + ":"},
              {"content", {{"type", "sequence"}, {"elements", json::array({
                  json{{"type", "regex"}, {"pattern", "[0-9]{1,4}"}},
                  json{{"type", "const_string"}, {"value", "<|tool_call_argument_begin|>"}}, args})}}},
              {"end", "<|tool_call_end|>"}};
    case ToolSyntax::kNemotron:
      return {{"type", "tag"}, {"begin", "{\"name\": \"" + t.name + "\", \"arguments\": "}, {"content", args},
              {"end", "}"}};
    case ToolSyntax::kGlm:  // XGrammar's glm_xml: <arg_key>k</arg_key><arg_value>v</arg_value>, strings bare
      args["style"] = "glm_xml";
      return {{"type", "tag"}, {"begin", "<tool_call>" + t.name}, {"content", args}, {"end", "</tool_call>"}};
    case ToolSyntax::kHarmony:  // the call's end is <|call|>, an end of generation the grammar's end admits
      return {{"type", "tag"}, {"begin", std::string(kHarmonyCall) + t.name + " <|constrain|>json<|message|>"},
              {"content", args}, {"end", ""}};
    case ToolSyntax::kGemma4:  // XGrammar's "gemma" style: {key:<|"|>text<|"|>,n:5} at every level
      args["style"] = "gemma";
      return {{"type", "tag"}, {"begin", "<|tool_call>call:" + t.name}, {"content", args}, {"end", "<tool_call|>"}};
    case ToolSyntax::kPythonic: return python_call_tag(t);
    case ToolSyntax::kDsml:  // XGrammar's deepseek_xml: <｜DSML｜parameter name="k" string="true|false">v</...>
    case ToolSyntax::kDsmlV4:
      args["style"] = "deepseek_xml";
      return {{"type", "tag"}, {"begin", "<｜DSML｜invoke name=\"" + t.name + "\">\n"}, {"content", args},
              {"end", "</｜DSML｜invoke>\n"}};
    case ToolSyntax::kHermes:
    case ToolSyntax::kGeneric:
      break;
  }
  return {{"type", "tag"}, {"begin", "<tool_call>\n{\"name\": \"" + t.name + "\", \"arguments\": "},
          {"content", args}, {"end", "}\n</tool_call>"}};
}

// The text every call of the family starts with (the trigger of auto mode).
std::string trigger(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::kLlama3: return "{\"name\": \"";
    case ToolSyntax::kMistral:
    case ToolSyntax::kMistralArgs: return "[TOOL_CALLS]";
    case ToolSyntax::kDeepSeek:
    case ToolSyntax::kDeepSeekV31: return kDsCallsBegin;
    case ToolSyntax::kKimi: return kKimiSectionBegin;
    case ToolSyntax::kNemotron: return "<TOOLCALL>";
    case ToolSyntax::kHarmony: return kHarmonyCall;
    case ToolSyntax::kGemma4: return "<|tool_call>";
    case ToolSyntax::kPythonic: return "<|tool_call_start|>";
    case ToolSyntax::kDsml:
    case ToolSyntax::kDsmlV4: return dsml_block(s);
    default: return "<tool_call>";
  }
}

}  // namespace

std::optional<std::string> structural_tag_for(const OutputShape& sh) {
  json main;
  const bool calls = !sh.tools.empty() && sh.choice != ToolChoice::kNone;
  // Harmony ends a turn at a call (<|call|>): one call per turn, whatever parallel_tool_calls says.
  const bool one_call = !sh.parallel || sh.format.tools == ToolSyntax::kHarmony;
  if (calls) {
    json tags = json::array();
    for (const ToolSpec& t : sh.tools)
      if (sh.choice != ToolChoice::kNamed || t.name == sh.named) tags.push_back(call_tag(sh.format, t));
    const std::optional<CallSection> section = call_section(sh.format.tools);
    if (section) {
      // The calls, one after another as the template writes them, inside the family's one section.
      const bool first_only = one_call || sh.choice == ToolChoice::kNamed;
      json inner = {{"type", "tags_with_separator"}, {"tags", tags}, {"separator", section->between},
                    {"at_least_one", true}, {"stop_after_first", first_only}};
      json whole = {{"type", "tag"}, {"begin", section->begin}, {"content", inner}, {"end", section->end}};
      if (sh.choice == ToolChoice::kAuto)
        main = {{"type", "triggered_tags"}, {"triggers", {section->begin}}, {"tags", json::array({whole})},
                {"at_least_one", false}, {"stop_after_first", true}};
      else
        main = whole;
    } else if (sh.choice == ToolChoice::kAuto) {
      main = {{"type", "triggered_tags"}, {"triggers", {trigger(sh.format.tools)}}, {"tags", tags},
              {"at_least_one", false}, {"stop_after_first", one_call}};
    } else {
      main = {{"type", "tags_with_separator"}, {"tags", tags}, {"separator", sh.format.call_separator},
              {"at_least_one", true},
              {"stop_after_first", one_call || sh.choice == ToolChoice::kNamed}};
    }
  } else if (!sh.answer.is_null()) {
    main = sh.answer;
  } else if (!sh.tools.empty()) {
    // tool_choice none with tools the prompt lists: free text that never starts a call.
    main = {{"type", "any_text"}, {"excludes", {trigger(sh.format.tools)}}};
  }
  const bool budget = sh.reasoning && sh.thinking_budget > 0;
  if (main.is_null() && !budget) return std::nullopt;
  if (main.is_null()) main = {{"type", "any_text"}};
  json format = main;
  if (sh.reasoning) {
    json thought = {{"type", "any_text"}};
    if (budget) thought["max_tokens"] = sh.thinking_budget;
    // Calls come after the reasoning, where the grammar shapes them; one started inside it would be free text.
    if (!sh.tools.empty()) thought["excludes"] = {trigger(sh.format.tools)};
    json think = {{"type", "tag"}, {"begin", sh.inside_thinking ? "" : sh.format.think_start}, {"content", thought},
                  {"end", sh.format.think_end + sh.format.after_think}};
    if (!sh.inside_thinking) think = {{"type", "optional"}, {"content", think}};
    format = {{"type", "sequence"}, {"elements", json::array({think, main})}};
  }
  return json{{"type", "structural_tag"}, {"format", format}}.dump();
}

std::string generic_tools_prompt(const std::vector<ToolSpec>& tools) {
  std::string s =
      "You may call one or more functions to assist with the user query. The functions you can call, as JSON "
      "schemas:\n<tools>\n";
  for (const ToolSpec& t : tools)
    s += json{{"type", "function"}, {"function", {{"name", t.name}, {"parameters", schema_of(t)}}}}.dump() + "\n";
  s += "</tools>\nTo call a function, answer with a JSON object holding its name and arguments inside "
       "<tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
       "</tool_call>";
  return s;
}

}  // namespace cachet
