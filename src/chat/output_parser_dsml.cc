// DeepSeek V3.2 / V4's DSML calls in the output parser: invoke elements inside the <｜DSML｜function_calls> (V4:
// <｜DSML｜tool_calls>) block, each parameter typed by its own string="true|false" attribute.
#include "chat/output_parser.h"

namespace cachet {

namespace {

constexpr size_t npos = std::string::npos;
const std::string kInvoke = "<｜DSML｜invoke name=\"", kInvokeEnd = "</｜DSML｜invoke>",
                  kParam = "<｜DSML｜parameter name=\"", kParamEnd = "</｜DSML｜parameter>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// A parameter's value: as written when string="true" (whitespace is part of it), else the JSON it spells
// (taken as a string when it spells none).
std::string param_json(const std::string& attrs, const std::string& raw) {
  if (attrs.find("string=\"true\"") == npos) {
    size_t b = 0, e = raw.size();
    while (b < e && is_space(raw[b])) ++b;
    while (e > b && is_space(raw[e - 1])) --e;
    try {
      return nlohmann::ordered_json::parse(raw.substr(b, e - b)).dump();
    } catch (...) {
    }
  }
  return nlohmann::ordered_json(raw).dump();
}

}  // namespace

// The invokes are read in order from the body's start on every piece; the counters say what already went out. A
// call's first delta goes out once its name's closing quote is seen, each parameter as a JSON member when its
// end tag is, the call's end at </｜DSML｜invoke>. The body's own end (call_end_) is after the last finished
// invoke unless another one is open (a string value may spell the block's end tag).
bool ChatOutputParser::scan_dsml_calls(OutputDelta* out, bool at_end) {
  size_t pos = 0;
  for (size_t k = 0;; ++k) {
    const size_t inv = body_.find(kInvoke, pos);
    if (inv == npos) break;
    const size_t q = body_.find('"', inv + kInvoke.size());
    const size_t gt = q == npos ? npos : body_.find('>', q);
    if (gt == npos) {
      call_end_ = npos;
      break;
    }
    const bool current = k >= calls_done_in_body_;
    if (current && !call_started_) start_call(body_.substr(inv + kInvoke.size(), q - inv - kInvoke.size()), out);
    size_t p = gt + 1, a = 0;
    bool closed = false;
    while (true) {
      size_t i = p;
      while (i < body_.size() && is_space(body_[i])) ++i;
      if (body_.compare(i, kInvokeEnd.size(), kInvokeEnd) == 0) {
        closed = true;
        p = i + kInvokeEnd.size();
        break;
      }
      if (body_.compare(i, kParam.size(), kParam) != 0) break;
      const size_t kq = body_.find('"', i + kParam.size());
      const size_t pgt = kq == npos ? npos : body_.find('>', kq);
      const size_t pend = pgt == npos ? npos : body_.find(kParamEnd, pgt);
      if (pend == npos) break;
      if (current && a >= xml_params_emitted_) {
        const std::string key = body_.substr(i + kParam.size(), kq - i - kParam.size());
        emit_args(std::string(xml_params_emitted_ == 0 ? "{" : ", ") + nlohmann::ordered_json(key).dump() + ": " +
                      param_json(body_.substr(kq, pgt - kq), body_.substr(pgt + 1, pend - pgt - 1)),
                  out);
        ++xml_params_emitted_;
      }
      ++a;
      p = pend + kParamEnd.size();
    }
    if (!closed) {
      call_end_ = npos;
      break;
    }
    if (current) {
      end_param_call(out);
      ++calls_done_in_body_;
    }
    call_end_ = p;
    pos = p;
  }
  if (!at_end) return false;
  return end_param_region(out);
}

}  // namespace cachet
