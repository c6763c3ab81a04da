// XGrammar's log, routed to cachet (it is built with XGRAMMAR_LOG_CUSTOMIZE, scripts/setup_xgrammar.sh): its
// fatal checks throw std::runtime_error with their message, and its warnings go to the innermost
// GrammarWarnings of the calling thread (to stderr when none is open). A warning while converting a grammar
// means part of it would not be enforced ("keyword ... is not supported", "ignoring multipleOf"), so the
// compiler refuses it with that message.
#pragma once

#include <string>
#include <vector>

namespace cachet {

class GrammarWarnings {
 public:
  GrammarWarnings();
  ~GrammarWarnings();
  GrammarWarnings(const GrammarWarnings&) = delete;
  GrammarWarnings& operator=(const GrammarWarnings&) = delete;
  const std::vector<std::string>& list() const { return list_; }
  void add(std::string w) { list_.push_back(std::move(w)); }

 private:
  GrammarWarnings* outer_;
  std::vector<std::string> list_;
};

}  // namespace cachet
