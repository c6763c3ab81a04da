// Images and the vision encoder without a language model: decoding (the libraries behind cachet's limits),
// Pillow's resize (expected bytes made by Pillow 13.0), and the encoder's invariants (threads, refusals).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "tests/test_util.h"
#include "vision/image.h"
#include "vision/prompt_image.h"
#include "vision/resize.h"
#include "vision/vision_encoder.h"

namespace cachet {
namespace {

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string seed_image(const std::string& name) { return std::string(CACHET_SOURCE_DIR) + "/fuzz/corpus/image/" + name; }

const std::vector<uint8_t> kSrc = {
    21, 60, 204, 148, 24, 110, 122, 40, 187, 28, 99, 131, 109, 149, 188, 243, 72, 165, 177, 74, 0, 248, 76, 80,
    227, 149, 120, 197, 7, 180, 95, 23, 168, 237, 52, 160, 76, 189, 184, 55, 211, 167, 174, 209, 109, 193, 224,
    26, 216, 100, 122, 37, 178, 74, 222, 70, 143, 101, 156, 50, 45, 190, 191, 144, 234, 52, 216, 43, 245, 159,
    154, 247, 200, 201, 13, 94, 21, 49, 54, 218, 32, 75, 125, 216, 246, 180, 54, 138, 180, 13, 173, 93, 150,
    170, 170, 133, 141, 50, 126, 31, 122, 136, 197, 100, 4};
const std::vector<uint8_t> kBilinear3x2 = {
    176, 101, 125, 131, 84, 145, 130, 138, 138, 185, 154, 113, 152, 128, 108, 94, 132, 104};
const std::vector<uint8_t> kBilinear11x9 = {
    21, 60, 204, 79, 44, 161, 146, 25, 117, 129, 36, 166, 88, 61, 167, 28, 99, 131, 80, 131, 167, 146, 128, 182,
    231, 79, 167, 207, 73, 75, 177, 74, 0, 97, 65, 163, 132, 66, 140, 172, 62, 120, 154, 39, 165, 112, 45, 170,
    50, 74, 143, 115, 101, 166, 162, 115, 177, 184, 112, 172, 160, 116, 108, 136, 120, 56, 223, 74, 94, 220,
    102, 105, 215, 124, 124, 197, 45, 164, 152, 18, 175, 88, 31, 164, 173, 51, 163, 188, 93, 169, 107, 166, 180,
    81, 187, 164, 69, 196, 148, 215, 135, 93, 214, 157, 86, 211, 170, 85, 207, 85, 134, 156, 64, 144, 69, 92,
    126, 172, 71, 143, 191, 91, 145, 100, 164, 127, 67, 189, 154, 51, 202, 178, 174, 209, 109, 183, 216, 71,
    195, 213, 35, 210, 134, 96, 151, 128, 105, 37, 178, 74, 155, 109, 118, 189, 93, 118, 112, 148, 58, 70, 175,
    127, 45, 190, 191, 157, 223, 77, 180, 178, 109, 204, 124, 152, 191, 128, 179, 164, 152, 137, 128, 191, 40,
    143, 96, 72, 130, 83, 77, 82, 177, 45, 67, 171, 130, 62, 154, 205, 155, 228, 52, 179, 151, 128, 203, 66,
    221, 174, 123, 231, 174, 165, 160, 197, 198, 26, 135, 87, 46, 86, 74, 53, 56, 191, 45, 71, 161, 124, 89,
    122, 192, 212, 198, 53, 190, 169, 70, 164, 132, 98, 167, 119, 157, 173, 138, 150, 180, 180, 93, 146, 91, 98,
    102, 72, 101, 47, 143, 101, 103, 129, 87, 156, 108, 75, 246, 180, 54, 197, 180, 35, 141, 172, 25, 163, 117,
    113, 172, 121, 144, 170, 170, 133, 152, 94, 129, 111, 70, 129, 41, 115, 135, 122, 110, 64, 197, 100, 4};
const std::vector<uint8_t> kBicubic3x2 = {
    173, 98, 125, 132, 76, 150, 130, 141, 138, 189, 165, 109, 155, 124, 109, 88, 132, 100};
const std::vector<uint8_t> kBicubic11x9 = {
    0, 62, 222, 61, 38, 167, 146, 13, 110, 132, 30, 171, 79, 64, 171, 23, 105, 128, 57, 150, 169, 142, 139, 193,
    250, 69, 172, 224, 58, 58, 182, 63, 0, 80, 60, 173, 123, 60, 143, 173, 54, 118, 158, 31, 172, 104, 39, 177,
    48, 73, 144, 105, 109, 167, 165, 121, 185, 196, 106, 180, 168, 109, 98, 140, 113, 45, 234, 64, 86, 231, 104,
    99, 221, 131, 128, 205, 36, 171, 150, 0, 183, 92, 22, 169, 188, 38, 162, 206, 89, 169, 98, 173, 188, 67,
    199, 169, 64, 203, 152, 234, 128, 88, 227, 169, 75, 216, 193, 72, 225, 77, 130, 156, 45, 148, 66, 83, 133,
    192, 58, 150, 222, 81, 150, 90, 170, 128, 47, 206, 162, 38, 218, 191, 173, 208, 115, 181, 222, 69, 196, 217,
    29, 224, 123, 101, 150, 121, 110, 37, 178, 74, 162, 103, 125, 209, 81, 123, 111, 149, 50, 62, 180, 128, 41,
    192, 201, 142, 242, 72, 174, 184, 111, 211, 112, 167, 195, 127, 194, 163, 169, 140, 129, 202, 26, 142, 86,
    61, 132, 66, 69, 82, 188, 21, 60, 179, 137, 51, 150, 235, 146, 243, 36, 179, 149, 127, 210, 45, 245, 168,
    119, 251, 174, 183, 170, 205, 200, 20, 135, 68, 31, 74, 54, 46, 51, 206, 34, 69, 169, 133, 88, 113, 212,
    221, 200, 49, 193, 173, 60, 158, 132, 91, 163, 110, 162, 176, 138, 161, 184, 179, 98, 151, 81, 96, 96, 56,
    104, 36, 145, 108, 106, 130, 81, 174, 101, 64, 255, 175, 59, 201, 188, 22, 130, 186, 0, 161, 106, 108, 176,
    111, 154, 168, 167, 143, 161, 90, 135, 112, 58, 138, 29, 111, 149, 127, 108, 52, 220, 96, 0};

TEST(Image, DecodesEachFormatToRgb) {
  for (const char* name : {"rgb.png", "rgba.png", "grey.png", "palette.png", "grey16.png", "rgb.jpg",
                           "progressive.jpg", "grey.jpg", "lossy.webp", "lossless.webp"}) {
    auto img = load_image(seed_image(name));
    ASSERT_TRUE(img.is_ok()) << name << ": " << img.status().message();
    const bool small = std::string(name) == "grey16.png";
    EXPECT_EQ(img->width, small ? 4 : 9) << name;
    EXPECT_EQ(img->height, small ? 5 : 6) << name;
    EXPECT_EQ(img->rgb.size(), static_cast<size_t>(img->width) * img->height * 3) << name;
  }
  // Lossless formats agree with the RGB original; alpha is dropped, grey expands to equal channels.
  const Image rgb = *load_image(seed_image("rgb.png"));
  EXPECT_EQ(load_image(seed_image("rgba.png"))->rgb, rgb.rgb);
  EXPECT_EQ(load_image(seed_image("lossless.webp"))->rgb, rgb.rgb);
  const Image grey = *load_image(seed_image("grey.png"));
  for (size_t i = 0; i < grey.rgb.size(); i += 3) {
    EXPECT_EQ(grey.rgb[i], grey.rgb[i + 1]);
    EXPECT_EQ(grey.rgb[i], grey.rgb[i + 2]);
  }
}

TEST(Image, RefusesDamagedEmptyAndOversizedInput) {
  EXPECT_FALSE(decode_image(nullptr, 0).is_ok());
  const std::string junk = "GIF89a not an image cachet reads";
  auto r = decode_image(reinterpret_cast<const uint8_t*>(junk.data()), junk.size());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("JPEG, PNG and WebP"), std::string::npos) << r.status().message();
  for (const char* name : {"rgb.png", "rgb.jpg", "progressive.jpg", "lossy.webp"}) {
    std::vector<uint8_t> bytes = read_file(seed_image(name));
    for (size_t keep : {size_t{12}, bytes.size() / 2, bytes.size() - 16}) {
      auto t = decode_image(bytes.data(), keep);
      ASSERT_FALSE(t.is_ok()) << name << " cut to " << keep << " bytes";
      EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << name;
    }
  }
  std::vector<uint8_t> png = read_file(seed_image("rgb.png"));
  ImageLimits lim;
  lim.max_pixels = 53;  // 9 x 6 = 54
  auto big = decode_image(png.data(), png.size(), lim);
  ASSERT_FALSE(big.is_ok());
  EXPECT_NE(big.status().message().find("over 53 pixels"), std::string::npos) << big.status().message();
  lim = ImageLimits{};
  lim.max_bytes = 100;
  EXPECT_FALSE(decode_image(png.data(), png.size(), lim).is_ok());
  // A PNG header that claims 100000 x 100000 pixels is refused before anything that size is allocated.
  png[16] = 0, png[17] = 1, png[18] = 0x86, png[19] = 0xA0;
  png[20] = 0, png[21] = 1, png[22] = 0x86, png[23] = 0xA0;
  EXPECT_FALSE(decode_image(png.data(), png.size()).is_ok());
  // A zero-width PNG.
  std::vector<uint8_t> zero = read_file(seed_image("rgb.png"));
  zero[16] = zero[17] = zero[18] = zero[19] = 0;
  EXPECT_FALSE(decode_image(zero.data(), zero.size()).is_ok());
}

TEST(Resize, MatchesPillowBytes) {
  Image src;
  src.width = 7;
  src.height = 5;
  src.rgb = kSrc;
  EXPECT_EQ(resize_image(src, 3, 2, ResizeFilter::kBilinear).rgb, kBilinear3x2);
  EXPECT_EQ(resize_image(src, 11, 9, ResizeFilter::kBilinear).rgb, kBilinear11x9);
  EXPECT_EQ(resize_image(src, 3, 2, ResizeFilter::kBicubic).rgb, kBicubic3x2);
  EXPECT_EQ(resize_image(src, 11, 9, ResizeFilter::kBicubic).rgb, kBicubic11x9);
  EXPECT_EQ(resize_image(src, 7, 5, ResizeFilter::kBicubic).rgb, kSrc);
}

std::string synth_projector(const std::string& name, DType type = DType::kF32) {
  SyntheticSpec s;
  s.arch = "mmproj-gemma3";
  s.n_embd = 64;
  s.n_head = 4;
  s.n_ff = 96;
  s.n_layer = 2;
  s.image_size = 56;
  s.patch_size = 14;
  s.n_merge = 2;
  s.n_proj = 48;
  s.type = type;
  const std::string path = testing::temp_path(name);
  EXPECT_TRUE(write_synthetic_model(s, path).is_ok());
  return path;
}

TEST(VisionEncoder, Gemma3ShapesAndThreadInvariance) {
  const std::string path = synth_projector("vision_gemma3.gguf");
  const Image img = *load_image(seed_image("rgb.jpg"));
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 2, 3}) {
    auto enc = VisionEncoder::load(path, std::make_shared<ThreadPool>(threads));
    ASSERT_TRUE(enc.is_ok()) << enc.status().message();
    const VisionConfig& c = (*enc)->config();
    EXPECT_EQ(c.n_embd_out, 48);
    EXPECT_EQ(c.head_dim, 16);
    auto in = (*enc)->preprocess(img);
    ASSERT_TRUE(in.is_ok());
    ASSERT_EQ(in->width, 56);
    ASSERT_EQ(in->height, 56);
    EXPECT_EQ((*enc)->output_grid(56, 56).rows(), 4);
    ASSERT_EQ(in->data.size(), 3u * 56 * 56);
    for (float v : in->data) ASSERT_TRUE(v >= -1.0f && v <= 1.0f);  // mean 0.5, std 0.5
    std::vector<float> out(static_cast<size_t>(4 * c.n_embd_out));
    ASSERT_TRUE((*enc)->encode(*in, out.data()).is_ok());
    outs.push_back(out);
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
  float mx = 0;
  for (float v : outs[0]) mx = std::max(mx, std::fabs(v));
  EXPECT_GT(mx, 0.1f);  // not a vacuous all-zero output
}

// Every family's encoder in parts (a layer at a time, as the engine spreads it over steps) gives the bits of
// encode(), at 1 and 3 threads; a second image cannot begin while one is under way.
TEST(VisionEncoder, EncodingInPartsIsBitwiseTheWhole) {
  const Image img = *load_image(seed_image("rgb.jpg"));
  for (const char* arch : {"mmproj-gemma3", "mmproj-gemma4", "mmproj-qwen2vl", "mmproj-qwen25vl", "mmproj-qwen3vl"}) {
    SyntheticSpec s;
    s.arch = arch;
    s.n_embd = 32;
    s.n_head = 2;
    s.n_ff = 48;
    s.n_layer = 4;
    s.image_size = 48;
    s.patch_size = 4;
    s.n_merge = std::string(arch) == "mmproj-gemma4" ? 3 : 2;
    s.n_proj = 32;
    const std::string path = testing::temp_path(std::string("vision_parts_") + arch + ".gguf");
    ASSERT_TRUE(write_synthetic_model(s, path).is_ok()) << arch;
    std::vector<std::vector<float>> outs;
    for (int threads : {1, 3}) {
      auto enc = VisionEncoder::load(path, std::make_shared<ThreadPool>(threads));
      ASSERT_TRUE(enc.is_ok()) << arch << ": " << enc.status().message();
      VisionEncoder& e = **enc;
      auto in = e.preprocess(img);
      ASSERT_TRUE(in.is_ok()) << arch;
      const ImageGrid g = e.output_grid(in->width, in->height);
      std::vector<float> whole(static_cast<size_t>(g.rows() * e.config().row_width()));
      std::vector<float> parts(whole.size());
      ASSERT_TRUE(e.encode(*in, whole.data()).is_ok()) << arch;
      ASSERT_TRUE(e.begin(*in).is_ok()) << arch;
      EXPECT_FALSE(e.begin(*in).is_ok()) << arch;  // busy
      for (int64_t left = 4; left > 0; --left) {
        EXPECT_EQ(e.layers_left(), left);
        e.advance(1);
      }
      ASSERT_TRUE(e.finish(parts.data()).is_ok()) << arch;
      EXPECT_FALSE(e.busy());
      EXPECT_EQ(parts, whole) << arch;
      outs.push_back(whole);
    }
    EXPECT_EQ(outs[0], outs[1]) << arch;
  }
}

TEST(VisionEncoder, RefusesWhatItWouldNotApply) {
  const std::string path = synth_projector("vision_refuse.gguf");
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.is_ok());
  auto rewrite = [&](const std::string& out, const std::string& drop_key, const std::string& extra_key) {
    GgufWriter w;
    for (const std::string& k : (*f)->keys())
      if (k != drop_key) w.set_value(k, *(*f)->find(k));
    if (!extra_key.empty()) w.set_u32(extra_key, 1);
    for (const auto& t : (*f)->tensors()) {
      std::vector<int64_t> ne(t.ne.begin(), t.ne.end());
      while (ne.size() > 1 && ne.back() == 1) ne.pop_back();
      EXPECT_TRUE(w.add_tensor(t.name, t.type, ne, std::vector<uint8_t>(t.data, t.data + t.n_bytes)).is_ok());
    }
    EXPECT_TRUE(w.write(testing::temp_path(out)).is_ok());
    return VisionEncoder::load(testing::temp_path(out), std::make_shared<ThreadPool>(1));
  };
  EXPECT_TRUE(rewrite("vision_same.gguf", "", "").is_ok());
  auto unknown = rewrite("vision_unknown.gguf", "", "clip.vision.window_size");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("clip.vision.window_size"), std::string::npos);
  auto no_type = rewrite("vision_notype.gguf", "clip.projector_type", "");
  EXPECT_FALSE(no_type.is_ok());
  SyntheticSpec text;
  text.arch = "gemma3";
  ASSERT_TRUE(write_synthetic_model(text, testing::temp_path("vision_lm.gguf")).is_ok());
  auto lm = VisionEncoder::load(testing::temp_path("vision_lm.gguf"), std::make_shared<ThreadPool>(1));
  ASSERT_FALSE(lm.is_ok());
  EXPECT_NE(lm.status().message().find("--mmproj"), std::string::npos) << lm.status().message();
}

// Rows in place of tokens: they replace the embedding (a row equal to a token's scaled embedding gives that
// token's logits), and a batch that would attend past what it holds, or rows past those given, is refused.
TEST(VisionEncoder, ImageRowsInTheLanguageModelsBatch) {
  SyntheticSpec text;
  text.arch = "gemma3";
  ASSERT_TRUE(write_synthetic_model(text, testing::temp_path("vision_rows_lm.gguf")).is_ok());
  LoadOptions o;
  o.n_threads = 1;
  o.precise = true;
  auto m = load_model(testing::temp_path("vision_rows_lm.gguf"), o);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  Model& model = **m;
  const ModelConfig& c = model.config();
  const std::vector<int32_t> ids = {5, 9, 13, 2};
  const int64_t V = c.n_vocab, d = c.n_embd;
  std::vector<float> want(ids.size() * V), got(ids.size() * V);
  {
    ContiguousKvCache cache(c, 8, KvTypes(KvType::kF32));
    ForwardBatch b = ForwardBatch::single(cache, ids, 0, true);
    ASSERT_TRUE(model.forward(b, want.data()).is_ok());
  }
  ContiguousKvCache cache(c, 8, KvTypes(KvType::kF32));
  ForwardBatch b = ForwardBatch::single(cache, {5, 0, 0, 2}, 0, true);
  b.input_embd.resize(2 * d);
  const TensorView* emb = nullptr;
  for (const TensorView& t : model.tensors())
    if (t.name == "token_embd.weight") emb = &t;
  ASSERT_NE(emb, nullptr);
  for (int r = 0; r < 2; ++r) {
    kernels().dequantize_row(emb->type, emb->row(ids[1 + r]), b.input_embd.data() + r * d, d);
    for (int64_t i = 0; i < d; ++i) b.input_embd[r * d + i] *= static_cast<float>(c.embd_scale);
  }
  b.embd_row = {-1, 0, 1, -1};
  ASSERT_TRUE(model.forward(b, got.data()).is_ok());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f) << i;
  ForwardBatch bad = b;
  bad.attn_end = {-1, 2, 4, -1};  // position 4 is not in the batch
  EXPECT_FALSE(model.forward(bad, got.data()).is_ok());
  bad.attn_end = {-1, 2, 2, -1};
  EXPECT_TRUE(model.forward(bad, got.data()).is_ok());
  // Two-way: the first row now sees the second, so its logits move; the rows after stay causal.
  EXPECT_GT(std::fabs(got[1 * V] - want[1 * V]) + std::fabs(got[1 * V + 1] - want[1 * V + 1]), 1e-4f);
  bad = b;
  bad.embd_row = {-1, 0, 2, -1};  // only two rows given
  EXPECT_FALSE(model.forward(bad, got.data()).is_ok());
}

// Qwen-VL's M-RoPE positions without a model: two images in a prompt, a 4 x 2 grid at 2 and a 3 x 3 one after
// text. Each gives back its rows but its longer side: the text after the first continues at 2 + 4.
TEST(PromptImage, MropePositionsFollowTheGrids) {
  std::vector<PromptImage> ims(2);
  ims[0].pos = 2;
  ims[0].grid = {4, 2};
  ims[1].pos = 12;
  ims[1].grid = {3, 3};
  auto at = [&](int pos) {
    int32_t p[3];
    mrope_position(ims, pos, p);
    return std::vector<int32_t>(p, p + 3);
  };
  EXPECT_EQ(at(0), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(at(1), (std::vector<int32_t>{1, 1, 1}));
  EXPECT_EQ(at(2), (std::vector<int32_t>{2, 2, 2}));   // row 0, column 0
  EXPECT_EQ(at(5), (std::vector<int32_t>{2, 2, 5}));   // row 0, column 3
  EXPECT_EQ(at(7), (std::vector<int32_t>{2, 3, 3}));   // row 1, column 1
  EXPECT_EQ(at(10), (std::vector<int32_t>{6, 6, 6}));  // the text after it: 2 + max(4, 2)
  EXPECT_EQ(at(11), (std::vector<int32_t>{7, 7, 7}));
  EXPECT_EQ(at(12), (std::vector<int32_t>{8, 8, 8}));  // the second image starts where its first row would be
  EXPECT_EQ(at(20), (std::vector<int32_t>{8, 10, 10}));
  EXPECT_EQ(at(21), (std::vector<int32_t>{11, 11, 11}));  // 8 + 3
  EXPECT_EQ(at(100), (std::vector<int32_t>{90, 90, 90}));  // 4 + 6 positions given back
}

}  // namespace
}  // namespace cachet
