// Internal: the factories of the tokenizer families (spm.cc, bpe.cc, wpm.cc), dispatched by tokenizer.cc.
#pragma once

#include <memory>

#include "tokenizer/tokenizer.h"

namespace cachet {

Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(const GgufFile& f);
Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(const GgufFile& f);
Result<std::unique_ptr<Tokenizer>> make_wpm_tokenizer(const GgufFile& f);

// A piece's text with each U+2581 (SentencePiece's space, WordPiece's word start in GGUF) as a space.
std::string u2581_to_spaces(const std::string& t);

}  // namespace cachet
