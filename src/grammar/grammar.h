// Constrained decoding (docs/structured-output.md): a grammar compiled against a model's vocabulary, and a
// matcher per request that says, before each token, which tokens may come next. The grammars are XGrammar's
// (its C++ core, built by scripts/setup_xgrammar.sh): JSON Schema, the generic JSON grammar, GBNF/EBNF, Lark
// and regular expressions, all compiled into a pushdown automaton whose per-state token masks are precomputed,
// so a step's mask costs microseconds, not a pass over the vocabulary. XGrammar's types stay in grammar.cc.
//
//   GrammarCompiler  one per vocabulary (thread-safe, caches compiled grammars); compile_*() -> Grammar
//   Grammar          immutable, shared by every request that uses it (SamplingParams::grammar)
//   GrammarMatcher   one per request (the engine makes it): fill_mask -> sample -> accept, rollback for drafts
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cachet/status.h"

namespace cachet {

class Tokenizer;
class GrammarMatcher;

// Whitespace a JSON grammar allows between two tokens (or around an XML-style argument): room for any
// indentation, no endless runs of newlines from a small model.
constexpr int kMaxJsonWhitespace = 16;

class Grammar {
 public:
  struct Impl;
  explicit Grammar(std::unique_ptr<Impl> impl);
  ~Grammar();
  // A matcher at the grammar's start. It may roll back up to max_rollback tokens (speculative drafts).
  std::unique_ptr<GrammarMatcher> matcher(int max_rollback = 16) const;
  // Bytes the compiled grammar holds (its precomputed masks), for the compiler's cache accounting.
  size_t memory_bytes() const;
  int32_t vocab_size() const;

 private:
  std::unique_ptr<Impl> impl_;
};

class GrammarMatcher {
 public:
  struct Impl;
  explicit GrammarMatcher(std::unique_ptr<Impl> impl);
  ~GrammarMatcher();
  // Words of a mask for vocab_size tokens: bit (id % 32) of word id / 32 set = allowed.
  static int32_t mask_words(int32_t vocab_size) { return (vocab_size + 31) / 32; }
  // The tokens allowed next; returns the number of allowed ones (0: the grammar is finished or stuck).
  int64_t fill_mask(std::span<uint32_t> words);
  // Advances by one token; false (state unchanged) when the grammar does not allow it.
  bool accept(int32_t id);
  // Takes back the last n accepted tokens (n <= the max_rollback it was made with).
  void rollback(int n);
  // The grammar accepted a stop token: nothing more may follow.
  bool terminated() const;
  // The grammar could end here (a stop token is allowed).
  bool completed() const;

 private:
  std::unique_ptr<Impl> impl_;
};

// Sets logits of tokens the mask does not allow to -inf (ids past the mask's words too).
void apply_token_mask(std::span<const uint32_t> words, float* logits, int64_t n_vocab);

class GrammarCompiler {
 public:
  // The vocabulary's token bytes (control tokens never match text); stop_ids end a grammar where it may end.
  // n_vocab: the model's logits width (ids past the tokenizer's are never allowed).
  GrammarCompiler(const Tokenizer& tok, std::vector<int32_t> stop_ids, int64_t n_vocab);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // A JSON Schema (text), checked first by check_json_schema (grammar/schema_check.h): a keyword the grammar
  // would not enforce is an InvalidArgument naming it. strict: no properties beyond those listed unless the
  // schema says otherwise (OpenAI's strict mode); any_whitespace: the model may put whitespace between tokens.
  Result<std::shared_ptr<const Grammar>> json_schema(const std::string& schema, bool strict = true) const;
  // Any JSON object (response_format json_object).
  Result<std::shared_ptr<const Grammar>> json_object() const;
  // GBNF / EBNF (llama.cpp's `grammar` field; XGrammar's EBNF reads GBNF), its start rule `root`.
  Result<std::shared_ptr<const Grammar>> ebnf(const std::string& text) const;
  // A Lark grammar (its start rule `start`).
  Result<std::shared_ptr<const Grammar>> lark(const std::string& text) const;
  // A regular expression the whole output must match.
  Result<std::shared_ptr<const Grammar>> regex(const std::string& pattern) const;
  // XGrammar's structural tag (a JSON tree of formats: const_string, json_schema with a style, tag,
  // triggered_tags, tags_with_separator, sequence, repeat, any_text with max_tokens, ...): tool calls in each
  // family's markup, a thinking budget.
  Result<std::shared_ptr<const Grammar>> structural_tag(const std::string& json) const;
  int32_t vocab_size() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cachet
