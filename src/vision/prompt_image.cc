#include "vision/prompt_image.h"

#include <algorithm>
#include <cstring>

#include "tokenizer/tokenizer.h"
#include "vision/vision_encoder.h"

namespace cachet {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t hash_pixels(const EncoderInput& in) {
  const std::vector<float>& pixels = in.data;
  uint64_t h = mix(pixels.size() + 0x9e3779b97f4a7c15ULL);
  h = mix(h ^ (static_cast<uint64_t>(in.width) << 32 | static_cast<uint32_t>(in.height)));
  const size_t n = pixels.size();
  size_t i = 0;
  for (; i + 1 < n; i += 2) {
    uint64_t w;
    std::memcpy(&w, pixels.data() + i, sizeof w);
    h = mix(h ^ w) + 0x9e3779b97f4a7c15ULL;
  }
  if (i < n) {
    uint32_t w;
    std::memcpy(&w, pixels.data() + i, sizeof w);
    h = mix(h ^ w);
  }
  return h;
}

int32_t image_row_id(uint64_t hash, int row) {
  // 31 bits of the mixed (hash, row): -1 .. -2^31.
  const uint64_t m = mix(hash ^ mix(static_cast<uint64_t>(row) + 1));
  return -1 - static_cast<int32_t>(m & 0x7fffffffULL);
}

void mrope_position(const std::vector<PromptImage>& images, int pos, int32_t out[3]) {
  int shift = 0;  // positions the images before `pos` give back (rows - max side)
  for (const PromptImage& im : images) {
    const int n = im.grid.rows();
    if (pos < im.pos) break;
    if (pos < im.pos + n) {
      const int i = pos - im.pos, t = im.pos - shift;
      out[0] = t;
      out[1] = t + i / im.grid.x;
      out[2] = t + i % im.grid.x;
      return;
    }
    shift += n - std::max(im.grid.x, im.grid.y);
  }
  out[0] = out[1] = out[2] = pos - shift;
}

ImageFraming image_framing(const VisionConfig& c) {
  switch (c.projector) {
    case ProjectorType::kGemma3: return {"\n\n<start_of_image>", "<end_of_image>\n\n"};
    case ProjectorType::kQwen2Vl:
    case ProjectorType::kQwen25Vl:
    case ProjectorType::kQwen3Vl: return {"<|vision_start|>", "<|vision_end|>"};
    case ProjectorType::kGemma4V: return {"<|image>", "<image|>"};
  }
  return {};
}

Result<ImagePrompt> build_image_prompt(const Tokenizer& tok, const VisionEncoder& enc, std::string_view text,
                                       const std::vector<std::string>& images, bool add_special,
                                       const ImageLimits& limits) {
  std::vector<std::string_view> pieces;
  for (size_t at = 0;;) {
    const size_t m = text.find(kImageMarker, at);
    pieces.push_back(text.substr(at, m == std::string_view::npos ? std::string_view::npos : m - at));
    if (m == std::string_view::npos) break;
    at = m + kImageMarker.size();
  }
  if (pieces.size() != images.size() + 1)
    return invalid_argument("the prompt marks " + std::to_string(pieces.size() - 1) + " image(s) with " +
                            std::string(kImageMarker) + " but " + std::to_string(images.size()) + " were given");
  const VisionConfig& vc = enc.config();
  const ImageFraming framing = image_framing(vc);
  const std::vector<int32_t> before = tok.encode(framing.before, false, true);
  const std::vector<int32_t> after = tok.encode(framing.after, false, true);
  ImagePrompt p;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::vector<int32_t> ids = tok.encode(pieces[i], add_special && i == 0, true);
    p.ids.insert(p.ids.end(), ids.begin(), ids.end());
    if (i == images.size()) break;
    const std::string& bytes = images[i];
    auto img = decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), limits);
    if (!img.is_ok()) return Status(img.status().code(), "image " + std::to_string(i) + ": " + img.status().message());
    auto in = enc.preprocess(*img);
    if (!in.is_ok()) return Status(in.status().code(), "image " + std::to_string(i) + ": " + in.status().message());
    auto px = std::make_shared<const EncoderInput>(std::move(*in));
    p.ids.insert(p.ids.end(), before.begin(), before.end());
    PromptImage pi;
    pi.pos = static_cast<int>(p.ids.size());
    pi.hash = hash_pixels(*px);
    pi.grid = enc.output_grid(px->width, px->height);
    pi.pixels = std::move(px);
    for (int r = 0; r < pi.grid.rows(); ++r) p.ids.push_back(image_row_id(pi.hash, r));
    p.images.push_back(std::move(pi));
    p.ids.insert(p.ids.end(), after.begin(), after.end());
  }
  return p;
}

}  // namespace cachet
