// How a model family writes tool calls and reasoning (docs/tools.md), detected from its chat template, and the
// structural tag that constrains its output: tool calls always name a function the request offered and carry
// arguments valid against its schema; a thinking budget ends reasoning after N tokens.
//
//   hermes    <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>       Hermes, Qwen2.5, Qwen3, QwQ
//   qwen-xml  <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>
//                                                                                Qwen3-Coder, Qwen3.5 / 3.6
//   llama3    {"name": "f", "parameters": {...}}  (or after <|python_tag|>)      Llama 3.1 / 3.2 / 3.3
//   mistral   [TOOL_CALLS][{"name": "f", "arguments": {...}}]                    Mistral Nemo, Mixtral
//   mistral-args  [TOOL_CALLS]f[ARGS]{...} (Mistral Small 3.2: f[CALL_ID]abcdefgh1[ARGS]{...}), one per call
//             Devstral, Magistral, Ministral 3, Mistral Small 3.2 (reasoning: [THINK]...[/THINK])
//             (mistral templates take only 9-character alphanumeric call ids: both families' ids are such)
//   deepseek  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```<｜tool▁call▁end｜>...
//                                                                                DeepSeek V3 / R1
//   deepseek-v3.1  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   glm       <tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>   GLM-4.5 / 4.6 / 4.7
//             (4.7 without the newlines; a string value as written, any other as JSON)
//   kimi      <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{...}
//             <|tool_call_end|>...<|tool_calls_section_end|>                      Kimi K2 (the call's id is the
//             model's own "functions.f:N", which the template renders tool results by)
//   nemotron  <TOOLCALL>[{"name": "f", "arguments": {...}}, ...]</TOOLCALL>          Nemotron Nano 2
//   harmony   <|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|>      gpt-oss
//             (reasoning: <|channel|>analysis<|message|>...<|end|>; the answer: <|start|>assistant<|channel|>final
//             <|message|>...; the framing never reaches the content)
//   gemma4    <|tool_call>call:f{key:<|"|>text<|"|>,n:5,o:{...}}<tool_call|>                 Gemma 4
//             (unquoted keys, strings between <|"|>; reasoning: <|channel>thought\n...<channel|>)
//   pythonic  <|tool_call_start|>[f(city="Paris", days=3), g()]<|tool_call_end|>                   LFM2, LFM2.5
//             (Python literals, or JSON's true / false / null; templates that render no past calls get them
//             written into the assistant's content in this form)
//   dsml      <｜DSML｜function_calls>\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="k" string="true">v
//             </｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>              DeepSeek V3.2
//             (string="false": the value is JSON); dsml-v4 the same in a <｜DSML｜tool_calls> block (DeepSeek V4)
//   generic   a template that knows no tools: the tools are described in a system message and calls are
//             asked for (and constrained) in the hermes form.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cachet/status.h"
#include "grammar/grammar.h"

namespace cachet {

// A structural tag's json_schema format for a (checked) schema.
nlohmann::ordered_json json_schema_format(const nlohmann::ordered_json& schema);

enum class ToolSyntax {
  kHermes, kQwenXml, kLlama3, kMistral, kMistralArgs, kDeepSeek, kDeepSeekV31, kGlm, kKimi, kNemotron, kHarmony, kGemma4, kPythonic,
  kDsml, kDsmlV4, kGeneric
};

const char* tool_syntax_name(ToolSyntax s);

struct ChatFormat {
  ToolSyntax tools = ToolSyntax::kGeneric;
  bool template_renders_tools = false;  // the template reads `tools` (else the generic system message)
  std::string think_start, think_end;   // reasoning markers ("<think>", "</think>"); empty: none
  std::string after_think;              // what the model writes between reasoning and the next message (harmony:
                                        // "<|start|>assistant"), part of the reasoning's end in a structural tag
  std::vector<std::string> framing;     // message framing that is neither content nor reasoning (harmony's)
  std::string call_separator = "\n";    // what the template writes between two calls (outside a section)
  bool call_ids = false;                // the model writes each call's id (Mistral Small 3.2's [CALL_ID])
  bool always_reasons = false;          // the model writes its reasoning whatever is asked (harmony's analysis)
  bool calls_in_content = false;       // the template renders no past calls (LFM2's first templates): they go
                                       // into the assistant message's content, in the family's syntax
  bool results_in_calling_turn = false;  // the template reads tool results from the calling assistant message's
                                         // `tool_responses` (Gemma 4's first templates), not from role: tool ones
};

ChatFormat detect_chat_format(const std::string& template_source);

// Messages for a template that reads tool results from the calling turn: each assistant message with tool_calls
// takes the role: tool messages after it as `tool_responses` ({name: the call's function, response: the result,
// parsed as JSON when it is}) and the assistant text right after them as its content.
nlohmann::ordered_json results_into_calling_turn(const nlohmann::ordered_json& messages);

// Messages for a template that renders no past calls: each assistant message's tool_calls appended to its
// content as the model writes them (pythonic: <|tool_call_start|>[f(k=v)]<|tool_call_end|>).
nlohmann::ordered_json calls_into_content(const nlohmann::ordered_json& messages, const ChatFormat& format);

// The markers that open and close one call in the model's text (open: where the parser switches to a call).
struct CallMarkers {
  std::vector<std::string> open;  // any of these starts a call
  std::string close;              // ends it ("" : the call runs to the end of the text)
};
CallMarkers call_markers(ToolSyntax s);

// Families whose calls sit in one section (begin ... end), each call framed as call_begin HEAD sep ARGS call_end
// (deepseek's HEAD is "function" and its ARGS "NAME\n```json\n{...}\n```"; deepseek-v3.1's HEAD is the name,
// kimi's "functions.NAME:N"; nemotron's section is a JSON array whose calls the parser reads as JSON, so only its
// begin, end and between are used). nullopt for the others.
struct CallSection {
  std::string begin, end, call_begin, sep, call_end;
  std::string between;  // what the template writes between two calls
};
std::optional<CallSection> call_section(ToolSyntax s);

// A function the request offers: its name and parameters schema (already checked by check_json_schema).
struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters = nlohmann::ordered_json::object();
};

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

// What the output must look like, as XGrammar's structural tag (grammar/grammar.h):
//  - reasoning first when the model reasons: `inside_thinking` (the prompt already opened it) or optional;
//    `thinking_budget` > 0 ends it after that many tokens (the end marker is then the only way on);
//  - then, by `choice`: required/named -> one or more calls (parallel: separated by newlines), auto -> free
//    text where each call, once its marker starts, is constrained, none -> text that never starts a call; or
//    `answer` (a response_format's format object: json_schema or grammar), or free text.
struct OutputShape {
  ChatFormat format;
  bool reasoning = false;        // the model may reason (markers exist and thinking is on)
  bool inside_thinking = false;  // the generation prompt ends inside the reasoning block
  int thinking_budget = 0;       // 0: unlimited
  std::vector<ToolSpec> tools;
  ToolChoice choice = ToolChoice::kAuto;
  std::string named;             // kNamed
  bool parallel = true;
  nlohmann::ordered_json answer;  // null, or a structural-tag format object for the answer
};
// The structural tag JSON, or nullopt when nothing constrains the output.
std::optional<std::string> structural_tag_for(const OutputShape& shape);

// The generic form's system message describing the tools (for templates that do not render them).
std::string generic_tools_prompt(const std::vector<ToolSpec>& tools);

}  // namespace cachet
