// Tokenizers built from GGUF metadata: `tokenizer.ggml.model` = "llama" (SentencePiece-style: scores,
// byte fallback, U+2581 for space), "gpt2" (byte-level BPE with merges, pre-tokenized by the regexes of
// `tokenizer.ggml.pre`) or "bert" (WordPiece, wpm.cc). Special tokens are parsed out of text only when the caller asks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/utf8.h"
#include "cachet/status.h"

namespace cachet {

class GgufFile;

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t { kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

class Tokenizer {
 public:
  enum class Kind { kSpm, kBpe, kWpm };

  static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& f);
  virtual ~Tokenizer() = default;

  // add_special: BOS/EOS (and a WordPiece vocabulary's [SEP]) as the vocabulary's add_bos/add_eos/add_sep flags
  // say. parse_special: text that spells a
  // control token (e.g. "<|im_start|>") becomes that token; otherwise it is tokenized as plain text.
  // Invalid UTF-8 in `text` is replaced by U+FFFD, one per invalid byte (docs/tokenizer.md).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes of one token. Control tokens render as their text only when `special` is true.
  virtual std::string token_to_piece(int32_t id, bool special) const = 0;
  // Concatenated pieces; for SentencePiece vocabularies with a space prefix, the leading space it added is
  // removed, so decode(encode(text)) == text.
  std::string decode(const std::vector<int32_t>& ids, bool special = false) const;

  Kind kind() const { return kind_; }
  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& token_text(int32_t id) const { return tokens_[id]; }
  TokenType token_type(int32_t id) const { return types_[id]; }
  std::optional<int32_t> find(std::string_view text) const;
  std::optional<int32_t> bos() const { return bos_; }
  std::optional<int32_t> eos() const { return eos_; }
  std::optional<int32_t> eot() const { return eot_; }
  std::optional<int32_t> sep() const { return sep_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_sep() const { return add_sep_; }
  // True for tokens that end a turn (EOS, EOT, and control tokens such as <|im_end|> / <|eot_id|>).
  bool is_end_of_generation(int32_t id) const;

 protected:
  Tokenizer() = default;
  // Reads tokens, scores, types, special ids and flags; builds the special-token tables.
  Status init_common(const GgufFile& f, Kind kind);
  // Encodes text that contains no special tokens. at_start: the fragment begins the text or follows a
  // special token (where a SentencePiece vocabulary adds its space prefix).
  virtual void encode_fragment(std::string_view text, bool at_start, std::vector<int32_t>* out) const = 0;

  Kind kind_ = Kind::kBpe;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string, int32_t> index_;
  std::optional<int32_t> bos_, eos_, eot_, unk_, sep_;
  bool add_bos_ = false, add_eos_ = false, add_sep_ = false, add_space_prefix_ = false;
  std::vector<int32_t> special_by_length_;  // control / user-defined tokens, longest text first
  std::vector<int32_t> end_of_generation_;
};

// Streams token pieces as text that never splits a UTF-8 character.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t) : t_(t) {}
  std::string push(int32_t id);
  std::string flush();  // whatever is held back (incomplete bytes become U+FFFD)

 private:
  const Tokenizer& t_;
  std::string pending_;
};

}  // namespace cachet
