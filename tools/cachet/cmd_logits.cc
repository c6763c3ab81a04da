// cachet logits: one prefill of the given ids; writes the next-token logits at every position as raw
// little-endian float32 [n_tokens, n_vocab]. The interface the Python oracles compare against.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "kv/kv_cache.h"
#include "tools/cachet/common.h"

namespace cachet::cli {

void add_logits_command(CLI::App& app, int* exit_code) {
  struct Args {
    std::string model, ids, out;
    KvFlags kv{.fallback = "f32"};
    int threads = 0;
    bool one_by_one = false;
    bool precise = false;
    RopeOverrides rope;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("logits", "dump the logits at every prompt position (for oracles)");
  c->add_option("-m,--model", a->model, "model file");
  c->add_option("--prompt-ids", a->ids, "token ids")->required();
  c->add_option("-o,--output", a->out, "output file (float32, [n_tokens, n_vocab])")->required();
  add_kv_flags(c, &a->kv);
  c->add_option("-t,--threads", a->threads);
  c->add_flag("--precise", a->precise, "f32 activations in every matmul");
  add_rope_flags(c, &a->rope);
  c->add_flag("--one-by-one", a->one_by_one, "feed the prompt one token per forward pass instead of one prefill");
  c->callback([a, exit_code] {
    auto ids = parse_ids(a->ids);
    if (!ids.is_ok() || ids->empty()) {
      *exit_code = fail(ids.is_ok() ? invalid_argument("no token ids") : ids.status());
      return;
    }
    auto m = load(a->model, a->threads, a->precise, a->rope);
    if (!m.is_ok()) {
      *exit_code = fail(m.status());
      return;
    }
    Model& model = **m;
    const int64_t V = model.config().n_vocab;
    const int n = static_cast<int>(ids->size());
    if (Status s = kv_types_fit(model.config(), a->kv.types()); !s.is_ok()) {
      *exit_code = fail(s);
      return;
    }
    ContiguousKvCache cache(model.config(), n, a->kv.types());
    std::vector<float> logits(static_cast<size_t>(n) * V);
    if (a->one_by_one) {
      for (int i = 0; i < n; ++i) {
        ForwardBatch b = ForwardBatch::single(cache, {(*ids)[i]}, i, true);
        Status s = model.forward(b, logits.data() + i * V);
        if (!s.is_ok()) {
          *exit_code = fail(s);
          return;
        }
      }
    } else {
      ForwardBatch b = ForwardBatch::single(cache, *ids, 0, true);
      Status s = model.forward(b, logits.data());
      if (!s.is_ok()) {
        *exit_code = fail(s);
        return;
      }
    }
    FILE* f = std::fopen(a->out.c_str(), "wb");
    if (!f || std::fwrite(logits.data(), sizeof(float), logits.size(), f) != logits.size()) {
      if (f) std::fclose(f);
      *exit_code = fail(io_error("cannot write " + a->out));
      return;
    }
    std::fclose(f);
    *exit_code = 0;
  });
}

}  // namespace cachet::cli
