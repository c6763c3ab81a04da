// Images in the engine: the scheduler runs an image's rows in one step and never resumes from a cached prefix
// that ends inside one (no model); the engine encodes an image once, reuses its K/V from the prefix cache when
// the same picture comes again (same ids and logits as with the cache off), keeps them apart when another
// picture comes, and gives the same logits whatever the chunking or the rest of the batch.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "tests/test_util.h"
#include "vision/prompt_image.h"
#include "vision/vision_encoder.h"

namespace cachet {
namespace {

std::string seed_image(const std::string& name) { return std::string(CACHET_SOURCE_DIR) + "/fuzz/corpus/image/" + name; }

SchedRequest req(RequestId id, std::vector<int32_t> tokens, std::pair<int, int> image) {
  SchedRequest r;
  r.id = id;
  r.tokens = std::move(tokens);
  r.n_prompt = static_cast<int>(r.tokens.size());
  r.images = {image};
  return r;
}

TEST(ImageScheduling, AnImageRunsWholeAndIsNeverResumedFromItsMiddle) {
  SchedulerConfig c;
  c.block_size = 16;
  c.n_blocks = 64;
  c.prefill_chunk = 16;
  c.max_batch_tokens = 16;
  Scheduler s(c);
  std::vector<int32_t> t(60);
  for (int i = 0; i < 60; ++i) t[static_cast<size_t>(i)] = i < 10 || i >= 40 ? i : -1 - i;
  SchedRequest a = req(1, t, {10, 40});
  s.add(&a);
  std::vector<int> steps;
  while (a.num_computed < 60) {
    auto w = s.schedule();
    ASSERT_EQ(w.size(), 1u);
    steps.push_back(w[0].n);
    s.computed(w);
  }
  // 10 text tokens, the 30 rows at once (past the 16-token budget), then the text in chunks.
  EXPECT_EQ(steps, (std::vector<int>{10, 30, 16, 4}));
  s.finish(&a);  // the tree now holds blocks [0, 48)

  SchedRequest same = req(2, t, {10, 40});
  s.add(&same);
  auto w = s.schedule();
  EXPECT_EQ(same.cached_tokens, 48);  // past the image's end: reused
  EXPECT_EQ(w[0].n, 12);
  s.computed(w);
  s.finish(&same);

  // Another request whose ids agree with the tree up to position 32, inside its image (a hash collision, or a
  // request that ended there): the match is cut back before the image, which then runs whole.
  std::vector<int32_t> u = t;
  for (int i = 32; i < 60; ++i) u[static_cast<size_t>(i)] = 1000 + i;
  for (int i = 32; i < 40; ++i) u[static_cast<size_t>(i)] = -5000 - i;
  SchedRequest cut = req(3, u, {10, 40});
  s.add(&cut);
  w = s.schedule();
  EXPECT_EQ(cut.cached_tokens, 0);
  EXPECT_EQ(w[0].n, 10);
  s.computed(w);
  w = s.schedule();
  EXPECT_EQ(w[0].n, 30);
  s.computed(w);
  s.finish(&cut);
  EXPECT_EQ(s.check(), "");
}

// An image whose encoder has not finished holds its request just before it: the text before it runs, then
// nothing of the request until its rows are ready, then the rows whole.
TEST(ImageScheduling, ARequestWaitsAtAnImageUntilItIsEncoded) {
  SchedulerConfig c;
  c.block_size = 16;
  c.n_blocks = 64;
  c.prefill_chunk = 64;
  c.max_batch_tokens = 64;
  Scheduler s(c);
  std::vector<int32_t> t(60);
  for (int i = 0; i < 60; ++i) t[static_cast<size_t>(i)] = i < 10 || i >= 40 ? i : -1 - i;
  SchedRequest a = req(1, t, {10, 40});
  a.image_ready = {0};
  SchedRequest b = req(2, std::vector<int32_t>{1, 2, 3}, {0, 0});
  b.images.clear();
  s.add(&a);
  s.add(&b);
  auto w = s.schedule();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].n, 10);  // up to the image
  EXPECT_EQ(w[1].n, 3);
  s.computed(w);
  b.tokens.push_back(4);  // b decodes on while a waits
  w = s.schedule();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].r, &b);
  s.computed(w);
  a.image_ready = {1};
  b.tokens.push_back(5);
  w = s.schedule();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].n, 50);  // the rows and the text after them
  s.computed(w);
  s.finish(&a);
  s.finish(&b);
  EXPECT_EQ(s.check(), "");

  // A prompt that opens with an image not yet encoded: admitted with nothing to run.
  std::vector<int32_t> u(60);
  for (int i = 0; i < 60; ++i) u[static_cast<size_t>(i)] = i < 30 ? -100 - i : 500 + i;
  SchedRequest d = req(3, u, {0, 30});
  d.image_ready = {0};
  s.add(&d);
  EXPECT_TRUE(s.schedule().empty());
  EXPECT_EQ(s.n_running(), 1);
  d.image_ready = {1};
  w = s.schedule();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].n, 60);
  s.computed(w);
  s.finish(&d);
  EXPECT_EQ(s.check(), "");
}

struct Pair {
  std::unique_ptr<Model> lm;
  std::unique_ptr<VisionEncoder> enc;
};

// Gemma 3's pair, or Qwen3-VL's (qwen): its projector in 4 px patches merged 2 x 2, so the 9 x 6 seed images
// grow to its 64-row minimum (80 x 56 px: a 10 x 7 grid).
Pair load_pair(bool qwen = false) {
  SyntheticSpec text;
  text.arch = qwen ? "qwen3vl" : "gemma3";
  text.n_embd = 64;
  text.n_head = 4;
  text.n_head_kv = 2;
  text.n_layer = 2;
  text.n_ff = 96;
  const std::string lm_path = testing::temp_path(qwen ? "engine_images_lm_qwen.gguf" : "engine_images_lm.gguf");
  EXPECT_TRUE(write_synthetic_model(text, lm_path).is_ok());
  SyntheticSpec p;
  p.arch = qwen ? "mmproj-qwen3vl" : "mmproj-gemma3";
  p.n_embd = 48;
  p.n_head = 3;
  p.n_ff = 64;
  p.n_layer = 2;
  p.image_size = qwen ? 32 : 112;
  p.patch_size = qwen ? 4 : 14;
  p.n_merge = 2;
  p.n_proj = 64;
  const std::string mm_path = testing::temp_path(qwen ? "engine_images_mmproj_qwen.gguf" : "engine_images_mmproj.gguf");
  EXPECT_TRUE(write_synthetic_model(p, mm_path).is_ok());
  Pair out;
  auto m = load_model(lm_path, {2});
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  out.lm = std::move(*m);
  auto e = VisionEncoder::load(mm_path, out.lm->shared_pool());
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  out.enc = std::move(*e);
  return out;
}

PromptImage image_at(VisionEncoder& enc, const std::string& file, int pos) {
  PromptImage im;
  im.pos = pos;
  im.pixels = std::make_shared<const EncoderInput>(*enc.preprocess(*load_image(seed_image(file))));
  im.grid = enc.output_grid(im.pixels->width, im.pixels->height);
  im.hash = hash_pixels(*im.pixels);
  return im;
}

struct Out {
  std::vector<int32_t> ids;
  std::vector<float> first_logits;
  int cached = 0;
};

// Runs prompts (each with one image at position 3) one after another, or all at once; greedy.
std::vector<Out> run(Engine& e, VisionEncoder& enc, const std::vector<std::string>& images, bool together,
                     const std::vector<int32_t>& extra = {}) {
  std::map<RequestId, Out> outs;
  std::map<RequestId, int> order;
  auto add = [&](const std::string& file, size_t i) {
    const int n_rows = image_at(enc, file, 3).grid.rows();
    std::vector<int32_t> prompt = {2, 7, 11};
    prompt.resize(3 + static_cast<size_t>(n_rows), 0);
    for (int32_t k = 0; k < 20; ++k) prompt.push_back(13 + 7 * k);  // a block past the picture, so it is cached
    SamplingParams p;
    p.max_tokens = 6;
    auto id = e.add_request(prompt, p, {}, false, 1, 0, std::nullopt, {image_at(enc, file, 3)});
    EXPECT_TRUE(id.is_ok()) << id.status().message();
    order[*id] = static_cast<int>(i);
    outs[*id];
    if (!extra.empty()) {
      auto x = e.add_request(extra, p, {}, false);
      EXPECT_TRUE(x.is_ok());
    }
  };
  auto drain = [&] {
    while (e.has_work()) {
      auto ev = e.step();
      EXPECT_TRUE(ev.is_ok()) << ev.status().message();
      if (!ev.is_ok()) return;
      for (const auto& x : *ev) {
        if (!outs.count(x.id)) continue;
        if (x.token) outs[x.id].ids.push_back(*x.token);
        outs[x.id].cached = x.cached_tokens;
      }
    }
  };
  for (size_t i = 0; i < images.size(); ++i) {
    add(images[i], i);
    if (!together) drain();
  }
  drain();
  std::vector<Out> v(images.size());
  for (auto& [id, o] : outs) v[static_cast<size_t>(order[id])] = o;
  return v;
}

EngineConfig engine_cfg(VisionEncoder* enc, bool cache, int chunk, std::map<RequestId, std::vector<float>>* logits) {
  EngineConfig c;
  c.n_blocks = 64;
  c.prefix_cache = cache;
  c.prefill_chunk = chunk;
  c.max_batch_tokens = chunk;
  c.vision = enc;
  c.on_logits = [logits](RequestId id, const float* row, int64_t V) {
    if (!logits->count(id)) (*logits)[id].assign(row, row + V);
  };
  return c;
}

// The same prompts through an engine with the prefix cache off and one with it on (256-token chunks): the same
// ids and the same first rows of logits, bit for bit, and the encoder run once per distinct picture with it on.
struct OffOn {
  std::map<RequestId, std::vector<float>> l_off, l_on;  // first rows of logits, by request (the engines write them)
  std::unique_ptr<Engine> off, on;
  std::vector<Out> a, b;  // cache off, on
  std::vector<float> first_on(int k) const { return std::next(l_on.begin(), k)->second; }
  std::vector<float> first_off(int k) const { return std::next(l_off.begin(), k)->second; }
};
void run_off_on(const Pair& p, const std::vector<std::string>& imgs, OffOn* r) {
  auto off = Engine::create(*p.lm, engine_cfg(p.enc.get(), false, 256, &r->l_off));
  ASSERT_TRUE(off.is_ok()) << off.status().message();
  r->off = std::move(*off);
  r->a = run(*r->off, *p.enc, imgs, false);
  auto on = Engine::create(*p.lm, engine_cfg(p.enc.get(), true, 256, &r->l_on));
  ASSERT_TRUE(on.is_ok()) << on.status().message();
  r->on = std::move(*on);
  r->b = run(*r->on, *p.enc, imgs, false);
  EXPECT_EQ(r->off->counters().images_encoded, static_cast<int64_t>(imgs.size()));
  EXPECT_EQ(r->on->counters().images_encoded,
            static_cast<int64_t>(std::set<std::string>(imgs.begin(), imgs.end()).size()));
  for (size_t i = 0; i < imgs.size(); ++i) {
    EXPECT_EQ(r->a[i].ids, r->b[i].ids) << i;
    ASSERT_EQ(r->a[i].ids.size(), 6u);
  }
  ASSERT_EQ(r->l_off.size(), imgs.size());
  ASSERT_EQ(r->l_on.size(), imgs.size());
  for (int k = 0; k < static_cast<int>(imgs.size()); ++k) EXPECT_EQ(r->first_off(k), r->first_on(k)) << k;  // bitwise
}

TEST(EngineImages, TheSamePictureReusesItsCacheAndChangesNothing) {
  Pair p = load_pair();
  ASSERT_TRUE(p.lm && p.enc);
  EXPECT_EQ(p.enc->output_grid(112, 112).rows(), 16);
  const std::vector<std::string> imgs = {"rgb.png", "rgb.png", "rgb.jpg", "rgb.png"};
  OffOn r;
  ASSERT_NO_FATAL_FAILURE(run_off_on(p, imgs, &r));
  // The second and fourth requests resume past the picture: the encoder ran for two pictures only.
  EXPECT_EQ(r.b[0].cached, 0);
  EXPECT_EQ(r.b[1].cached, 32);
  EXPECT_EQ(r.b[2].cached, 0);  // another picture at the same place: nothing past the first block is shared
  EXPECT_EQ(r.b[3].cached, 32);
  EXPECT_EQ(r.first_on(0), r.first_on(1));
  EXPECT_NE(r.first_on(0), r.first_on(2));  // the picture is seen
  // The model fed directly (one batch: the rows in place, two-way among them; what the logits test checks
  // against llama.cpp): the engine's row of logits, bitwise.
  {
    const ModelConfig& mc = p.lm->config();
    const PromptImage im = image_at(*p.enc, "rgb.png", 3);
    std::vector<int32_t> prompt = {2, 7, 11};
    prompt.resize(19, 0);
    for (int32_t k = 0; k < 20; ++k) prompt.push_back(13 + 7 * k);
    ContiguousKvCache cache(mc, 64, KvTypes(KvType::kF16));
    ForwardBatch fb = ForwardBatch::single(cache, prompt, 0, false);
    fb.want_logits.back() = 1;
    fb.input_embd.resize(static_cast<size_t>(16 * mc.n_embd));
    ASSERT_TRUE(p.enc->encode(*im.pixels, fb.input_embd.data()).is_ok());
    fb.embd_row.assign(prompt.size(), -1);
    fb.attn_end.assign(prompt.size(), -1);
    for (int k = 0; k < 16; ++k) {
      fb.embd_row[static_cast<size_t>(3 + k)] = k;
      fb.attn_end[static_cast<size_t>(3 + k)] = 18;
    }
    std::vector<float> direct(static_cast<size_t>(mc.n_vocab));
    ASSERT_TRUE(p.lm->forward(fb, direct.data()).is_ok());
    EXPECT_EQ(direct, r.first_off(0));
  }

  // 8-token chunks (the 16 rows still run in one step) and another request in every batch: the same logits.
  std::map<RequestId, std::vector<float>> l_chunk;
  auto chunked = Engine::create(*p.lm, engine_cfg(p.enc.get(), true, 8, &l_chunk));
  ASSERT_TRUE(chunked.is_ok());
  const std::vector<Out> c = run(**chunked, *p.enc, imgs, true, {3, 5, 8, 13, 21, 34, 55, 89, 144 % 256});
  for (size_t i = 0; i < imgs.size(); ++i) EXPECT_EQ(c[i].ids, r.a[i].ids) << i;
  std::vector<std::vector<float>> mine;  // the image requests' first rows (every other id is the extra request)
  for (const auto& [id, row] : l_chunk)
    if (id % 2 == 1) mine.push_back(row);
  ASSERT_EQ(mine.size(), 4u);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(mine[static_cast<size_t>(k)], r.first_off(k)) << k;
  EXPECT_EQ((*chunked)->check(), "");
  EXPECT_EQ(r.on->check(), "");
}

// Qwen3-VL: rows placed by M-RoPE (time at the image's start, height and width shifted by the grid; the text
// after the image continues max(grid) positions on), and the deepstack rows added in the first layers. The
// prefix cache reuses a picture's K/V (those positions included) and changes no id or logit.
TEST(EngineImages, QwenVlRowsTakeTheirGridPositionsAndReuseTheCache) {
  Pair p = load_pair(true);
  ASSERT_TRUE(p.lm && p.enc);
  const PromptImage im = image_at(*p.enc, "rgb.png", 3);
  ASSERT_EQ(im.grid.x, 10);
  ASSERT_EQ(im.grid.y, 7);
  const std::vector<std::string> imgs = {"rgb.png", "rgb.png", "rgb.jpg", "rgb.png"};
  OffOn r;
  ASSERT_NO_FATAL_FAILURE(run_off_on(p, imgs, &r));
  EXPECT_EQ(r.b[1].cached, 80);  // 3 + 70 + 20 prompt tokens: the whole blocks past the picture
  EXPECT_EQ(r.b[3].cached, 80);
  EXPECT_NE(r.first_on(0), r.first_on(2));

  // The model fed directly with positions written out here: the engine's row of logits, bitwise.
  const ModelConfig& mc = p.lm->config();
  const int64_t width = p.enc->config().row_width();
  ASSERT_EQ(width, 3 * mc.n_embd);  // two deepstack rows beside each row (2 layers each side)
  std::vector<int32_t> prompt = {2, 7, 11};
  prompt.resize(73, 0);
  for (int32_t k = 0; k < 20; ++k) prompt.push_back(13 + 7 * k);
  ContiguousKvCache cache(mc, 128, KvTypes(KvType::kF16));
  ForwardBatch fb = ForwardBatch::single(cache, prompt, 0, false);
  fb.want_logits.back() = 1;
  fb.input_embd.resize(static_cast<size_t>(70 * width));
  ASSERT_TRUE(p.enc->encode(*im.pixels, fb.input_embd.data()).is_ok());
  fb.embd_row.assign(prompt.size(), -1);
  for (int t = 0; t < static_cast<int>(prompt.size()); ++t) {
    const bool row = t >= 3 && t < 73;
    if (row) fb.embd_row[static_cast<size_t>(t)] = t - 3;
    const int32_t text = t < 3 ? t : t - 70 + 10;  // after the image: 3 + max(10, 7) onwards
    const int32_t pos[3] = {row ? 3 : text, row ? 3 + (t - 3) / 10 : text, row ? 3 + (t - 3) % 10 : text};
    fb.rope_pos.insert(fb.rope_pos.end(), pos, pos + 3);
  }
  std::vector<float> direct(static_cast<size_t>(mc.n_vocab));
  ASSERT_TRUE(p.lm->forward(fb, direct.data()).is_ok());
  EXPECT_EQ(direct, r.first_off(0));
  fb.rope_pos.clear();  // as plain positions: another answer
  ASSERT_TRUE(p.lm->forward(fb, direct.data()).is_ok());
  EXPECT_NE(direct, r.first_off(0));
  EXPECT_EQ(r.on->check(), "");
}

// A long encoding spread over steps: a text request keeps decoding while the image's layers run one a step,
// and every id and logit is the same as with the whole image encoded in one step.
TEST(EngineImages, OtherRequestsDecodeWhileAnImageIsEncoded) {
  Pair p = load_pair();
  ASSERT_TRUE(p.lm && p.enc);
  struct Run {
    std::vector<int32_t> text_ids, image_ids;
    int text_tokens_while_waiting = 0;
    std::vector<float> image_logits;
  };
  auto go = [&](int per_step) {
    Run out;
    std::map<RequestId, std::vector<float>> logits;
    EngineConfig c = engine_cfg(p.enc.get(), true, 256, &logits);
    c.encoder_layers_per_step = per_step;
    auto e = Engine::create(*p.lm, c);
    EXPECT_TRUE(e.is_ok());
    SamplingParams sp;
    sp.max_tokens = 8;
    auto text = (*e)->add_request({2, 9, 4, 17, 5}, sp, {}, false);
    EXPECT_TRUE(text.is_ok());
    EXPECT_TRUE((*e)->step().is_ok());  // the text request's prompt
    std::vector<int32_t> prompt = {2, 7, 11};
    prompt.resize(19, 0);
    for (int32_t k = 0; k < 4; ++k) prompt.push_back(13 + 7 * k);
    sp.max_tokens = 3;
    auto img = (*e)->add_request(prompt, sp, {}, false, 1, 0, std::nullopt, {image_at(*p.enc, "rgb.png", 3)});
    EXPECT_TRUE(img.is_ok());
    while ((*e)->has_work()) {
      auto ev = (*e)->step();
      EXPECT_TRUE(ev.is_ok());
      if (!ev.is_ok()) break;
      for (const auto& x : *ev) {
        if (!x.token) continue;
        if (x.id == *text) {
          out.text_ids.push_back(*x.token);
          if (out.image_ids.empty()) ++out.text_tokens_while_waiting;
        } else {
          out.image_ids.push_back(*x.token);
        }
      }
    }
    out.image_logits = logits[*img];
    EXPECT_EQ((*e)->counters().images_encoded, 1);
    EXPECT_EQ((*e)->check(), "");
    return out;
  };
  const Run split = go(1), whole = go(0);
  EXPECT_EQ(split.text_ids, whole.text_ids);
  EXPECT_EQ(split.image_ids, whole.image_ids);
  EXPECT_EQ(split.image_logits, whole.image_logits);  // bitwise
  ASSERT_EQ(p.enc->config().n_layer, 2);
  // Whole: the image is encoded in the step after its admission; split: its first layer then, the second a
  // step later, while the text request decodes one more token.
  EXPECT_EQ(split.text_tokens_while_waiting, whole.text_tokens_while_waiting + 1);
}

TEST(EngineImages, RefusesImagesItCannotPlace) {
  Pair p = load_pair();
  ASSERT_TRUE(p.lm && p.enc);
  SamplingParams sp;
  sp.max_tokens = 2;
  std::vector<int32_t> prompt(20, 5);
  EngineConfig none;
  none.n_blocks = 16;
  auto e0 = Engine::create(*p.lm, none);
  ASSERT_TRUE(e0.is_ok());
  auto r = (*e0)->add_request(prompt, sp, {}, true, 1, 0, std::nullopt, {image_at(*p.enc, "rgb.png", 2)});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("--mmproj"), std::string::npos) << r.status().message();
  EngineConfig with = none;
  with.vision = p.enc.get();
  auto e = Engine::create(*p.lm, with);
  ASSERT_TRUE(e.is_ok());
  EXPECT_FALSE((*e)->add_request(prompt, sp, {}, true, 1, 0, std::nullopt, {image_at(*p.enc, "rgb.png", 5)}).is_ok());
  EXPECT_FALSE((*e)->add_request(prompt, sp, {}, true, 1, 0, std::nullopt,
                                 {image_at(*p.enc, "rgb.png", 0), image_at(*p.enc, "rgb.png", 3)}).is_ok());
  PromptImage wrong = image_at(*p.enc, "rgb.png", 0);
  wrong.pixels = std::make_shared<const EncoderInput>(EncoderInput{112, 112, std::vector<float>(10, 0.0f)});
  EXPECT_FALSE((*e)->add_request(prompt, sp, {}, true, 1, 0, std::nullopt, {wrong}).is_ok());
  std::vector<int32_t> bad = prompt;
  bad[18] = -3;  // a negative id outside every image
  EXPECT_FALSE((*e)->add_request(bad, sp, {}, true, 1, 0, std::nullopt, {image_at(*p.enc, "rgb.png", 0)}).is_ok());
  EXPECT_TRUE((*e)->add_request(prompt, sp, {}, true, 1, 0, std::nullopt, {image_at(*p.enc, "rgb.png", 4)}).is_ok());
}

}  // namespace
}  // namespace cachet
