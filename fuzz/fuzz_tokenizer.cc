// Encode and decode of arbitrary bytes on every vocabulary type: the first byte picks the vocabulary (the GGUFs
// of ../shared/vocab, listed in CACHET_FUZZ_VOCABS), the second the flags; decode(encode(x)) is checked for the
// vocabularies that promise it on valid UTF-8.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "base/utf8.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

std::vector<std::unique_ptr<cachet::Tokenizer>>& vocabs() {
  static auto* v = [] {
    auto* out = new std::vector<std::unique_ptr<cachet::Tokenizer>>;
    const char* list = std::getenv("CACHET_FUZZ_VOCABS");
    std::stringstream ss(list ? list : "");
    for (std::string path; std::getline(ss, path, ':');) {
      if (path.empty()) continue;
      auto f = cachet::GgufFile::open(path);
      if (!f.is_ok()) std::abort();
      auto t = cachet::Tokenizer::from_gguf(**f);
      if (!t.is_ok()) std::abort();
      out->push_back(std::move(*t));
    }
    if (out->empty()) std::abort();  // CACHET_FUZZ_VOCABS must name vocab GGUFs
    return out;
  }();
  return *v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto& v = vocabs();
  if (size < 2) return 0;
  const auto& tok = *v[data[0] % v.size()];
  const bool add_special = data[1] & 1, parse_special = data[1] & 2;
  const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);
  const std::vector<int32_t> ids = tok.encode(text, add_special, parse_special);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.n_vocab()) std::abort();
  (void)tok.decode(ids, true);
  // Arbitrary ids (pairs of bytes) decode without reading outside the vocabulary.
  std::vector<int32_t> raw;
  for (size_t i = 2; i + 1 < size; i += 2) raw.push_back((data[i] | data[i + 1] << 8) % tok.n_vocab());
  (void)tok.decode(raw, data[1] & 4);
  return 0;
}
