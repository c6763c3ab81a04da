#include "chat/output_parser.h"

#include <algorithm>
#include <optional>

namespace cachet {

using json = nlohmann::ordered_json;

void OutputDelta::append(OutputDelta d) {
  reasoning += d.reasoning;
  content += d.content;
  for (ToolCallDelta& c : d.calls) calls.push_back(std::move(c));
}

namespace {

constexpr size_t npos = std::string::npos;

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_ws(const std::string& s, size_t i) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// The end (exclusive) of the JSON value starting at i, or npos when the text stops first (or is not JSON:
// then the caller waits for the end of the call). A primitive at the very end is unfinished unless at_end.
size_t json_value_end(const std::string& s, size_t i, bool at_end) {
  if (i >= s.size()) return npos;
  const char c = s[i];
  if (c == '"') {
    for (size_t j = i + 1; j < s.size(); ++j) {
      if (s[j] == '\\') ++j;
      else if (s[j] == '"') return j + 1;
    }
    return npos;
  }
  if (c == '{' || c == '[') {
    int depth = 0;
    for (size_t j = i; j < s.size(); ++j) {
      const char x = s[j];
      if (x == '"') {
        const size_t e = json_value_end(s, j, at_end);
        if (e == npos) return npos;
        j = e - 1;
      } else if (x == '{' || x == '[') {
        ++depth;
      } else if (x == '}' || x == ']') {
        if (--depth == 0) return j + 1;
      }
    }
    return npos;
  }
  size_t j = i;
  while (j < s.size() && !is_ws(s[j]) && s[j] != ',' && s[j] != '}' && s[j] != ']') ++j;
  if (j == s.size() && !at_end) return npos;
  return j == i ? npos : j;
}

// A parameter's text as a JSON value, typed by the function's schema: strings (and enums of strings) as strings,
// the rest as the JSON they spell (a string when they spell none). strip_newlines: a free string loses one newline
// on each side (qwen-xml's layout); any other value may have whitespace around it, which is layout too.
std::string typed_value(const ToolSpec* spec, const std::string& key, std::string v, bool strip_newlines) {
  bool as_string = true, free_string = true;
  if (spec && spec->parameters.contains("properties") && spec->parameters["properties"].contains(key)) {
    const json& ps = spec->parameters["properties"][key];
    if (ps.is_object()) {
      const json t = ps.value("type", json());
      bool enum_strings = false;
      if (ps.contains("enum") && ps["enum"].is_array()) {
        enum_strings = true;
        for (const json& e : ps["enum"]) enum_strings = enum_strings && e.is_string();
      }
      if (ps.contains("const")) enum_strings = ps["const"].is_string();
      as_string = t == "string" || enum_strings;
      // A bounded string is read trimmed: the XML families' grammar bounds it without its surrounding whitespace.
      free_string = t == "string" && !ps.contains("enum") && !ps.contains("const") && !ps.contains("pattern") &&
                    !ps.contains("format") && !ps.contains("minLength") && !ps.contains("maxLength");
    }
  }
  if (free_string) {
    if (strip_newlines && !v.empty() && v.front() == '\n') v.erase(0, 1);
    if (strip_newlines && !v.empty() && v.back() == '\n') v.pop_back();
  } else {
    const size_t b0 = skip_ws(v, 0);
    size_t b1 = v.size();
    while (b1 > b0 && is_ws(v[b1 - 1])) --b1;
    v = v.substr(b0, b1 - b0);
  }
  if (!as_string) {
    try {
      return json::parse(v).dump();
    } catch (...) {
    }
  }
  return json(v).dump();
}

// Whether s from i on could still grow into `what` (it is a proper prefix of it).
bool could_become(const std::string& s, size_t i, const std::string& what) {
  return s.size() - i < what.size() && what.compare(0, s.size() - i, s, i) == 0;
}

}  // namespace

ChatOutputParser::ChatOutputParser(ChatFormat format, bool reasoning, bool open_reasoning,
                                   std::vector<ToolSpec> tools, std::string id_prefix)
    : format_(std::move(format)),
      reasoning_((reasoning || format_.always_reasons) && !format_.think_start.empty()),
      tools_(std::move(tools)),
      id_prefix_(std::move(id_prefix)),
      markers_(call_markers(format_.tools)),
      section_(call_section(format_.tools)) {
  if (reasoning_ && open_reasoning) mode_ = Mode::kReasoning;
}

std::vector<ChatOutputParser::Marker> ChatOutputParser::active_markers() const {
  std::vector<Marker> m;
  if (reasoning_ && mode_ == Mode::kContent) m.push_back({format_.think_start, 0});
  if (reasoning_ && mode_ == Mode::kReasoning) m.push_back({format_.think_end, 1});
  if (!tools_.empty())
    for (const std::string& o : markers_.open) {
      // A llama3 call is a whole message: its bare JSON opens a call only before any content.
      if (o[0] == '{' && (content_started_ || mode_ != Mode::kContent)) continue;
      m.push_back({o, 2});
    }
  if (mode_ == Mode::kContent)
    for (const std::string& f : format_.framing) m.push_back({f, 3});
  return m;
}

void ChatOutputParser::emit_text(const std::string& s, OutputDelta* out) {
  if (s.empty()) return;
  if (mode_ == Mode::kReasoning) {
    out->reasoning += s;
    return;
  }
  // The answer starts at its first non-space character, and whitespace goes out only when more text follows
  // it: what surrounds call markup and ends the text is the markup's layout, not the answer.
  std::string t = content_started_ ? pending_ws_ + s : s.substr(skip_ws(s, 0));
  size_t end = t.size();
  while (end > 0 && is_ws(t[end - 1])) --end;
  if (end == 0) {
    if (content_started_) pending_ws_ = std::move(t);
    return;
  }
  content_started_ = true;
  pending_ws_ = t.substr(end);
  out->content += t.substr(0, end);
}

void ChatOutputParser::start_call(const std::string& name, OutputDelta* out, const std::string& id) {
  ToolCallDelta d;
  d.index = n_calls_;
  if (!id.empty() && std::find(ids_.begin(), ids_.end(), id) == ids_.end()) {
    d.id = id;
  } else if (format_.tools == ToolSyntax::kMistral || format_.tools == ToolSyntax::kMistralArgs) {
    // Mistral's templates refuse any id but 9 letters and digits: one drawn from this response's prefix.
    static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (char c : id_prefix_ + std::to_string(n_calls_)) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    do {
      d.id.clear();
      for (int k = 0; k < 9; ++k, h /= 62) d.id += kAlnum[h % 62];
      h = h * 6364136223846793005ull + 1442695040888963407ull;
    } while (std::find(ids_.begin(), ids_.end(), d.id) != ids_.end());
  } else {
    d.id = id_prefix_ + std::to_string(n_calls_);
  }
  ids_.push_back(d.id);
  d.name = name;
  out->calls.push_back(std::move(d));
  call_started_ = true;
  args_emitted_ = 0;
  xml_params_emitted_ = 0;
}

void ChatOutputParser::emit_args(const std::string& s, OutputDelta* out) {
  if (s.empty()) return;
  if (!out->calls.empty() && out->calls.back().index == n_calls_) {
    out->calls.back().arguments += s;
  } else {
    ToolCallDelta d;
    d.index = n_calls_;
    d.arguments = s;
    out->calls.push_back(std::move(d));
  }
  args_emitted_ += s.size();
}

void ChatOutputParser::end_call() {
  ++n_calls_;
  call_started_ = false;
}

bool ChatOutputParser::end_region_call(const std::string& close, OutputDelta* out) {
  emit_args(close, out);
  end_call();
  body_.clear();
  return true;
}

void ChatOutputParser::end_param_call(OutputDelta* out) {
  emit_args(xml_params_emitted_ == 0 ? "{}" : "}", out);
  end_call();
}

bool ChatOutputParser::end_param_region(OutputDelta* out) {
  if (call_started_) end_param_call(out);
  body_.clear();
  return true;
}

OutputDelta ChatOutputParser::push(std::string_view text) {
  OutputDelta out;
  buf_ += text;
  while (true) {
    if (mode_ == Mode::kCall) {
      body_ += buf_;
      buf_.clear();
      if (!markers_.close.empty()) {
        // The region ends at the close marker after the call's own end (a string argument may spell the marker),
        // or, for a body that is no call at all, at the first one.
        call_end_ = npos;
        (void)scan_call(&out, false);
        const size_t from = call_end_ != npos ? call_end_ : (body_looks_like_call() ? npos : 0);
        const size_t at = from == npos ? npos : body_.find(markers_.close, from);
        if (at == npos) break;
        buf_ = body_.substr(at + markers_.close.size());
        body_.resize(at);
        (void)scan_call(&out, true);
        mode_ = return_mode_;
        continue;
      }
      if (!scan_call(&out, false)) break;
      mode_ = return_mode_;
      continue;
    }
    const std::vector<Marker> ms = active_markers();
    size_t best = npos;
    const Marker* found = nullptr;
    for (const Marker& m : ms) {
      const size_t at = buf_.find(m.text);
      // A bare-JSON call opens the message: only whitespace may come before it.
      if (at != npos && m.text[0] == '{' && skip_ws(buf_, 0) != at) continue;
      if (at != npos && (best == npos || at < best)) best = at, found = &m;
    }
    if (found) {
      emit_text(buf_.substr(0, best), &out);
      pending_ws_.clear();
      const Marker m = *found;
      std::string rest = buf_.substr(best + m.text.size());
      if (m.kind == 3) {
        // framing: nothing to show
      } else if (m.kind == 0) {
        mode_ = Mode::kReasoning;
      } else if (m.kind == 1) {
        mode_ = Mode::kContent;
      } else {
        return_mode_ = mode_;
        mode_ = Mode::kCall;
        open_marker_ = m.text;
        // A bare-JSON call's marker is its own first bytes.
        body_ = m.text[0] == '{' ? m.text : std::string();
        call_started_ = false;
        calls_done_in_body_ = 0;
      }
      buf_ = std::move(rest);
      continue;
    }
    // Hold back the longest tail that could be the start of a marker.
    size_t hold = 0;
    for (const Marker& m : ms)
      for (size_t k = std::min(m.text.size() - 1, buf_.size()); k > hold; --k)
        if (buf_.compare(buf_.size() - k, k, m.text, 0, k) == 0) {
          hold = k;
          break;
        }
    emit_text(buf_.substr(0, buf_.size() - hold), &out);
    buf_.erase(0, buf_.size() - hold);
    break;
  }
  return out;
}

OutputDelta ChatOutputParser::finish(bool cut) {
  OutputDelta out;
  if (mode_ == Mode::kCall) {
    body_ += buf_;
    buf_.clear();
    (void)scan_call(&out, true);
    mode_ = return_mode_;
  }
  if (!cut) emit_text(buf_, &out);
  buf_.clear();
  return out;
}

bool ChatOutputParser::scan_call(OutputDelta* out, bool at_end) {
  switch (format_.tools) {
    case ToolSyntax::kQwenXml: return scan_xml_call(out, at_end);
    case ToolSyntax::kDeepSeek:
    case ToolSyntax::kDeepSeekV31:
    case ToolSyntax::kKimi: return scan_section_calls(out, at_end);
    case ToolSyntax::kMistralArgs: return scan_mistral_args_call(out, at_end);
    case ToolSyntax::kGlm: {  // a hermes-style JSON body from a GLM model is read as JSON
      const size_t i = skip_ws(body_, 0);
      if (i < body_.size() && body_[i] == '{') return scan_json_calls(out, at_end);
      return scan_glm_call(out, at_end);
    }
    case ToolSyntax::kHarmony: return scan_harmony_call(out, at_end);
    case ToolSyntax::kGemma4: return scan_gemma4_call(out, at_end);
    case ToolSyntax::kPythonic: return scan_python_calls(out, at_end);
    case ToolSyntax::kDsml:
    case ToolSyntax::kDsmlV4: return scan_dsml_calls(out, at_end);
    default: return scan_json_calls(out, at_end);
  }
}

// Calls as JSON objects {"name": ..., "arguments" | "parameters": ...}: one (hermes, llama3) or an array of
// them (mistral). Arguments that are an object or array stream as they come; others go out whole at the end.
bool ChatOutputParser::scan_json_calls(OutputDelta* out, bool at_end) {
  size_t i = skip_ws(body_, 0);
  const bool array = i < body_.size() && body_[i] == '[';
  if (array && !markers_.close.empty()) {  // a marked array (nemotron) ends at the close marker after it
    const size_t e = json_value_end(body_, i, at_end);
    if (e != npos) call_end_ = e;
  }
  if (array) ++i;
  for (size_t k = 0;; ++k) {
    i = skip_ws(body_, i);
    if (array && i < body_.size() && body_[i] == ',') i = skip_ws(body_, i + 1);
    if (i >= body_.size()) return at_end;
    if (array && body_[i] == ']') {
      body_ = body_.substr(i + 1);  // what follows the array goes back to the text
      buf_ = body_ + buf_;
      body_.clear();
      return true;
    }
    if (body_[i] != '{') {
      // Not a call after all: the text as it was (only when nothing of a call went out).
      if (!at_end && !array) return false;
      // Bare JSON that is no call is the answer's text; a marked region without a call (cut short) is dropped:
      // markup never reaches the content.
      if (k == 0 && !call_started_ && open_marker_[0] == '{') emit_text(body_, out);
      body_.clear();
      return true;
    }
    const size_t obj = i;
    const size_t obj_end = json_value_end(body_, obj, at_end);
    // Walk the keys at the top of the object.
    std::string name;
    size_t args_at = npos, args_end = npos;
    bool name_known = false;
    size_t j = obj + 1;
    while (true) {
      j = skip_ws(body_, j);
      if (j >= body_.size() || body_[j] == '}') break;
      if (body_[j] == ',') { ++j; continue; }
      const size_t key_end = json_value_end(body_, j, at_end);
      if (key_end == npos || body_[j] != '"') break;
      std::string key;
      try { key = json::parse(body_.substr(j, key_end - j)).get<std::string>(); } catch (...) { break; }
      j = skip_ws(body_, key_end);
      if (j >= body_.size() || body_[j] != ':') break;
      j = skip_ws(body_, j + 1);
      const size_t v_end = json_value_end(body_, j, at_end);
      if (key == "name" && v_end != npos) {
        try {
          name = json::parse(body_.substr(j, v_end - j)).get<std::string>();
          name_known = true;
        } catch (...) {
        }
      } else if (key == "arguments" || key == "parameters") {
        args_at = j;
        args_end = v_end;
      }
      if (v_end == npos) break;
      j = v_end;
    }
    if (k < calls_done_in_body_) {  // went out already
      if (obj_end == npos) return false;
      i = obj_end;
      continue;
    }
    if (name_known && !call_started_) start_call(name, out);
    if (call_started_ && args_at != npos && body_.size() > args_at) {
      const bool structured = body_[args_at] == '{' || body_[args_at] == '[';
      if (structured) {
        const size_t upto = args_end != npos ? args_end : body_.size();
        if (upto > args_at + args_emitted_)
          emit_args(body_.substr(args_at + args_emitted_, upto - args_at - args_emitted_), out);
      }
    }
    // A region with a close marker ends there (at_end); a bare one when its object closes.
    if (obj_end != npos && !array) call_end_ = obj_end;
    const bool done = at_end || (markers_.close.empty() && obj_end != npos);
    if (!done) return false;
    if (!call_started_) {  // an object without a name: not a call (text when bare JSON, else dropped)
      if (!array && open_marker_[0] == '{') emit_text(body_, out);
      body_.clear();
      return true;
    }
    if (args_at == npos) {
      if (args_emitted_ == 0) emit_args("{}", out);
    } else if (args_emitted_ == 0 && args_end != npos) {
      std::string a = body_.substr(args_at, args_end - args_at);
      if (a[0] == '"') {  // arguments sent as a JSON string of JSON
        try { a = json::parse(a).get<std::string>(); } catch (...) {}
      }
      emit_args(a, out);
    }
    end_call();
    ++calls_done_in_body_;
    if (obj_end == npos) {
      body_.clear();
      return true;
    }
    i = obj_end;
    if (!array) {
      // One call per region; what follows is text again (llama3), or the layout before the close marker.
      if (markers_.close.empty()) buf_ = body_.substr(obj_end) + buf_;
      body_.clear();
      return true;
    }
  }
}

// <function=NAME>\n<parameter=K>\nV\n</parameter>\n...</function>: each parameter goes out as a JSON member
// when it closes, typed by the function's schema (strings as strings, the rest as the JSON they spell). The
// parameters are read in order, so a value may hold any text but "</parameter>".
bool ChatOutputParser::scan_xml_call(OutputDelta* out, bool at_end) {
  const size_t f = body_.find("<function=");
  const size_t gt = f == npos ? npos : body_.find('>', f);
  if (gt == npos) {
    if (at_end) body_.clear();  // cut short before the function's name: dropped, never shown as content
    return at_end;
  }
  const std::string name = body_.substr(f + 10, gt - f - 10);
  if (!call_started_) start_call(name, out);
  const ToolSpec* spec = nullptr;
  for (const ToolSpec& t : tools_)
    if (t.name == name) spec = &t;
  size_t pos = gt + 1, k = 0;
  bool closed = false;
  while (true) {
    pos = skip_ws(body_, pos);
    if (body_.compare(pos, 11, "</function>") == 0) {
      closed = true;
      pos += 11;
      break;
    }
    if (body_.compare(pos, 11, "<parameter=") != 0) break;
    const size_t pgt = body_.find('>', pos);
    const size_t pend = pgt == npos ? npos : body_.find("</parameter>", pgt);
    if (pend == npos) break;
    if (k >= xml_params_emitted_) {
      const std::string key = body_.substr(pos + 11, pgt - pos - 11);
      const std::string value = typed_value(spec, key, body_.substr(pgt + 1, pend - pgt - 1), true);
      emit_args(std::string(xml_params_emitted_ == 0 ? "{" : ", ") + json(key).dump() + ": " + value, out);
      ++xml_params_emitted_;
    }
    ++k;
    pos = pend + 12;
  }
  if (closed) call_end_ = pos;
  if (!at_end) return false;
  return end_region_call(xml_params_emitted_ == 0 ? "{}" : "}", out);
}

bool ChatOutputParser::body_looks_like_call() const {
  const size_t i = skip_ws(body_, 0);
  if (i == body_.size()) return true;  // nothing yet
  switch (format_.tools) {
    case ToolSyntax::kQwenXml: return body_.compare(i, 10, "<function=") == 0 || std::string("<function=").rfind(body_.substr(i), 0) == 0;
    case ToolSyntax::kDeepSeek:
    case ToolSyntax::kDeepSeekV31:
    case ToolSyntax::kKimi: return false;
    case ToolSyntax::kGlm: return true;  // a name, then key/value pairs, up to </tool_call>
    case ToolSyntax::kMistralArgs: return true;
    case ToolSyntax::kHarmony: return true;  // a name, a header, then the arguments, up to <|call|>
    case ToolSyntax::kGemma4: return body_.compare(i, 5, "call:") == 0 || std::string("call:").rfind(body_.substr(i), 0) == 0;
    case ToolSyntax::kDsml:
    case ToolSyntax::kDsmlV4: {  // invoke elements up to the block's end
      static const std::string kInvoke = "<｜DSML｜invoke";
      return body_.compare(i, kInvoke.size(), kInvoke) == 0 || kInvoke.rfind(body_.substr(i), 0) == 0;
    }
    default: return body_[i] == '{' || body_[i] == '[';
  }
}

// CALL_BEGIN HEAD SEP ARGS CALL_END, repeated inside the section (call_section): a call's first delta goes out
// when its name is known, its arguments as they come (a tail that may begin CALL_END held back); deepseek's
// fenced JSON block goes out when the call closes.
bool ChatOutputParser::scan_section_calls(OutputDelta* out, bool at_end) {
  const CallSection& sec = *section_;
  const bool fenced = format_.tools == ToolSyntax::kDeepSeek;
  size_t pos = 0, k = 0;
  while (true) {
    const size_t b = body_.find(sec.call_begin, pos);
    if (b == npos) break;
    const size_t h = b + sec.call_begin.size();
    const size_t sep = body_.find(sec.sep, h);
    if (sep == npos) break;  // cut short before the name: dropped, never shown as content
    const size_t a = sep + sec.sep.size();
    const size_t e = body_.find(sec.call_end, a);
    if (k >= calls_done_in_body_) {
      size_t a0 = skip_ws(body_, a), upto = e == npos ? body_.size() : e;
      if (fenced) {  // "function" SEP NAME \n ```json \n ARGS \n ```
        const size_t nl = std::min(body_.find('\n', a), upto);  // the name ends at a newline (or the call's end)
        if (nl == upto && e == npos && !at_end) break;
        if (!call_started_) start_call(body_.substr(a, nl - a), out);
        if (e == npos && !at_end) break;
        std::string args = nl < upto ? body_.substr(nl + 1, upto - nl - 1) : "";
        if (args.rfind("```json", 0) == 0) args = args.substr(7);
        const size_t fence = args.rfind("```");
        if (fence != npos) args.resize(fence);
        const size_t x0 = skip_ws(args, 0);
        size_t x1 = args.size();
        while (x1 > x0 && is_ws(args[x1 - 1])) --x1;
        emit_args(args.substr(x0, x1 - x0), out);
      } else {
        if (!call_started_) {
          std::string head = body_.substr(h, sep - h), name = head, id;
          // kimi: functions.NAME:N, the id the template renders the call's result by
          if (name.rfind("functions.", 0) == 0) name = name.substr(10);
          const size_t colon = name.rfind(':');
          if (colon != npos && colon + 1 < name.size() &&
              name.find_first_not_of("0123456789", colon + 1) == npos) {
            name.resize(colon);
            if (head.rfind("functions.", 0) == 0) id = head;
          }
          start_call(name, out, id);
        }
        if (e == npos && !at_end) {  // hold back what may begin CALL_END, and trailing whitespace
          for (size_t n = std::min(sec.call_end.size() - 1, upto - a); n > 0; --n)
            if (body_.compare(upto - n, n, sec.call_end, 0, n) == 0) {
              upto -= n;
              break;
            }
        }
        while (upto > a0 && is_ws(body_[upto - 1])) --upto;
        if (upto > a0 + args_emitted_) emit_args(body_.substr(a0 + args_emitted_, upto - a0 - args_emitted_), out);
        if (e == npos && !at_end) break;
      }
      if (args_emitted_ == 0) emit_args("{}", out);
      end_call();
      ++calls_done_in_body_;
    }
    ++k;
    if (e == npos) break;
    pos = e + sec.call_end.size();
  }
  if (at_end) body_.clear();
  return at_end;
}

// NAME<arg_key>K</arg_key><arg_value>V</arg_value>... (GLM-4.5 / 4.6 put newlines between): the name goes out once
// its end is seen, each argument as a JSON member when its value closes (typed by the schema: GLM writes a string
// as it is and anything else as JSON). The pairs are read in order, so a value may hold any text but
// "</arg_value>".
bool ChatOutputParser::scan_glm_call(OutputDelta* out, bool at_end) {
  static const std::string kKey = "<arg_key>", kKeyEnd = "</arg_key>", kValue = "<arg_value>",
                           kValueEnd = "</arg_value>";
  const size_t n0 = skip_ws(body_, 0);
  const size_t n1 = body_.find_first_of("\n<", n0);
  if (n1 == npos && !at_end) return false;
  const size_t name_end = n1 == npos ? body_.size() : n1;
  size_t t = name_end;
  while (t > n0 && is_ws(body_[t - 1])) --t;
  const std::string name = body_.substr(n0, t - n0);
  if (name.empty()) {  // no name: markup, dropped
    if (at_end) body_.clear();
    return at_end;
  }
  if (!call_started_) start_call(name, out);
  const ToolSpec* spec = nullptr;
  for (const ToolSpec& tool : tools_)
    if (tool.name == name) spec = &tool;
  size_t pos = name_end, k = 0;
  while (true) {
    pos = skip_ws(body_, pos);
    if (body_.compare(pos, kKey.size(), kKey) != 0) {
      if (at_end || !could_become(body_, pos, kKey)) call_end_ = pos;
      break;
    }
    const size_t ke = body_.find(kKeyEnd, pos);
    const size_t v = ke == npos ? npos : skip_ws(body_, ke + kKeyEnd.size());
    if (v == npos || body_.compare(v, kValue.size(), kValue) != 0) break;
    const size_t ve = body_.find(kValueEnd, v + kValue.size());
    if (ve == npos) break;
    if (k >= xml_params_emitted_) {
      const std::string key = body_.substr(pos + kKey.size(), ke - pos - kKey.size());
      const std::string value = typed_value(spec, key, body_.substr(v + kValue.size(), ve - v - kValue.size()), false);
      emit_args(std::string(xml_params_emitted_ == 0 ? "{" : ", ") + json(key).dump() + ": " + value, out);
      ++xml_params_emitted_;
    }
    ++k;
    pos = ve + kValueEnd.size();
  }
  if (!at_end) return false;
  return end_region_call(xml_params_emitted_ == 0 ? "{}" : "}", out);
}

// NAME[ARGS]{...} or NAME[CALL_ID]ID[ARGS]{...} (the open marker ended at [TOOL_CALLS]): the name goes out once
// [ARGS] is seen (with the model's id when it wrote one), the arguments as they come; the call ends where its JSON
// object does, and what follows is text again (usually the next [TOOL_CALLS]).
bool ChatOutputParser::scan_mistral_args_call(OutputDelta* out, bool at_end) {
  static const std::string kArgs = "[ARGS]", kCallId = "[CALL_ID]";
  const size_t ax = body_.find(kArgs);
  if (ax == npos) {
    if (at_end) body_.clear();  // cut short before the arguments: markup, dropped
    return at_end;
  }
  if (!call_started_) {
    std::string name = body_.substr(0, ax), id;
    const size_t ci = name.find(kCallId);
    if (ci != npos) {
      id = name.substr(ci + kCallId.size());
      name.resize(ci);
    }
    start_call(name, out, id);
  }
  const size_t a0 = skip_ws(body_, ax + kArgs.size());
  if (a0 >= body_.size()) {
    if (!at_end) return false;
  } else {
    const size_t end = json_value_end(body_, a0, at_end);
    const size_t upto = end != npos ? end : body_.size();
    if (body_[a0] == '{' || body_[a0] == '[' || end != npos)
      if (upto > a0 + args_emitted_) emit_args(body_.substr(a0 + args_emitted_, upto - a0 - args_emitted_), out);
    if (end == npos && !at_end) return false;
    if (end != npos) buf_ = body_.substr(end) + buf_;  // what follows the call is text again
  }
  return end_region_call(args_emitted_ == 0 ? "{}" : "", out);
}

// NAME [<|constrain|>json]<|message|>ARGS (the open marker ended at "to=functions."): the name goes out once its end
// is seen, the arguments as they come (but a tail that may begin <|call|>, which ends the region).
bool ChatOutputParser::scan_harmony_call(OutputDelta* out, bool at_end) {
  const size_t name_end = body_.find_first_of(" <");
  if (name_end == npos && !at_end) return false;
  if (!call_started_) {
    if (name_end == 0 || body_.empty()) {  // no name: markup, dropped
      if (at_end) body_.clear();
      return at_end;
    }
    start_call(body_.substr(0, name_end), out);
  }
  const size_t msg = body_.find("<|message|>");
  if (msg != npos) {
    call_end_ = msg + 11;  // the region ends at the first <|call|> after the header
    const size_t from = msg + 11 + args_emitted_;
    const std::string& close = markers_.close;
    size_t upto = std::min(body_.size(), body_.find(close, msg + 11));
    if (!at_end && upto == body_.size()) {
      for (size_t k = std::min(close.size() - 1, body_.size()); k > 0; --k)
        if (body_.compare(body_.size() - k, k, close, 0, k) == 0) {
          upto -= k;
          break;
        }
    }
    if (upto > from) emit_args(body_.substr(from, upto - from), out);
  }
  if (!at_end) return false;
  return end_region_call(args_emitted_ == 0 ? "{}" : "", out);
}

namespace {

const char* kGemmaQuote = "<|\"|>";

// One value of Gemma 4's argument syntax at s[i] (after whitespace): {key:value,...} with bare keys, [a,b],
// <|"|>text<|"|>, or a bare token (a number, true, false, null; other text is a string). Sets *end past it;
// nullopt when the text ends first.
std::optional<json> gemma_value(const std::string& s, size_t i, size_t* end) {
  i = skip_ws(s, i);
  if (i >= s.size()) return std::nullopt;
  if (s.compare(i, 5, kGemmaQuote) == 0) {
    const size_t close = s.find(kGemmaQuote, i + 5);
    if (close == npos) return std::nullopt;
    *end = close + 5;
    return json(s.substr(i + 5, close - i - 5));
  }
  if (s[i] == '{' || s[i] == '[') {
    const bool object = s[i] == '{';
    json v = object ? json::object() : json::array();
    size_t p = skip_ws(s, i + 1);
    if (p < s.size() && s[p] == (object ? '}' : ']')) {
      *end = p + 1;
      return v;
    }
    while (p < s.size()) {
      std::string key;
      if (object) {
        if (s.compare(p, 5, kGemmaQuote) == 0) {  // a quoted key
          const size_t close = s.find(kGemmaQuote, p + 5);
          if (close == npos) return std::nullopt;
          key = s.substr(p + 5, close - p - 5);
          p = close + 5;
        } else {
          const size_t colon = s.find(':', p);
          if (colon == npos) return std::nullopt;
          key = s.substr(p, colon - p);
          p = colon;
        }
        p = skip_ws(s, p);
        if (p >= s.size() || s[p] != ':') return std::nullopt;
        ++p;
      }
      size_t e = 0;
      std::optional<json> item = gemma_value(s, p, &e);
      if (!item) return std::nullopt;
      if (object) v[key] = std::move(*item);
      else v.push_back(std::move(*item));
      p = skip_ws(s, e);
      if (p >= s.size()) return std::nullopt;
      if (s[p] == ',') {
        p = skip_ws(s, p + 1);
        continue;
      }
      if (s[p] != (object ? '}' : ']')) return std::nullopt;
      *end = p + 1;
      return v;
    }
    return std::nullopt;
  }
  size_t e = i;
  while (e < s.size() && s[e] != ',' && s[e] != '}' && s[e] != ']') ++e;
  if (e == s.size()) return std::nullopt;
  size_t t = e;
  while (t > i && is_ws(s[t - 1])) --t;
  const std::string token = s.substr(i, t - i);
  *end = e;
  try {
    json v = json::parse(token);
    if (v.is_number() || v.is_boolean() || v.is_null()) return v;
  } catch (...) {
  }
  return json(token);
}

}  // namespace

// call:NAME{ARGS} (the open marker ended at <|tool_call>): the name goes out when its brace is seen, the arguments,
// converted to JSON, when their closing brace is (a string argument may hold braces, commas or the close marker).
bool ChatOutputParser::scan_gemma4_call(OutputDelta* out, bool at_end) {
  const size_t c = skip_ws(body_, 0);
  const size_t brace = body_.compare(c, 5, "call:") == 0 ? body_.find('{', c + 5) : npos;
  if (brace == npos) {
    if (at_end) body_.clear();  // no call's head: markup, dropped
    return at_end;
  }
  if (!call_started_) start_call(body_.substr(c + 5, brace - c - 5), out);
  size_t end = 0;
  const std::optional<json> args = gemma_value(body_, brace, &end);
  if (args) call_end_ = end;
  if (!at_end) return false;
  return end_region_call(args && args->is_object() ? args->dump() : "{}", out);
}

}  // namespace cachet
