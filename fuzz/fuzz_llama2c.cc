// The llama2.c checkpoint reader: a header of seven int32 and the weights it implies. Mutated inputs rarely
// keep the exact size the header implies, so the input's header is kept and the weights are its remaining bytes
// repeated or cut to that size (when the size is at most 4 MiB): every input reaches the loader.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "base/thread_pool.h"
#include "engine/generate.h"
#include "io/llama2c.h"
#include "model/model.h"

namespace {

// Bytes the header implies (the format's arithmetic, in 128 bits: no overflow), or 0 when implausible.
uint64_t implied_size(const int32_t h[7]) {
  const __int128 dim = h[0], hidden = h[1], L = h[2], heads = h[3], kv = h[4], seq = h[6];
  const __int128 vocab = h[5] < 0 ? -static_cast<__int128>(h[5]) : h[5];
  if (dim <= 0 || hidden <= 0 || L <= 0 || heads <= 0 || kv <= 0 || seq <= 0 || vocab <= 0) return 0;
  const __int128 hs = dim / heads;
  __int128 n = vocab * dim + L * dim + L * dim * heads * hs + 2 * L * dim * kv * hs + L * heads * hs * dim +
               L * dim + 3 * L * hidden * dim + dim + seq * hs + (h[5] < 0 ? vocab * dim : 0);
  n = n * 4 + 28;
  return n > 0 && n <= (4 << 20) ? static_cast<uint64_t>(n) : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cachet;
  if (size < 28) return 0;
  int32_t h[7];
  std::memcpy(h, data, sizeof h);
  std::vector<uint8_t> file(data, data + size);
  if (!looks_like_llama2c(data, size)) {
    const uint64_t want = implied_size(h);
    if (want == 0) return 0;
    file.resize(want);
    for (size_t i = size; i < want; ++i) file[i] = size > 28 ? data[28 + (i - 28) % (size - 28)] : 0;
  }
  if (!looks_like_llama2c(file.data(), file.size())) return 0;
  fuzz::MemFile f(file.data(), file.size());
  LoadOptions opts;
  opts.n_threads = 1;
  static auto pool = std::make_shared<ThreadPool>(1);
  auto model = load_llama2c(f.path(), pool, opts);
  if (model.is_ok()) {
    // A loaded model generates a token: the weights' values (NaN, huge) must not break the forward pass.
    GenerateOptions o;
    o.sampling.max_tokens = 1;
    o.stop_at_eos = false;
    (void)generate(**model, {0}, o);
  }
  return 0;
}
