#include "engine/text_stream.h"

#include <algorithm>

#include "model/model.h"

namespace cachet {

std::vector<int32_t> end_of_generation_ids(const Model& model, const Tokenizer* tok) {
  std::vector<int32_t> ids;
  if (tok)
    for (int32_t id = 0; id < tok->n_vocab(); ++id)
      if (tok->is_end_of_generation(id)) ids.push_back(id);
  if (tok) return ids;  // the tokenizer read the same eos / eot keys, and knows when one is no end (harmony's <|end|>)
  const SpecialTokens& sp = model.special_tokens();
  for (const std::optional<int32_t>& t : {sp.eos, sp.eot})
    if (t && std::find(ids.begin(), ids.end(), *t) == ids.end()) ids.push_back(*t);
  return ids;
}

TextStream::TextStream(const Tokenizer* tok, std::vector<std::string> stops) : stop_(std::move(stops)) {
  if (tok) dec_.emplace(*tok);
}

std::string TextStream::push(int32_t token, bool is_end) {
  if (!dec_ || is_end || stop_.stopped() || finished_) return {};
  return stop_.feed(dec_->push(token));
}

std::string TextStream::finish() {
  if (!dec_ || finished_) return {};
  finished_ = true;
  if (stop_.stopped()) return {};
  std::string out = stop_.feed(dec_->flush());
  if (!stop_.stopped()) out += stop_.flush();
  return out;
}

}  // namespace cachet
