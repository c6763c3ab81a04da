// A vision encoder read from a projector file (`mmproj-*.gguf`, as llama.cpp's converter writes them: `clip.*`
// metadata, `v.*` and `mm.*` tensors): it turns an image into the rows the language model reads in place of the
// image's placeholder tokens. Families so far: gemma3 (SigLIP, pooled 4x4, RMS-normed and projected).
// Which parts run is decided by the projector type and the weights present; a key or tensor the loader does not
// apply refuses the file, as for language models (model/arch_reader.h).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "cachet/status.h"
#include "model/tensor.h"
#include "vision/image.h"
#include "vision/resize.h"

namespace cachet {

class GgufFile;

enum class ProjectorType { kGemma3 };

struct VisionConfig {
  ProjectorType projector = ProjectorType::kGemma3;
  std::string projector_name;           // as the file names it ("gemma3")
  int64_t image_size = 0;               // the square side images are resized to
  int64_t patch_size = 0;
  int64_t n_embd = 0;                   // the ViT's width
  int64_t n_ff = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t head_dim = 0;
  int64_t n_embd_out = 0;               // the language model's width: what each output row is
  int64_t n_merge = 1;                  // gemma3: patches pooled n_merge x n_merge into one output row
  float eps = 1e-6f;
  std::array<float, 3> mean{0.5f, 0.5f, 0.5f}, std{0.5f, 0.5f, 0.5f};
  ResizeFilter resize = ResizeFilter::kBilinear;
  // Whether the language model attends both ways among one image's rows (Gemma 3), or causally as among text.
  bool bidirectional = false;

  int64_t patches_per_side() const { return image_size / patch_size; }
  int64_t n_patches() const { return patches_per_side() * patches_per_side(); }
  // Rows an image becomes (the placeholder tokens it takes in the prompt).
  int64_t n_output_tokens() const { return n_patches() / (n_merge * n_merge); }
};

struct VitLayerWeights {
  TensorView ln1_w, ln1_b, ln2_w, ln2_b;  // LayerNorms before attention and before the FFN
  TensorView wq, bq, wk, bk, wv, bv, wo, bo;
  TensorView w_up, b_up, w_down, b_down;
};

struct VisionWeights {
  TensorView patch_embd;   // as a matmul weight: [3 * patch * patch, n_embd] (channel, row, column)
  TensorView patch_bias;   // [n_embd]
  TensorView pos_embd;     // [n_embd, n_patches]
  TensorView post_ln_w, post_ln_b;
  std::vector<VitLayerWeights> layers;
  TensorView soft_emb_norm;  // gemma3: [n_embd], the RMSNorm before the projection (the file stores 1 + w)
  TensorView input_proj;     // gemma3: as a matmul weight [n_embd, n_embd_out] (the file stores it transposed)
};

class VisionEncoder {
 public:
  // Opens and validates a projector file. The pool runs the encoder's matmuls (the model's own, when served).
  static Result<std::unique_ptr<VisionEncoder>> load(const std::string& path, std::shared_ptr<ThreadPool> pool);
  ~VisionEncoder();

  const VisionConfig& config() const { return cfg_; }
  const GgufFile& file() const { return *file_; }

  // The image as the encoder reads it: resized to image_size square (Pillow's arithmetic, the model's filter),
  // scaled to [0, 1] and normalised per channel: [3][image_size][image_size], channel-major.
  std::vector<float> preprocess(const Image& img) const;

  // Embeddings of a preprocessed image: out is [n_output_tokens, n_embd_out]. Bitwise the same whatever the
  // pool's thread count.
  Status encode(const float* pixels, float* out);

  // Bytes of the encoder's working buffers at their largest so far (its weights are the mapped file).
  size_t scratch_bytes() const;

 private:
  VisionEncoder() = default;
  void layer_norm_rows(const float* x, const TensorView& w, const TensorView& b, float* y, int64_t n_rows);

  VisionConfig cfg_;
  VisionWeights w_;
  std::unique_ptr<GgufFile> file_;
  std::shared_ptr<ThreadPool> pool_;
  std::vector<AlignedBuffer<float>> owned_;  // f32 copies of vectors and the transposed projection
  AlignedBuffer<float> patches_, x_, xn_, q_, k_, v_, attn_, proj_, up_, ones_;
};

}  // namespace cachet
