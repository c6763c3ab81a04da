// A generated sample's text, the one place every front end turns tokens into what a user reads: token pieces
// joined into whole UTF-8 characters (nothing streamed ever splits one), then through the stop sequences
// (held back while they could still match; the match and all after it never shown). End-of-generation tokens
// add no text. end_of_generation_ids() is the one list of the tokens that end a turn.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sampling/stop.h"
#include "tokenizer/tokenizer.h"

namespace cachet {

class Model;

// EOS, EOT and the vocabulary's other end-of-turn control tokens (<|im_end|>, <|eot_id|>, ...); the model's
// EOS alone when there is no tokenizer.
std::vector<int32_t> end_of_generation_ids(const Model& model, const Tokenizer* tok);

class TextStream {
 public:
  // `tok` may be null (a checkpoint without a vocabulary): then there is no text and no stop sequence.
  TextStream(const Tokenizer* tok, std::vector<std::string> stops);
  // A generated token: the text now safe to show. is_end: an end-of-generation token (adds no text).
  std::string push(int32_t token, bool is_end = false);
  // The sample ended: what was held back (nothing once a stop sequence matched).
  std::string finish();
  bool stopped() const { return stop_.stopped(); }
  const std::string& stop_sequence() const { return stop_.matched(); }

 private:
  std::optional<StreamDecoder> dec_;
  StopMatcher stop_;
  bool finished_ = false;
};

}  // namespace cachet
