// The Engine's image work: a request's images placed in its prompt, encoded on the engine's steps, and their
// rows given to the step's batch. An image is encoded once its request is admitted and its cached prefix taken
// (a prefix-cache hit on it skips the encoder entirely), one image at a time, a few layers a step while other
// requests run (on the model's threads, before the step's forward pass), so their decoding goes on meanwhile;
// the scheduler holds the request at the image until its rows are done. The rows are kept with the request for
// a recompute after preemption.
#include <algorithm>

#include "base/check.h"
#include "engine/engine.h"

namespace cachet {

Status projector_fits(const Model& model, const VisionConfig& vc) {
  if (vc.n_embd_out != model.config().n_embd)
    return invalid_argument("the projector's rows are " + std::to_string(vc.n_embd_out) + " wide; the model's "
                            "embeddings are " + std::to_string(model.config().n_embd) + " (a projector of another "
                            "model)");
  return model.accepts_image_rows(vc.bidirectional, vc.n_deepstack, vc.mrope);
}

Status Engine::set_images(Request* r, std::vector<PromptImage> images) {
  if (images.empty()) return Status::ok();
  if (!cfg_.vision)
    return invalid_argument("this model was loaded without a vision encoder (a projector file, --mmproj): it takes "
                            "no images");
  const int n = static_cast<int>(r->tokens.size());
  int end = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    const PromptImage& im = images[i];
    const std::string which = "image " + std::to_string(i);
    const EncoderInput* px = im.pixels.get();
    const ImageGrid g = px ? cfg_.vision->output_grid(px->width, px->height) : ImageGrid{};
    if (!px || !cfg_.vision->is_input_size(px->width, px->height) ||
        px->data.size() != static_cast<size_t>(3) * px->width * px->height || g.x != im.grid.x || g.y != im.grid.y)
      return invalid_argument(which + ": not preprocessed for this encoder");
    const int n_rows = g.rows();
    if (im.pos < end || im.pos > n - n_rows)
      return invalid_argument(which + ": its " + std::to_string(n_rows) + " rows at position " +
                              std::to_string(im.pos) + " overlap another image or leave the " + std::to_string(n) +
                              "-token prompt");
    for (int k = 0; k < n_rows; ++k) r->tokens[static_cast<size_t>(im.pos + k)] = image_row_id(im.hash, k);
    r->images.emplace_back(im.pos, im.pos + n_rows);
    end = im.pos + n_rows;
  }
  r->prompt_images = std::move(images);
  r->image_rows.assign(r->prompt_images.size(), nullptr);
  r->image_ready.assign(r->prompt_images.size(), 0);
  return Status::ok();
}

Status Engine::advance_images() {
  if (!cfg_.vision) return Status::ok();
  VisionEncoder& enc = *cfg_.vision;
  const std::vector<SchedRequest*>& running = scheduler_->running();
  if (encoding_id_ == 0) {  // the first admitted request's first image it waits for
    if (enc.busy()) enc.cancel();  // left under way by an engine that ended before finishing it
    for (SchedRequest* sr : running) {
      auto* r = static_cast<Request*>(sr);
      for (size_t k = 0; k < r->images.size() && encoding_id_ == 0; ++k) {
        if (r->image_ready[k] || r->images[k].second <= r->num_computed) continue;
        if (r->image_rows[k]) {  // encoded before (a fork's, or before a preemption)
          r->image_ready[k] = 1;
          continue;
        }
        CACHET_RETURN_IF_ERROR(enc.begin(*r->prompt_images[k].pixels));
        encoding_id_ = r->id;
        encoding_image_ = k;
      }
      if (encoding_id_ != 0) break;
    }
    if (encoding_id_ == 0) return Status::ok();
  }
  // Whether anything else can run this step: a request with tokens to compute that no unencoded image holds up.
  bool others = scheduler_->n_waiting() > 0;
  for (size_t i = 0; i < running.size() && !others; ++i) {
    const SchedRequest* r = running[i];
    const int left = static_cast<int>(r->tokens.size()) - r->num_computed;
    others = r->id != encoding_id_ && left > 0 && Scheduler::fit_images(r, left) > 0;
  }
  const int per_step = cfg_.encoder_layers_per_step;
  enc.advance(others && per_step > 0 ? per_step : enc.layers_left());
  if (enc.layers_left() > 0) return Status::ok();
  auto* r = requests_.at(encoding_id_).get();
  const VisionConfig& vc = enc.config();
  const auto [begin, end] = r->images[encoding_image_];
  auto rows = std::make_shared<std::vector<float>>(static_cast<size_t>((end - begin) * vc.row_width()));
  CACHET_RETURN_IF_ERROR(enc.finish(rows->data()));
  r->image_rows[encoding_image_] = std::move(rows);
  r->image_ready[encoding_image_] = 1;
  ++images_encoded_;
  encoding_id_ = 0;
  return Status::ok();
}

Status Engine::add_image_rows(Request* r, int from, int n, int first, ForwardBatch* b) {
  const VisionConfig& vc = cfg_.vision->config();
  const int64_t D = vc.row_width();
  if (vc.mrope) {  // every token of the request: its place among the images (the text after one too)
    b->rope_pos.reserve(static_cast<size_t>(3 * b->n_tokens()));
    for (int t = static_cast<int>(b->rope_pos.size() / 3); t < first; ++t)
      b->rope_pos.insert(b->rope_pos.end(), 3, b->positions[t]);
    b->rope_pos.resize(static_cast<size_t>(3 * first));
    for (int pos = from; pos < from + n; ++pos) {
      int32_t p3[3];
      mrope_position(r->prompt_images, pos, p3);
      b->rope_pos.insert(b->rope_pos.end(), p3, p3 + 3);
    }
  }
  for (size_t k = 0; k < r->images.size(); ++k) {
    const auto [begin, end] = r->images[k];
    const int lo = std::max(begin, from), hi = std::min(end, from + n);
    if (lo >= hi) continue;
    // The scheduler runs an image whole, once encoded (Scheduler::fit_images), and takes no cached prefix ending
    // inside one.
    CACHET_CHECK(lo == begin && hi == end && r->image_rows[k]);
    const int row0 = static_cast<int>(b->input_embd.size() / static_cast<size_t>(D));
    b->input_embd.insert(b->input_embd.end(), r->image_rows[k]->begin(), r->image_rows[k]->end());
    b->embd_row.resize(static_cast<size_t>(b->n_tokens()), -1);
    if (vc.bidirectional) b->attn_end.resize(static_cast<size_t>(b->n_tokens()), -1);
    for (int pos = begin; pos < end; ++pos) {
      const size_t t = static_cast<size_t>(first + pos - from);
      b->embd_row[t] = row0 + pos - begin;
      b->token_ids[t] = 0;  // the model reads the row; the placeholder id keys only the prefix cache
      if (vc.bidirectional) b->attn_end[t] = end - 1;
    }
  }
  return Status::ok();
}

}  // namespace cachet
