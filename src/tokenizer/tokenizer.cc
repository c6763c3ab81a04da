#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>

#include "base/utf8.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer_impl.h"

namespace cachet {

namespace {

const char* const kEndOfGenerationNames[] = {"<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                             "<|end_of_text|>", "<EOT>", "</s>", "<|eom_id|>"};

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& f) {
  if (!f.find("tokenizer.ggml.model")) return not_found("the model file has no tokenizer (tokenizer.ggml.model)");
  CACHET_ASSIGN_OR_RETURN(std::string model, f.get_string("tokenizer.ggml.model"));
  if (model == "llama") return make_spm_tokenizer(f);
  if (model == "gpt2") return make_bpe_tokenizer(f);
  if (model == "gemma4") return make_bpe_tokenizer(f, /*spm_style=*/true);
  if (model == "bert") return make_wpm_tokenizer(f);
  return unimplemented("tokenizer model '" + model + "' is not supported (supported: llama, gpt2, gemma4, bert)");
}

Status Tokenizer::init_common(const GgufFile& f, Kind kind) {
  kind_ = kind;
  auto toks = f.get_string_array("tokenizer.ggml.tokens");
  if (!toks || toks->empty()) return invalid_argument("tokenizer.ggml.tokens is missing or not a string array");
  tokens_ = std::move(*toks);
  const size_t n = tokens_.size();
  scores_.assign(n, 0.0f);
  if (const GgufValue* v = f.find("tokenizer.ggml.scores")) {
    if (v->type != GgufType::kArray || v->count != n ||
        (v->elem_type != GgufType::kF32 && v->elem_type != GgufType::kF64))
      return invalid_argument("tokenizer.ggml.scores must be a float array with one score per token");
    for (size_t i = 0; i < n; ++i) scores_[i] = static_cast<float>(v->float_at(i));
  }
  types_.assign(n, TokenType::kNormal);
  if (const GgufValue* v = f.find("tokenizer.ggml.token_type")) {
    if (v->type != GgufType::kArray || v->count != n || !gguf_type_is_integer(v->elem_type))
      return invalid_argument("tokenizer.ggml.token_type must be an integer array with one type per token");
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = v->int_at(i);
      if (t < 0 || t > 6) return invalid_argument("token " + std::to_string(i) + " has unknown type " + std::to_string(t));
      types_[i] = static_cast<TokenType>(t);
    }
  }
  index_.reserve(n);
  for (size_t i = 0; i < n; ++i) index_[tokens_[i]] = static_cast<int32_t>(i);

  auto special = [&](const char* key, std::optional<int32_t>* out) -> Status {
    const std::string k = std::string("tokenizer.ggml.") + key;
    if (!f.find(k)) return Status::ok();
    CACHET_ASSIGN_OR_RETURN(uint64_t id, f.get_uint(k));
    if (id >= n) return invalid_argument(k + " = " + std::to_string(id) + " is outside the vocabulary of " +
                                         std::to_string(n));
    *out = static_cast<int32_t>(id);
    return Status::ok();
  };
  CACHET_RETURN_IF_ERROR(special("bos_token_id", &bos_));
  CACHET_RETURN_IF_ERROR(special("eos_token_id", &eos_));
  CACHET_RETURN_IF_ERROR(special("eot_token_id", &eot_));
  CACHET_RETURN_IF_ERROR(special("unknown_token_id", &unk_));
  CACHET_RETURN_IF_ERROR(special("seperator_token_id", &sep_));  // sic: llama.cpp's key
  if (!bos_) CACHET_RETURN_IF_ERROR(special("cls_token_id", &bos_));
  auto flag = [&](const char* key, bool fallback) -> Result<bool> {
    const std::string k = std::string("tokenizer.ggml.") + key;
    if (!f.find(k)) return fallback;
    return f.get_bool(k);
  };
  CACHET_ASSIGN_OR_RETURN(add_bos_, flag("add_bos_token", kind == Kind::kSpm || kind == Kind::kWpm));
  CACHET_ASSIGN_OR_RETURN(add_sep_, flag("add_sep_token", kind == Kind::kWpm));
  CACHET_ASSIGN_OR_RETURN(add_eos_, flag("add_eos_token", false));
  CACHET_ASSIGN_OR_RETURN(add_space_prefix_, flag("add_space_prefix", kind == Kind::kSpm));

  for (size_t i = 0; i < n; ++i) {
    const TokenType t = types_[i];
    if ((t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown) && !tokens_[i].empty())
      special_by_length_.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(special_by_length_.begin(), special_by_length_.end(),
                   [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });
  for (const char* name : kEndOfGenerationNames) {
    auto it = index_.find(name);
    if (it != index_.end() && types_[it->second] == TokenType::kControl) end_of_generation_.push_back(it->second);
  }
  if (eos_) end_of_generation_.push_back(*eos_);
  if (eot_) end_of_generation_.push_back(*eot_);
  // Harmony (gpt-oss): a turn ends at <|return|> (the answer) or <|call|> (a tool call); <|end|> closes one
  // message of the turn (the reasoning) and the model goes on, so it is no end there (as llama.cpp decides).
  const auto control = [&](const char* name) -> std::optional<int32_t> {
    auto it = index_.find(name);
    if (it == index_.end() || types_[it->second] != TokenType::kControl) return std::nullopt;
    return it->second;
  };
  if (const auto ret = control("<|return|>"), call = control("<|call|>"); ret && call) {
    if (const auto end = control("<|end|>"))
      std::erase(end_of_generation_, *end);
    end_of_generation_.push_back(*ret);
    end_of_generation_.push_back(*call);
  }
  return Status::ok();
}

std::string u2581_to_spaces(const std::string& t) {
  std::string out;
  for (size_t i = 0; i < t.size();) {
    if (t.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += t[i++];
    }
  }
  return out;
}

std::optional<int32_t> Tokenizer::find(std::string_view text) const {
  auto it = index_.find(std::string(text));
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::find(end_of_generation_.begin(), end_of_generation_.end(), id) != end_of_generation_.end();
}

std::vector<int32_t> Tokenizer::encode(std::string_view raw, bool add_special, bool parse_special) const {
  const std::string text = sanitize_utf8(raw);
  // Fragments: either a special token id or a run of plain text [begin, end).
  struct Frag {
    int32_t id;  // -1 for text
    size_t begin, end;
  };
  std::vector<Frag> frags{{-1, 0, text.size()}};
  for (int32_t sid : special_by_length_) {
    // User-defined tokens are always matched (as llama.cpp does); control and unknown only when asked.
    if (!parse_special && types_[sid] != TokenType::kUserDefined) continue;
    const std::string& st = tokens_[sid];
    std::vector<Frag> next;
    next.reserve(frags.size());
    for (const Frag& fr : frags) {
      if (fr.id >= 0) {
        next.push_back(fr);
        continue;
      }
      size_t pos = fr.begin;
      while (pos < fr.end) {
        size_t hit = text.find(st, pos);
        if (hit == std::string::npos || hit + st.size() > fr.end) break;
        if (hit > pos) next.push_back({-1, pos, hit});
        next.push_back({sid, hit, hit + st.size()});
        pos = hit + st.size();
      }
      if (pos < fr.end) next.push_back({-1, pos, fr.end});
    }
    frags.swap(next);
  }
  std::vector<int32_t> out;
  if (add_special && add_bos_ && bos_) out.push_back(*bos_);
  bool prev_special = true;
  for (const Frag& fr : frags) {
    if (fr.id >= 0) {
      out.push_back(fr.id);
      prev_special = true;
    } else if (fr.end > fr.begin) {
      encode_fragment(std::string_view(text).substr(fr.begin, fr.end - fr.begin), prev_special, &out);
      prev_special = false;
    }
  }
  if (add_special && add_eos_ && eos_) out.push_back(*eos_);
  if (add_special && add_sep_ && sep_) out.push_back(*sep_);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool special) const {
  std::string out;
  for (int32_t id : ids) out += token_to_piece(id, special);
  if (kind_ == Kind::kSpm && add_space_prefix_ && !ids.empty() && ids.front() >= 0 && ids.front() < n_vocab() &&
      types_[ids.front()] != TokenType::kControl && !out.empty() && out[0] == ' ')
    out.erase(0, 1);
  if (kind_ == Kind::kWpm && !out.empty() && out[0] == ' ') out.erase(0, 1);  // every word starts with one
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  // Generated text continues a prompt, so pieces are kept as they are (a leading space is meaningful).
  pending_ += t_.token_to_piece(id, false);
  const size_t n = utf8_complete_prefix(pending_);
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace cachet
