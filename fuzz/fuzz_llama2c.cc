// The llama2.c checkpoint reader: a header of seven int32 and the weights it implies.
#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "io/llama2c.h"
#include "model/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cachet;
  if (!looks_like_llama2c(data, size)) return 0;
  fuzz::MemFile file(data, size);
  LoadOptions opts;
  opts.n_threads = 1;
  auto model = load_llama2c(file.path(), nullptr, opts);
  (void)model;
  return 0;
}
