// WordPiece tokenizer ("bert" in GGUF), as BERT's BasicTokenizer + WordpieceTokenizer: the text is cleaned
// (control characters and NUL dropped), optionally lowercased and stripped of accents (canonical decomposition,
// then combining marks dropped), split at whitespace, and every punctuation character, ASCII symbol and CJK
// ideograph becomes a word of its own. Each word is then matched greedily, longest vocabulary entry first, from
// its start; a word with any unmatched rest becomes the unknown token. GGUF vocabularies mark word starts with
// U+2581 rather than marking continuations with "##" (llama.cpp's conversion), so a word is matched as
// U+2581 + word. Unicode properties and decomposition come from utf8proc.
#include <utf8proc.h>

#include <algorithm>

#include "base/utf8.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer_impl.h"

namespace cachet {

namespace {

constexpr const char* kWordStart = "\xE2\x96\x81";  // U+2581

// BERT's whitespace: space, tab, newline, carriage return and the space separators (\v, \f are controls there).
bool is_whitespace(utf8proc_int32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || utf8proc_category(c) == UTF8PROC_CATEGORY_ZS;
}

bool is_other(utf8proc_category_t cat) {  // \p{C}: control, format, surrogate, private use, unassigned
  return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CS ||
         cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CN;
}


bool is_punctuation(utf8proc_category_t cat) {
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

bool is_symbol(utf8proc_category_t cat) { return cat >= UTF8PROC_CATEGORY_SM && cat <= UTF8PROC_CATEGORY_SO; }

// The CJK Unified Ideographs blocks BERT splits one by one (its Extension F bound as HF tokenizers has it).
bool is_cjk(utf8proc_int32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void append_utf8(utf8proc_int32_t c, std::string* out) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(c, buf);
  out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

class WpmTokenizer final : public Tokenizer {
 public:
  Status init(const GgufFile& f) {
    CACHET_RETURN_IF_ERROR(init_common(f, Kind::kWpm));
    auto flag = [&](const char* key, bool fallback) -> Result<bool> {
      const std::string k = std::string("tokenizer.ggml.") + key;
      if (!f.find(k)) return fallback;
      return f.get_bool(k);
    };
    CACHET_ASSIGN_OR_RETURN(lowercase_, flag("normalizer.lowercase", true));
    CACHET_ASSIGN_OR_RETURN(strip_accents_, flag("normalizer.strip_accents", lowercase_));
    for (const std::string& t : tokens_) max_len_ = std::max(max_len_, t.size());
    if (!unk_) unk_ = find("[UNK]");
    if (!unk_) return invalid_argument("a WordPiece vocabulary needs an unknown token (tokenizer.ggml.unknown_token_id)");
    return Status::ok();
  }

  std::string token_to_piece(int32_t id, bool special) const override {
    if (id < 0 || id >= n_vocab()) return {};
    const std::string& t = tokens_[id];
    if (types_[id] == TokenType::kControl || types_[id] == TokenType::kUnknown) return special ? t : std::string();
    return u2581_to_spaces(t);
  }

 protected:
  void encode_fragment(std::string_view text, bool at_start, std::vector<int32_t>* out) const override {
    for (const std::string& w : words(text)) match(w, out);
  }

 private:
  // The words of a text after cleaning and normalization, each prefixed with U+2581.
  std::vector<std::string> words(std::string_view text) const {
    std::vector<utf8proc_int32_t> cps(text.size() + 1);
    const auto* src = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
    // Canonical decomposition when accents go (so "é" is "e" + a combining mark); the input is valid UTF-8
    // (Tokenizer::encode sanitized it).
    const int opts = strip_accents_ ? UTF8PROC_DECOMPOSE | UTF8PROC_STABLE : 0;
    utf8proc_ssize_t n = utf8proc_decompose(src, static_cast<utf8proc_ssize_t>(text.size()), cps.data(),
                                            static_cast<utf8proc_ssize_t>(cps.size()), static_cast<utf8proc_option_t>(opts));
    if (n > static_cast<utf8proc_ssize_t>(cps.size())) {
      cps.resize(static_cast<size_t>(n));
      n = utf8proc_decompose(src, static_cast<utf8proc_ssize_t>(text.size()), cps.data(), n,
                             static_cast<utf8proc_option_t>(opts));
    }
    std::vector<std::string> out;
    std::string cur;
    auto end_word = [&]() {
      if (!cur.empty()) out.push_back(kWordStart + cur);
      cur.clear();
    };
    for (utf8proc_ssize_t i = 0; i < std::max<utf8proc_ssize_t>(n, 0); ++i) {
      const utf8proc_int32_t c = cps[i];
      if (is_whitespace(c)) {
        end_word();
        continue;
      }
      const utf8proc_category_t cat = utf8proc_category(c);
      if (c == 0 || c == 0xFFFD || is_other(cat)) continue;
      if (strip_accents_ && cat == UTF8PROC_CATEGORY_MN) continue;  // a nonspacing mark: an accent
      const utf8proc_int32_t lc = lowercase_ ? utf8proc_tolower(c) : c;
      if (is_punctuation(cat) || (c < 0x7F && is_symbol(cat)) || is_cjk(c)) {
        end_word();
        append_utf8(lc, &cur);
        end_word();
      } else {
        append_utf8(lc, &cur);
      }
    }
    end_word();
    return out;
  }

  // Longest vocabulary entry first, from the start of the rest; all or nothing per word.
  void match(const std::string& w, std::vector<int32_t>* out) const {
    const size_t before = out->size();
    for (size_t i = 0; i < w.size();) {
      size_t j = std::min(w.size(), i + max_len_);
      std::optional<int32_t> id;
      for (; j > i; --j)
        if ((id = find(std::string_view(w).substr(i, j - i)))) break;
      if (!id) {
        out->resize(before);
        out->push_back(*unk_);
        return;
      }
      out->push_back(*id);
      i = j;
    }
  }

  bool lowercase_ = true, strip_accents_ = true;
  size_t max_len_ = 0;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_wpm_tokenizer(const GgufFile& f) {
  auto t = std::make_unique<WpmTokenizer>();
  CACHET_RETURN_IF_ERROR(t->init(f));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace cachet
