#include "grammar/grammar.h"

#include <dlpack/dlpack.h>

#include <bit>
#include <cmath>
#include <limits>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <xgrammar/xgrammar.h>

#include "base/check.h"
#include "grammar/schema_check.h"
#include "grammar/xgrammar_log.h"
#include "tokenizer/tokenizer.h"

namespace cachet {

struct Grammar::Impl {
  xgrammar::CompiledGrammar compiled;
  std::vector<int32_t> stop_ids;
  int32_t vocab_size;
};

struct GrammarMatcher::Impl {
  xgrammar::GrammarMatcher m;
  int32_t vocab_size;
};

struct GrammarCompiler::Impl {
  std::vector<int32_t> stop_ids;
  int32_t vocab_size;
  // mutable: compiling adds to its cache (XGrammar's compiler is thread-safe).
  mutable std::unique_ptr<xgrammar::GrammarCompiler> xc;

  // What each request text gave (a grammar, or why it was refused), so that a schema sent again skips the
  // conversion that checks for unenforced parts (about a millisecond a schema, on every request before) as well
  // as the compilation. Least recently used out first, within kCacheBytes of compiled grammars.
  static constexpr size_t kCacheBytes = size_t{256} << 20;
  static constexpr size_t kCacheEntries = 4096;
  struct Entry {
    Result<std::shared_ptr<const Grammar>> result;
    size_t bytes;
    std::list<std::string>::iterator at;
  };
  mutable std::mutex mu;
  mutable std::list<std::string> lru;  // most recent first
  mutable std::unordered_map<std::string, Entry> cache;
  mutable size_t cache_bytes = 0;

  std::optional<Result<std::shared_ptr<const Grammar>>> lookup(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it == cache.end()) return std::nullopt;
    lru.splice(lru.begin(), lru, it->second.at);
    return it->second.result;
  }
  void store(const std::string& key, const Result<std::shared_ptr<const Grammar>>& r) const {
    const size_t bytes = key.size() + (r.is_ok() ? r.value()->memory_bytes() : 0);
    if (bytes > kCacheBytes / 4) return;
    std::lock_guard<std::mutex> lock(mu);
    if (cache.count(key)) return;
    lru.push_front(key);
    cache.emplace(key, Entry{r, bytes, lru.begin()});
    cache_bytes += bytes;
    while (cache_bytes > kCacheBytes || cache.size() > kCacheEntries) {
      auto victim = cache.find(lru.back());
      cache_bytes -= victim->second.bytes;
      cache.erase(victim);
      lru.pop_back();
    }
  }
};

Grammar::Grammar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Grammar::~Grammar() = default;
size_t Grammar::memory_bytes() const { return impl_->compiled.MemorySizeBytes(); }
int32_t Grammar::vocab_size() const { return impl_->vocab_size; }

std::unique_ptr<GrammarMatcher> Grammar::matcher(int max_rollback) const {
  auto m = std::make_unique<GrammarMatcher::Impl>(GrammarMatcher::Impl{
      xgrammar::GrammarMatcher(impl_->compiled, impl_->stop_ids, /*terminate_without_stop_token=*/false,
                               max_rollback),
      impl_->vocab_size});
  return std::make_unique<GrammarMatcher>(std::move(m));
}

GrammarMatcher::GrammarMatcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GrammarMatcher::~GrammarMatcher() = default;

int64_t GrammarMatcher::fill_mask(std::span<uint32_t> words) {
  CACHET_CHECK(static_cast<int32_t>(words.size()) == mask_words(impl_->vocab_size));
  if (impl_->m.IsTerminated()) {
    std::fill(words.begin(), words.end(), 0u);
    return 0;
  }
  int64_t shape[1] = {static_cast<int64_t>(words.size())};
  DLTensor t{};
  t.data = words.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLInt, 32, 1};
  t.shape = shape;
  impl_->m.FillNextTokenBitmask(&t, 0);
  // Bits past the vocabulary are not tokens.
  const int32_t tail = impl_->vocab_size % 32;
  if (tail) words.back() &= (1u << tail) - 1u;
  int64_t n = 0;
  for (uint32_t w : words) n += std::popcount(w);
  return n;
}

bool GrammarMatcher::accept(int32_t id) {
  if (id < 0 || id >= impl_->vocab_size || impl_->m.IsTerminated()) return false;
  return impl_->m.AcceptToken(id);
}

void GrammarMatcher::rollback(int n) {
  if (n > 0) impl_->m.Rollback(n);
}

bool GrammarMatcher::terminated() const { return impl_->m.IsTerminated(); }
bool GrammarMatcher::completed() const { return impl_->m.IsCompleted(); }

void apply_token_mask(std::span<const uint32_t> words, float* logits, int64_t n_vocab) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t covered = std::min<int64_t>(n_vocab, static_cast<int64_t>(words.size()) * 32);
  for (int64_t w = 0; w * 32 < covered; ++w) {
    uint32_t bits = words[static_cast<size_t>(w)];
    if (bits == 0xffffffffu) continue;
    const int64_t end = std::min<int64_t>(covered, w * 32 + 32);
    if (bits == 0) {  // the common case under a grammar: nothing in these 32 allowed
      std::fill(logits + w * 32, logits + end, ninf);
      continue;
    }
    uint32_t banned = ~bits;
    while (banned) {
      const int64_t id = w * 32 + std::countr_zero(banned);
      if (id >= end) break;
      logits[id] = ninf;
      banned &= banned - 1;
    }
  }
  for (int64_t id = covered; id < n_vocab; ++id) logits[id] = ninf;
}

GrammarCompiler::GrammarCompiler(const Tokenizer& tok, std::vector<int32_t> stop_ids, int64_t n_vocab)
    : impl_(std::make_unique<Impl>()) {
  // Each token as the bytes it prints; control and unused tokens as "" (XGrammar never lets text match them;
  // stop tokens are allowed where the grammar may end).
  std::vector<std::string> vocab(static_cast<size_t>(tok.n_vocab()));
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    const TokenType t = tok.token_type(id);
    if (t == TokenType::kControl || t == TokenType::kUnused || t == TokenType::kUnknown) continue;
    vocab[static_cast<size_t>(id)] = tok.token_to_piece(id, false);
  }
  impl_->vocab_size = static_cast<int32_t>(std::max<int64_t>(n_vocab, tok.n_vocab()));
  impl_->stop_ids = stop_ids;
  xgrammar::TokenizerInfo info(vocab, xgrammar::VocabType::RAW, impl_->vocab_size, std::move(stop_ids), false);
  // Two threads: the machines this runs on have few cores, and compiling happens beside the engine's steps.
  impl_->xc = std::make_unique<xgrammar::GrammarCompiler>(info, /*max_threads=*/2, /*cache_enabled=*/true,
                                                           /*max_memory_bytes=*/256ll << 20, /*enable_dynamic_compilation=*/true);
}

GrammarCompiler::~GrammarCompiler() = default;
int32_t GrammarCompiler::vocab_size() const { return impl_->vocab_size; }

namespace {

std::string trim_check(std::string msg) {
  // XGrammar's checks prefix the condition; keep what follows it.
  const size_t at = msg.find(" is false: ");
  if (msg.rfind("Check failed", 0) == 0 && at != std::string::npos) msg = msg.substr(at + 11);
  return msg;
}

// Converts first (no cache, warnings captured): a warning means part of the request would not be enforced.
// Then compiles through the compiler's cache (the precomputed masks).
template <typename Convert, typename F>
Result<std::shared_ptr<const Grammar>> compile_uncached(const GrammarCompiler::Impl& c, const char* what,
                                                        Convert&& convert, F&& f) {
  try {
    GrammarWarnings warnings;
    convert();
    if (!warnings.list().empty())
      return invalid_argument(std::string(what) + ": " + warnings.list().front() +
                              " (refused: it would not be enforced)");
    xgrammar::CompiledGrammar g = f(*c.xc);
    return std::make_shared<const Grammar>(
        std::make_unique<Grammar::Impl>(Grammar::Impl{std::move(g), c.stop_ids, c.vocab_size}));
  } catch (const std::exception& e) {
    return invalid_argument(std::string("invalid ") + what + ": " + trim_check(e.what()));
  }
}

// key: what decides the result besides `what` (the schema or grammar text, and any option).
template <typename Convert, typename F>
Result<std::shared_ptr<const Grammar>> compile(const GrammarCompiler::Impl& c, const char* what,
                                               const std::string& key, Convert&& convert, F&& f) {
  const std::string k = std::string(what) + '\0' + key;
  if (auto hit = c.lookup(k)) return *hit;
  auto r = compile_uncached(c, what, std::forward<Convert>(convert), std::forward<F>(f));
  c.store(k, r);
  return r;
}

constexpr int kMaxWhitespace = kMaxJsonWhitespace;

}  // namespace

Result<std::shared_ptr<const Grammar>> GrammarCompiler::json_schema(const std::string& schema, bool strict) const {
  CACHET_ASSIGN_OR_RETURN(const std::string normalized, check_json_schema(schema));
  return compile(
      *impl_, "JSON schema", (strict ? "strict " : "") + normalized,
      [&] { xgrammar::Grammar::FromJSONSchema(normalized, true, std::nullopt, std::nullopt, strict, kMaxWhitespace); },
      [&](xgrammar::GrammarCompiler& xc) {
        return xc.CompileJSONSchema(normalized, /*any_whitespace=*/true, std::nullopt, std::nullopt, strict,
                                    kMaxWhitespace);
      });
}

Result<std::shared_ptr<const Grammar>> GrammarCompiler::json_object() const {
  // Any JSON object: the generic JSON grammar starts with any value; a schema of type object says object.
  return compile(*impl_, "JSON", "", [] {}, [&](xgrammar::GrammarCompiler& xc) {
    return xc.CompileJSONSchema(R"({"type": "object"})", true, std::nullopt, std::nullopt, /*strict=*/false,
                                kMaxWhitespace);
  });
}

Result<std::shared_ptr<const Grammar>> GrammarCompiler::ebnf(const std::string& text) const {
  return compile(*impl_, "grammar", text, [] {}, [&](xgrammar::GrammarCompiler& xc) { return xc.CompileGrammar(text, "root"); });
}

Result<std::shared_ptr<const Grammar>> GrammarCompiler::lark(const std::string& text) const {
  return compile(*impl_, "Lark grammar", text, [] {}, [&](xgrammar::GrammarCompiler& xc) { return xc.CompileLark(text); });
}

Result<std::shared_ptr<const Grammar>> GrammarCompiler::regex(const std::string& pattern) const {
  return compile(*impl_, "regex", pattern, [] {}, [&](xgrammar::GrammarCompiler& xc) { return xc.CompileRegex(pattern); });
}

Result<std::shared_ptr<const Grammar>> GrammarCompiler::structural_tag(const std::string& json) const {
  return compile(
      *impl_, "structural tag", json,
      [&] {
        auto g = xgrammar::Grammar::FromStructuralTag(json);
        if (std::holds_alternative<xgrammar::StructuralTagError>(g))
          throw std::runtime_error(std::visit([](const auto& e) { return std::string(e.what()); },
                                              std::get<xgrammar::StructuralTagError>(g)));
      },
      [&](xgrammar::GrammarCompiler& xc) { return xc.CompileStructuralTag(json); });
}

}  // namespace cachet
