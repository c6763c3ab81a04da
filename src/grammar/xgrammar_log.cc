#include "grammar/xgrammar_log.h"

#include <iostream>
#include <stdexcept>

namespace cachet {

namespace {
thread_local GrammarWarnings* current = nullptr;
}  // namespace

GrammarWarnings::GrammarWarnings() : outer_(current) { current = this; }
GrammarWarnings::~GrammarWarnings() { current = outer_; }

}  // namespace cachet

// The two hooks XGrammar's logging calls when built with XGRAMMAR_LOG_CUSTOMIZE.
namespace xgrammar {

[[noreturn]] void LogFatalImpl(const std::string& file, int lineno, const std::string& message) {
  (void)file;
  (void)lineno;
  throw std::runtime_error(message);
}

void LogMessageImpl(const std::string& file, int lineno, int level, const std::string& message) {
  constexpr int kWarning = 2;  // XGRAMMAR_LOG_LEVEL_WARNING
  if (level < kWarning) return;
  if (cachet::current) {
    cachet::current->add(message);
    return;
  }
  std::cerr << "xgrammar: " << file << ":" << lineno << ": " << message << "\n";
}

}  // namespace xgrammar
