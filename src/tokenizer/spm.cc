// SentencePiece-style tokenizer ("llama" in GGUF): spaces become U+2581, an optional space prefix, then
// adjacent pieces are merged greedily by vocabulary score; pieces the vocabulary lacks fall back to
// <0xNN> byte tokens.
#include <array>
#include <cstdio>
#include <queue>
#include <unordered_map>

#include "base/utf8.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer_impl.h"

namespace cachet {

namespace {

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581

class SpmTokenizer final : public Tokenizer {
 public:
  Status init(const GgufFile& f) {
    CACHET_RETURN_IF_ERROR(init_common(f, Kind::kSpm));
    byte_ids_.fill(-1);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      if (auto id = find(name)) byte_ids_[b] = *id;
    }
    return Status::ok();
  }

  std::string token_to_piece(int32_t id, bool special) const override;

 protected:
  void encode_fragment(std::string_view frag, bool at_start, std::vector<int32_t>* out) const override;

 private:
  struct Symbol {
    int prev, next;
    size_t begin, len;  // bytes of the normalized text
  };
  struct Bigram {
    int left, right;
    float score;
    size_t len;  // combined length when queued (stale if it changed)
    bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
  };

  void resegment(const std::string& text, size_t begin, size_t len,
                 const std::unordered_map<std::string, std::pair<size_t, size_t>>& rev, std::vector<int32_t>* out) const;

  std::array<int32_t, 256> byte_ids_{};
};

void SpmTokenizer::encode_fragment(std::string_view frag, bool at_start, std::vector<int32_t>* out) const {
  std::string text;
  if (at_start && add_space_prefix_) text += kSpace;
  for (char c : frag) {
    if (c == ' ') text += kSpace;
    else text += c;
  }
  if (text.empty()) return;
  std::vector<Symbol> sym;
  for (size_t i = 0; i < text.size();) {
    size_t n = std::min(utf8_seq_len(static_cast<unsigned char>(text[i])), text.size() - i);
    sym.push_back({static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, i, n});
    i += n;
  }
  sym.back().next = -1;
  std::priority_queue<Bigram> queue;
  // Merged text -> where its two halves were, for resegmenting pieces the vocabulary lacks.
  std::unordered_map<std::string, std::pair<size_t, size_t>> rev;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t len = sym[left].len + sym[right].len;
    auto it = index_.find(text.substr(sym[left].begin, len));
    if (it == index_.end()) return;
    queue.push({left, right, scores_[it->second], len});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!queue.empty()) {
    Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len || l.next != b.right) continue;  // stale
    rev[text.substr(l.begin, b.len)] = {l.len, r.len};
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int i = 0; i >= 0 && i < static_cast<int>(sym.size()); i = sym[i].next)
    resegment(text, sym[i].begin, sym[i].len, rev, out);
}

void SpmTokenizer::resegment(const std::string& text, size_t begin, size_t len,
                             const std::unordered_map<std::string, std::pair<size_t, size_t>>& rev,
                             std::vector<int32_t>* out) const {
  const std::string piece = text.substr(begin, len);
  auto it = index_.find(piece);
  if (it != index_.end()) {
    out->push_back(it->second);
    return;
  }
  auto r = rev.find(piece);
  if (r != rev.end()) {
    resegment(text, begin, r->second.first, rev, out);
    resegment(text, begin + r->second.first, r->second.second, rev, out);
    return;
  }
  for (char c : piece) {
    int32_t id = byte_ids_[static_cast<unsigned char>(c)];
    if (id >= 0) out->push_back(id);
    else if (unk_) out->push_back(*unk_);
  }
}

std::string SpmTokenizer::token_to_piece(int32_t id, bool special) const {
  if (id < 0 || id >= n_vocab()) return {};
  const std::string& t = tokens_[id];
  switch (types_[id]) {
    case TokenType::kNormal:
    case TokenType::kUserDefined:
      return u2581_to_spaces(t);
    case TokenType::kByte: {
      unsigned v = 0;
      if (t.size() == 6 && std::sscanf(t.c_str(), "<0x%02X>", &v) == 1) return std::string(1, static_cast<char>(v));
      return {};
    }
    case TokenType::kUnknown:
      return special ? t : "\xE2\x96\x85";  // U+2585, as llama.cpp renders <unk>
    default:
      return special ? t : std::string();
  }
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(const GgufFile& f) {
  auto t = std::make_unique<SpmTokenizer>();
  CACHET_RETURN_IF_ERROR(t->init(f));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace cachet
