// LFM2's Python-style calls in the output parser: [f(k=v, ...), g()] between <|tool_call_start|> and
// <|tool_call_end|>.
#include <cctype>

#include "chat/output_parser.h"
#include "chat/python_literal.h"

namespace cachet {

namespace {

size_t skip_space(const std::string& s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  return i;
}

size_t name_end(const std::string& s, size_t i) {
  while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_' || s[i] == '.' || s[i] == '-'))
    ++i;
  return i;
}

}  // namespace

// The list is read from its start on every piece; the counters say what already went out. A call's first delta
// goes out at its "(", each keyword argument as a JSON member once its value (a Python literal) is followed by
// "," or ")" (a number might go on until then), and the call's end at its ")". What is not a call ends the
// reading: at the end of the text an unfinished call closes as far as it went.
bool ChatOutputParser::scan_python_calls(OutputDelta* out, bool at_end) {
  size_t i = skip_space(body_, 0);
  if (i < body_.size() && body_[i] == '[') {
    ++i;
    for (size_t k = 0;; ++k) {
      i = skip_space(body_, i);
      if (i < body_.size() && body_[i] == ',') i = skip_space(body_, i + 1);
      if (i >= body_.size()) break;
      if (body_[i] == ']') {
        call_end_ = i + 1;
        break;
      }
      const size_t n1 = name_end(body_, i);
      if (n1 >= body_.size() || n1 == i || body_[n1] != '(') break;
      const bool current = k >= calls_done_in_body_;
      if (current && !call_started_) start_call(body_.substr(i, n1 - i), out);
      size_t j = n1 + 1, a = 0;
      bool closed = false, stop = false;
      while (!stop) {
        j = skip_space(body_, j);
        if (j >= body_.size()) break;
        if (body_[j] == ')') {
          closed = true;
          ++j;
          break;
        }
        if (body_[j] == ',') {
          ++j;
          continue;
        }
        const size_t k1 = name_end(body_, j);
        const size_t eq = skip_space(body_, k1);
        nlohmann::ordered_json v;
        size_t ve = 0;
        if (k1 == j || eq >= body_.size() || body_[eq] != '=' ||
            read_python_literal(body_, eq + 1, &v, &ve) != LiteralRead::kDone)
          break;
        const size_t after = skip_space(body_, ve);
        if (after >= body_.size() || (body_[after] != ',' && body_[after] != ')')) break;
        if (current && a >= xml_params_emitted_) {
          emit_args(std::string(xml_params_emitted_ == 0 ? "{" : ", ") +
                        nlohmann::ordered_json(body_.substr(j, k1 - j)).dump() + ": " + v.dump(),
                    out);
          ++xml_params_emitted_;
        }
        ++a;
        j = after;
      }
      if (!closed) break;
      if (current) {
        end_param_call(out);
        ++calls_done_in_body_;
      }
      i = j;
    }
  }
  if (!at_end) return false;
  return end_param_region(out);
}

}  // namespace cachet
