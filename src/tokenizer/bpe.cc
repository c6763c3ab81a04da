// Byte-level BPE ("gpt2" in GGUF): the text is split into words by the pre-tokenizer regexes that
// `tokenizer.ggml.pre` names (PCRE2, Unicode properties), each word's bytes are mapped to printable code
// points (GPT-2's byte-to-unicode table), and adjacent symbols are merged in the order of the merge list.
// SentencePiece-style BPE ("gemma4"): spaces become U+2581, lines are the words (a run of newlines is one),
// symbols are raw UTF-8 characters, and a character no token holds falls back to its <0xXX> byte tokens.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdio>
#include <list>
#include <mutex>
#include <queue>
#include <string>
#include <unordered_map>

#include "base/utf8.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer_impl.h"

namespace cachet {

namespace {

// The pre-tokenizer of each `tokenizer.ggml.pre` family: regexes applied in turn, each splitting the
// pieces the previous ones produced (matches and the text between them both become pieces).
const char* const kGpt2[] = {
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))"};
const char* const kStarcoder[] = {R"(\p{N})",
                                  R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))"};
const char* const kLlama3[] = {
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
const char* const kQwen2[] = {
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
// o200k (gpt-oss, GPT-4o; tokenizer.json's Split pattern): a word is an optional leading non-letter, then
// upper-case letters before lower-case ones (camelCase splits), with an English contraction attached; digits in
// threes; punctuation runs keep trailing newlines and slashes.
const char* const kGpt4o[] = {
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
// Qwen3.5 / 3.6: Qwen2's with combining marks inside words.
const char* const kQwen35[] = {
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
// Tekken (Mistral Nemo, Mistral 3, Ministral): o200k's words without contractions, digits one by one.
const char* const kTekken[] = {
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
// DeepSeek-V3 / R1 (and Hunyuan's dense models): digits in threes, CJK runs, then words with their marks.
const char* const kDeepseekV3[] = {
    R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
// Kimi K2 (tokenization_kimi.py): Han runs apart; words of the other letters cased as tekken's, each with its
// contraction (any case); digits in threes. PCRE2 has no class intersection: "a letter but not Han" is a
// lookahead before the class.
const char* const kKimiK2[] = {
    R"(\p{Han}+|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
const char* const kDeepseekCoder[] = {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)",
                                      R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)", R"(\p{N})"};
// DeepSeek LLM enumerates the cased letters (Lu, Ll, Lt) of its Unicode snapshot; PCRE2's properties give
// the same set up to letters added to Unicode since (docs/tokenizer.md).
const char* const kDeepseekLlm[] = {R"([\r\n])", R"(\s?[\p{Lu}\p{Ll}\p{Lt}]+)",
                                    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
                                    R"(\s+$)", R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)", R"(\p{N}+)"};
const char* const kLines[] = {R"([^\n]+|[\n]+)"};
const char* const kFalcon[] = {R"([\p{P}\$\+<=>\^~\|`]+)",
                               R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
                               R"([0-9][0-9][0-9])"};

struct PreTokenizer {
  const char* name;
  const char* const* regexes;
  size_t n;
  bool ignore_merges;  // a word that is already a token is emitted whole (llama3)
};

#define CACHET_PRE(name, arr, ignore) {name, arr, sizeof(arr) / sizeof(arr[0]), ignore}
const PreTokenizer kPreTokenizers[] = {
    CACHET_PRE("gpt-2", kGpt2, false),         CACHET_PRE("gpt2", kGpt2, false),
    CACHET_PRE("default", kGpt2, false),       CACHET_PRE("mpt", kGpt2, false),
    CACHET_PRE("olmo", kGpt2, false),          CACHET_PRE("gpt-neox", kGpt2, false),
    CACHET_PRE("starcoder", kStarcoder, false), CACHET_PRE("smollm", kStarcoder, false),
    CACHET_PRE("refact", kStarcoder, false),   CACHET_PRE("command-r", kStarcoder, false),
    CACHET_PRE("llama3", kLlama3, true),       CACHET_PRE("llama-bpe", kLlama3, true),
    CACHET_PRE("llama-v3", kLlama3, true),     CACHET_PRE("qwen2", kQwen2, false),
    CACHET_PRE("lfm2", kLlama3, true),  // LFM2: llama3's rules (llama.cpp maps it so)
    CACHET_PRE("gpt-4o", kGpt4o, false),
    CACHET_PRE("deepseek-coder", kDeepseekCoder, false), CACHET_PRE("deepseek-llm", kDeepseekLlm, false),
    CACHET_PRE("falcon", kFalcon, false),      CACHET_PRE("gemma4", kLines, false),
    CACHET_PRE("qwen35", kQwen35, false),      CACHET_PRE("tekken", kTekken, true),
    CACHET_PRE("deepseek-v3", kDeepseekV3, false), CACHET_PRE("hunyuan-dense", kDeepseekV3, false),
    CACHET_PRE("kimi-k2", kKimiK2, false),
    // GLM-4.x / GLM-5 (GLM-4.7-Flash): llama3's split; glm4 / glm5 take a word that is a token whole, chatglm-bpe
    // (GLM-4 9B) merges it.
    CACHET_PRE("glm4", kLlama3, true), CACHET_PRE("glm5", kLlama3, true), CACHET_PRE("chatglm-bpe", kLlama3, false),
    // Names llama.cpp's converter gives families that split as one of the above.
    CACHET_PRE("deepseek-r1-qwen", kQwen2, false), CACHET_PRE("stablelm2", kQwen2, false),
    CACHET_PRE("megrez", kQwen2, false),        CACHET_PRE("falcon3", kLlama3, true),
    CACHET_PRE("falcon-h1", kLlama3, true),     CACHET_PRE("pixtral", kLlama3, true),
    CACHET_PRE("dbrx", kLlama3, false),         CACHET_PRE("smaug-bpe", kLlama3, false),
    CACHET_PRE("phi-2", kGpt2, false),          CACHET_PRE("exaone4", kGpt2, false),
    CACHET_PRE("granite-docling", kGpt2, false), CACHET_PRE("jais", kGpt2, false),
    CACHET_PRE("codeshell", kStarcoder, false), CACHET_PRE("exaone", kStarcoder, false),
    CACHET_PRE("minerva-7b", kStarcoder, false), CACHET_PRE("llama4", kGpt4o, false),
    CACHET_PRE("minimax-m2", kGpt4o, false),
};
#undef CACHET_PRE

std::string encode_utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's reversible byte <-> printable code point map: printable Latin-1 bytes map to themselves, the
// other 68 bytes to U+0100 upwards.
struct ByteMap {
  std::array<std::string, 256> to_text;
  std::unordered_map<std::string, uint8_t> to_byte;
  ByteMap() {
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      uint32_t cp = printable ? static_cast<uint32_t>(b) : 256u + extra++;
      to_text[b] = encode_utf8(cp);
      to_byte[to_text[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

struct Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

class BpeTokenizer final : public Tokenizer {
 public:
  Status init(const GgufFile& f, bool spm_style) {
    CACHET_RETURN_IF_ERROR(init_common(f, Kind::kBpe));
    spm_style_ = spm_style;
    std::string pre = spm_style ? "gemma4" : "default";
    if (f.find("tokenizer.ggml.pre")) {
      CACHET_ASSIGN_OR_RETURN(pre, f.get_string("tokenizer.ggml.pre"));
    }
    const PreTokenizer* pt = nullptr;
    for (const auto& p : kPreTokenizers)
      if (pre == p.name) pt = &p;
    if (!pt) return unimplemented("pre-tokenizer '" + pre + "' (tokenizer.ggml.pre) is not supported");
    ignore_merges_ = pt->ignore_merges;
    for (size_t i = 0; i < pt->n; ++i) {
      int err;
      PCRE2_SIZE off;
      auto re = std::make_unique<Regex>();
      re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pt->regexes[i]), PCRE2_ZERO_TERMINATED,
                               PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
      if (!re->code) return invalid_argument("pre-tokenizer regex failed to compile at offset " + std::to_string(off));
      pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);  // best effort: falls back to the interpreter
      regexes_.push_back(std::move(re));
    }
    const auto merges = f.get_string_array("tokenizer.ggml.merges");
    if (!merges) return invalid_argument("a gpt2 tokenizer needs tokenizer.ggml.merges");
    merges_.reserve(merges->size());
    for (size_t rank = 0; rank < merges->size(); ++rank) {
      const std::string& m = (*merges)[rank];
      size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) return invalid_argument("merge " + std::to_string(rank) + " has no space: '" + m + "'");
      auto a = find(std::string_view(m).substr(0, sp));
      auto b = find(std::string_view(m).substr(sp + 1));
      auto ab = find(m.substr(0, sp) + m.substr(sp + 1));
      if (!a || !b || !ab) continue;  // a merge into a token the vocabulary lacks can never apply
      merges_.emplace(key(*a, *b), Merge{static_cast<int32_t>(rank), *ab});
    }
    return Status::ok();
  }

  std::string token_to_piece(int32_t id, bool special) const override {
    if (id < 0 || id >= n_vocab()) return {};
    const std::string& t = tokens_[id];
    const TokenType type = types_[id];
    if (type == TokenType::kControl || type == TokenType::kUnknown) return special ? t : std::string();
    if (type == TokenType::kUserDefined) return t;
    if (spm_style_) {
      unsigned v = 0;
      if (type == TokenType::kByte && t.size() == 6 && std::sscanf(t.c_str(), "<0x%02X>", &v) == 1)
        return std::string(1, static_cast<char>(v));
      return u2581_to_spaces(t);
    }
    std::string out;
    const auto& bm = byte_map();
    for (size_t i = 0; i < t.size();) {
      size_t n = std::min(utf8_seq_len(static_cast<unsigned char>(t[i])), t.size() - i);
      auto it = bm.to_byte.find(t.substr(i, n));
      if (it != bm.to_byte.end()) out += static_cast<char>(it->second);
      else out.append(t, i, n);
      i += n;
    }
    return out;
  }

 protected:
  void encode_fragment(std::string_view raw, bool, std::vector<int32_t>* out) const override {
    std::string escaped;
    if (spm_style_) {  // spaces as U+2581 before anything else
      for (char ch : raw) escaped += ch == ' ' ? std::string("\xE2\x96\x81") : std::string(1, ch);
      raw = escaped;
    }
    const std::string_view frag = raw;
    std::vector<std::pair<size_t, size_t>> words{{0, frag.size()}};
    pcre2_match_data* md = pcre2_match_data_create(4, nullptr);
    for (const auto& re : regexes_) {
      std::vector<std::pair<size_t, size_t>> next;
      for (auto [b, e] : words) {
        size_t pos = b;
        while (pos < e) {
          int rc = pcre2_match(re->code, reinterpret_cast<PCRE2_SPTR>(frag.data()), e, pos, PCRE2_NO_UTF_CHECK, md,
                               nullptr);
          if (rc < 0) break;
          const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
          size_t ms = ov[0], me = ov[1];
          if (me == ms) {  // an empty match: step one character on
            pos = ms + std::min(utf8_seq_len(static_cast<unsigned char>(frag[ms])), e - ms);
            continue;
          }
          if (ms > pos) next.push_back({pos, ms});
          next.push_back({ms, me});
          pos = me;
        }
        if (pos < e) next.push_back({pos, e});
      }
      words.swap(next);
    }
    pcre2_match_data_free(md);
    for (auto [b, e] : words) encode_word(frag.substr(b, e - b), out);
  }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

  void encode_word(std::string_view word, std::vector<int32_t>* out) const {
    if (word.empty()) return;
    {
      std::lock_guard<std::mutex> lock(cache_mu_);
      auto it = cache_.find(std::string(word));
      if (it != cache_.end()) {
        out->insert(out->end(), it->second.begin(), it->second.end());
        return;
      }
    }
    const auto& bm = byte_map();
    std::string mapped;
    if (spm_style_) {
      mapped = word;
    } else {
      for (char c : word) mapped += bm.to_text[static_cast<unsigned char>(c)];
    }
    std::vector<int32_t> ids;
    auto whole = index_.find(mapped);
    const bool newlines = spm_style_ && mapped.find_first_not_of('\n') == std::string::npos;
    if ((ignore_merges_ || newlines) && whole != index_.end()) {
      ids.push_back(whole->second);
    } else {
      // Symbols as a linked list of token ids; a queue of adjacent pairs by merge rank (then position).
      struct Sym {
        int32_t id;
        int prev, next;
        size_t at, n;  // the character's bytes in `mapped`
      };
      std::vector<Sym> sym;
      for (size_t i = 0; i < mapped.size();) {
        size_t n = std::min(utf8_seq_len(static_cast<unsigned char>(mapped[i])), mapped.size() - i);
        auto it = index_.find(mapped.substr(i, n));
        int32_t id = it != index_.end() ? it->second : (unk_ && !spm_style_ ? *unk_ : -1);
        sym.push_back({id, static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, i, n});
        i += n;
      }
      sym.back().next = -1;
      struct Cand {
        int32_t rank;
        int left, right;
        int32_t left_id, right_id;
        bool operator>(const Cand& o) const { return rank > o.rank || (rank == o.rank && left > o.left); }
      };
      std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
      auto push = [&](int l, int r) {
        if (l < 0 || r < 0 || sym[l].id < 0 || sym[r].id < 0) return;
        auto it = merges_.find(key(sym[l].id, sym[r].id));
        if (it != merges_.end()) q.push({it->second.rank, l, r, sym[l].id, sym[r].id});
      };
      for (size_t i = 1; i < sym.size(); ++i) push(static_cast<int>(i) - 1, static_cast<int>(i));
      while (!q.empty()) {
        Cand c = q.top();
        q.pop();
        Sym& l = sym[c.left];
        if (l.id != c.left_id || l.next != c.right || sym[c.right].id != c.right_id) continue;  // stale
        l.id = merges_.at(key(c.left_id, c.right_id)).result;
        Sym& r = sym[c.right];
        r.id = -2;  // merged away
        l.next = r.next;
        if (r.next >= 0) sym[r.next].prev = c.left;
        push(l.prev, c.left);
        push(c.left, l.next);
      }
      for (int i = 0; i >= 0; i = sym[i].next) {
        if (sym[i].id >= 0) {
          ids.push_back(sym[i].id);
        } else if (spm_style_) {  // a character no token holds: its bytes' <0xXX> tokens
          for (size_t b = sym[i].at; b < sym[i].at + sym[i].n; ++b) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "<0x%02X>", static_cast<unsigned char>(mapped[b]));
            if (auto it = index_.find(hex); it != index_.end()) ids.push_back(it->second);
          }
        }
      }
    }
    out->insert(out->end(), ids.begin(), ids.end());
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() > 200000) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }

  std::vector<std::unique_ptr<Regex>> regexes_;
  std::unordered_map<uint64_t, Merge> merges_;
  bool ignore_merges_ = false;
  bool spm_style_ = false;  // "gemma4": U+2581 spaces, raw UTF-8 symbols, <0xXX> byte fallback
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;  // word -> ids
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(const GgufFile& f, bool spm_style) {
  auto t = std::make_unique<BpeTokenizer>();
  CACHET_RETURN_IF_ERROR(t->init(f, spm_style));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace cachet
