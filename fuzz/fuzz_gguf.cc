// The GGUF reader and everything a model file feeds: header, metadata, tensor table, the architecture's
// config checks, the tokenizer built from the metadata, and the model load (tensor bounds, repacking).
#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "io/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cachet;
  auto f = GgufFile::parse(data, size);
  if (!f.is_ok()) return 0;
  if (auto tok = Tokenizer::from_gguf(**f); tok.is_ok()) {
    auto ids = (*tok)->encode("Hello, world! 123", true, true);
    (void)(*tok)->decode(ids);
  }
  fuzz::MemFile file(data, size);
  LoadOptions opts;
  opts.n_threads = 1;
  auto model = load_model(file.path(), opts);
  (void)model;
  return 0;
}
