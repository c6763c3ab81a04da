// cachet logits: one prefill of the given ids; writes the next-token logits at every position as raw
// little-endian float32 [n_tokens, n_vocab]. The interface the Python oracles compare against. With --mtp, the
// file's multi-token-prediction head's logits instead: position p reads token p and the trunk's final hidden
// state at p - 1 (zeros at 0), so its row predicts token p + 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "engine/engine.h"
#include "io/gguf.h"
#include "kv/kv_cache.h"
#include "tools/cachet/common.h"
#include "vision/prompt_image.h"
#include "vision/vision_encoder.h"

namespace cachet::cli {

namespace {

// The head of the trunk's file over the prompt, given the trunk's hidden state at every position.
Status mtp_logits(const Model& trunk, const std::vector<int32_t>& ids, const std::vector<float>& hidden, bool precise,
                  const KvTypes& kv, float* logits) {
  LoadOptions lo;
  lo.precise = precise;
  lo.mtp_head = true;
  lo.pool = trunk.shared_pool();
  if (!trunk.gguf()) return invalid_argument("--mtp needs a GGUF file");
  CACHET_ASSIGN_OR_RETURN(std::unique_ptr<Model> head, load_model(trunk.gguf()->path(), lo));
  const int64_t d = head->config().n_embd;
  const int n = static_cast<int>(ids.size());
  ContiguousKvCache cache(head->config(), n, kv);
  ForwardBatch b = ForwardBatch::single(cache, ids, 0, true);
  b.input_hidden.assign(static_cast<size_t>(n) * d, 0.0f);
  std::copy(hidden.begin(), hidden.end() - d, b.input_hidden.begin() + d);  // position p reads the state at p - 1
  return head->forward(b, logits);
}

}  // namespace

void add_logits_command(CLI::App& app, int* exit_code) {
  struct Args {
    std::string model, ids, out, mmproj, image;
    int image_at = 0;
    KvFlags kv{.fallback = "f32"};
    int threads = 0;
    bool one_by_one = false;
    bool precise = false;
    bool mtp = false;
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
  c->add_option("--mmproj", a->mmproj, "a projector file: with --image, the image's rows go into the prompt");
  c->add_option("--image", a->image, "an image (JPEG, PNG, WebP) encoded by --mmproj");
  c->add_option("--image-at", a->image_at, "where the image's rows go: before the N-th prompt id (default 0)");
  c->add_flag("--mtp", a->mtp, "the multi-token-prediction head's logits (a qwen35 file's nextn block)");
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
    if (a->mtp && a->one_by_one) {
      *exit_code = fail(invalid_argument("--mtp runs the head over one prefill; not with --one-by-one"));
      return;
    }
    Model& model = **m;
    const int64_t V = model.config().n_vocab;
    // An image: its rows replace placeholder ids (0) spliced in at --image-at.
    std::vector<float> rows;
    int img0 = -1, img_n = 0;
    bool both_ways = false, mrope = false;
    PromptImage image;
    if (a->mmproj.empty() != a->image.empty()) {
      *exit_code = fail(invalid_argument("--mmproj and --image go together"));
      return;
    }
    if (!a->image.empty()) {
      if (a->one_by_one || a->mtp || a->image_at < 0 || a->image_at > static_cast<int>(ids->size())) {
        *exit_code = fail(invalid_argument("--image: one prefill, and --image-at within the prompt"));
        return;
      }
      auto enc = VisionEncoder::load(a->mmproj, model.shared_pool() ? model.shared_pool()
                                                                    : std::make_shared<ThreadPool>(1));
      auto img = enc.is_ok() ? load_image(a->image) : Result<Image>(enc.status());
      if (!img.is_ok()) {
        *exit_code = fail(img.status());
        return;
      }
      const VisionConfig& vc = (*enc)->config();
      auto px = (*enc)->preprocess(*img);
      Status s = projector_fits(model, vc);
      if (s.is_ok()) s = px.status();
      if (!s.is_ok()) {
        *exit_code = fail(s);
        return;
      }
      image.pos = img0 = a->image_at;
      image.grid = (*enc)->output_grid(px->width, px->height);
      img_n = image.grid.rows();
      both_ways = vc.bidirectional;
      mrope = vc.mrope;
      rows.resize(static_cast<size_t>(img_n) * vc.row_width());
      if (s = (*enc)->encode(*px, rows.data()); !s.is_ok()) {
        *exit_code = fail(s);
        return;
      }
      ids->insert(ids->begin() + img0, static_cast<size_t>(img_n), 0);
    }
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
      if (img_n > 0) {
        b.input_embd = std::move(rows);
        b.embd_row.assign(static_cast<size_t>(n), -1);
        if (both_ways) b.attn_end.assign(static_cast<size_t>(n), -1);
        for (int i = 0; i < img_n; ++i) {
          b.embd_row[img0 + i] = i;
          if (both_ways) b.attn_end[img0 + i] = img0 + img_n - 1;
        }
        for (int i = 0; mrope && i < n; ++i) {  // Qwen-VL: the image's rows at their grid places, text after it on
          b.rope_pos.resize(b.rope_pos.size() + 3);
          mrope_position({image}, i, b.rope_pos.data() + 3 * i);
        }
      }
      std::vector<float> hidden;
      if (a->mtp) {
        b.want_hidden.assign(static_cast<size_t>(n), 1);
        hidden.resize(static_cast<size_t>(n) * model.config().n_embd);
      }
      Status s = model.forward(b, logits.data(), a->mtp ? hidden.data() : nullptr);
      if (s.is_ok() && a->mtp) s = mtp_logits(model, *ids, hidden, a->precise, a->kv.types(), logits.data());
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
