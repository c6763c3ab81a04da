// The model's text split, as it streams, into reasoning, answer and tool calls (docs/tools.md). Markers are
// recognized whole even when they arrive across pieces (a possible marker's prefix is held back, never shown
// as content); a call made inside the reasoning is a call, not lost in it. Streamed deltas concatenate to
// exactly what the whole text gives: the non-streamed response is built from the same deltas.
#pragma once

#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_format.h"

namespace cachet {

struct ToolCallDelta {
  int index = 0;
  std::string id, name;   // set on a call's first delta only
  std::string arguments;  // the next fragment of the arguments' JSON text
};

struct OutputDelta {
  std::string reasoning, content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
  void append(OutputDelta d);
};

class ChatOutputParser {
 public:
  // reasoning: split <think> blocks out (else they stay in the content); open_reasoning: the prompt already
  // opened one. tools: the functions offered (empty: no call parsing); id_prefix names calls id_prefix0, 1, ...
  ChatOutputParser(ChatFormat format, bool reasoning, bool open_reasoning, std::vector<ToolSpec> tools,
                   std::string id_prefix);
  OutputDelta push(std::string_view text);
  // The end of the text: what was held back, and an unfinished call as far as it went. cut: the text was cut
  // short (max_tokens), so a held-back start of a marker is markup being written and is dropped; otherwise it
  // was text.
  OutputDelta finish(bool cut = false);
  int n_calls() const { return n_calls_; }

 private:
  enum class Mode { kContent, kReasoning, kCall };
  struct Marker {
    std::string text;
    int kind;  // 0 think start, 1 think end, 2 call open, 3 framing (dropped)
  };
  std::vector<Marker> active_markers() const;
  // Scans the current call's body; emits what is new; true when the call is complete (rest_ gets what follows).
  bool scan_call(OutputDelta* out, bool at_end);
  bool scan_json_calls(OutputDelta* out, bool at_end);
  bool scan_xml_call(OutputDelta* out, bool at_end);
  bool scan_section_calls(OutputDelta* out, bool at_end);
  bool scan_glm_call(OutputDelta* out, bool at_end);
  bool scan_mistral_args_call(OutputDelta* out, bool at_end);
  bool scan_harmony_call(OutputDelta* out, bool at_end);
  bool scan_gemma4_call(OutputDelta* out, bool at_end);
  bool scan_python_calls(OutputDelta* out, bool at_end);  // output_parser_pythonic.cc
  bool scan_dsml_calls(OutputDelta* out, bool at_end);    // output_parser_dsml.cc
  // The region so far could still be a call of the family's syntax (else it ends at the first close marker).
  bool body_looks_like_call() const;
  void emit_text(const std::string& s, OutputDelta* out);
  // A call's name is known: its first delta (id: the model's own, when its syntax numbers calls; else ours).
  void start_call(const std::string& name, OutputDelta* out, const std::string& id = "");
  void emit_args(const std::string& s, OutputDelta* out);
  // The current call is complete: what comes next belongs to the next call.
  void end_call();
  // The region's one call is complete once `close` (the rest of its arguments' text, maybe empty) goes out: the
  // region is consumed.
  bool end_region_call(const std::string& close, OutputDelta* out);
  // Calls whose arguments go out a parameter at a time (xml_params_emitted_): the current one is complete.
  void end_param_call(OutputDelta* out);
  // The region ends: a call still open (cut by max_tokens) goes out with the parameters it closed; consumed.
  bool end_param_region(OutputDelta* out);

  ChatFormat format_;
  bool reasoning_;
  std::vector<ToolSpec> tools_;
  std::string id_prefix_;
  CallMarkers markers_;
  std::optional<CallSection> section_;
  std::vector<std::string> ids_;  // the ids given so far (a model's own id is used once)
  Mode mode_ = Mode::kContent, return_mode_ = Mode::kContent;
  std::string buf_;       // text not yet placed
  bool content_started_ = false;  // non-whitespace content seen (a llama3 call opens only a message)
  std::string pending_ws_;        // content whitespace not yet shown (shown when more text follows)
  // The current call region (after its open marker) and the progress through it.
  std::string body_;
  std::string open_marker_;
  int n_calls_ = 0;
  bool call_started_ = false;   // the current call's first delta went out
  size_t args_emitted_ = 0;     // bytes of the current call's arguments emitted
  size_t calls_done_in_body_ = 0;  // calls finished inside this body (mistral arrays, deepseek lists)
  size_t xml_params_emitted_ = 0;
  size_t call_end_ = std::string::npos;  // where the region's call ended by its own syntax (npos: not yet)
};

}  // namespace cachet
