// Internal: the factories of the tokenizer families (spm.cc, bpe.cc, wpm.cc), dispatched by tokenizer.cc.
#pragma once

#include <memory>

#include "tokenizer/tokenizer.h"

namespace cachet {

Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(const GgufFile& f);
Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(const GgufFile& f);
Result<std::unique_ptr<Tokenizer>> make_wpm_tokenizer(const GgufFile& f);

}  // namespace cachet
