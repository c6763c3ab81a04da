// Internal: the factories of the tokenizer families (spm.cc, bpe.cc, wpm.cc), dispatched by tokenizer.cc.
#pragma once

#include <memory>

#include "tokenizer/tokenizer.h"

namespace cachet {

Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(const GgufFile& f);
// spm_style: Gemma 4's SentencePiece-style BPE (tokenizer.ggml.model "gemma4"), see bpe.cc.
Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(const GgufFile& f, bool spm_style = false);
Result<std::unique_ptr<Tokenizer>> make_wpm_tokenizer(const GgufFile& f);

// A piece's text with each U+2581 (SentencePiece's space, WordPiece's word start in GGUF) as a space.
std::string u2581_to_spaces(const std::string& t);

}  // namespace cachet
