// A vision encoder read from a projector file (`mmproj-*.gguf`, as llama.cpp's converter writes them: `clip.*`
// metadata, `v.*` and `mm.*` tensors): it turns an image into the rows the language model reads in place of the
// image's placeholder tokens. Families so far: gemma3 (SigLIP, pooled 4x4, RMS-normed and projected) and
// qwen3vl_merger (Qwen3-VL and Qwen3.5: a ViT over the image at its own aspect, 2D rotary positions, 2x2 patches
// merged into one row; Qwen3-VL adds deepstack rows taken from inner layers) and gemma4v (Gemma 4: a ViT with
// RMS norms, per-head q/k norms and 2D rotary halves over the image at its own aspect, average-pooled 3 x 3,
// RMS-normed and projected).
// Which parts run is decided by the projector type and the weights present; a key or tensor the loader does not
// apply refuses the file, as for language models (model/arch_reader.h).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "cachet/status.h"
#include "model/tensor.h"
#include "vision/image.h"
#include "vision/resize.h"
#include "vision/vit_attention.h"

namespace cachet {

class ArchReader;
class GgufFile;

enum class ProjectorType { kGemma3, kQwen3Vl, kGemma4V, kQwen2Vl, kQwen25Vl };

// The ViT's FFN: GELU (tanh form), GELU-quick (x sigmoid(1.702 x): Qwen2-VL) or SiLU; gated where a gate exists.
enum class VitAct { kGelu, kGeluQuick, kSilu };

struct VisionConfig {
  ProjectorType projector = ProjectorType::kGemma3;
  std::string projector_name;           // as the file names it ("gemma3", "qwen3vl_merger")
  // gemma3: the square side images are resized to. qwen3vl: the side its learned position embeddings cover
  // (interpolated to the image's own grid).
  int64_t image_size = 0;
  int64_t patch_size = 0;
  int64_t n_embd = 0;                   // the ViT's width
  int64_t n_ff = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t head_dim = 0;
  int64_t n_embd_out = 0;               // the language model's width: what each output row is
  int64_t n_merge = 1;                  // patches pooled (gemma3) or merged (qwen3vl) n_merge x n_merge into a row
  int64_t n_deepstack = 0;              // qwen3vl: deepstack rows (their layers' features) beside each row
  // qwen3vl: an image is resized, keeping its aspect, to whole merged patches and between these many rows.
  // gemma4v: to the largest whole pooled patches within max_rows rows (its processor's max_soft_tokens).
  int64_t min_rows = 64, max_rows = 4096;
  float rope_theta = 10000.0f;          // gemma4v: its 2D rotary base
  VitAct act = VitAct::kGelu;
  bool rms_norm = false;                // qwen2.5vl: RMS norms (no biases) in the ViT and the merger
  // qwen2.5vl: every n_wa_pattern-th layer attends over the whole image, the others within windows of
  // window_size px (whole merged patches, from the top left; the last ones in a row or column smaller).
  int64_t n_wa_pattern = 0, window_size = 112;
  float eps = 1e-6f;
  std::array<float, 3> mean{0.5f, 0.5f, 0.5f}, std{0.5f, 0.5f, 0.5f};
  ResizeFilter resize = ResizeFilter::kBilinear;
  // Whether the language model attends both ways among one image's rows (Gemma 3; Gemma 4 in its sliding-window
  // layers, where the model allows it), or causally as among text.
  bool bidirectional = false;
  // Whether the language model places an image's rows by M-RoPE (time, height, width) positions (Qwen-VL).
  bool mrope = false;

  int64_t patches_per_side() const { return image_size / patch_size; }
  int64_t n_patches() const { return patches_per_side() * patches_per_side(); }
  // The width of one output row: the language model's input (its width, times 1 + the deepstack rows).
  int64_t row_width() const { return n_embd_out * (1 + n_deepstack); }
};

// A preprocessed image: resized and normalised, channel-major [3][height][width].
struct EncoderInput {
  int width = 0, height = 0;
  std::vector<float> data;
};

// The rows an image becomes, as a grid (row-major: y, then x).
struct ImageGrid {
  int x = 0, y = 0;
  int rows() const { return x * y; }
};

// Gemma 4's clippable linears: the input clamped to [in_lo, in_hi] before the matmul, the output to
// [out_lo, out_hi] after it (a file without the bounds leaves them infinite).
struct LinearClamp {
  float in_lo = -INFINITY, in_hi = INFINITY, out_lo = -INFINITY, out_hi = INFINITY;
  bool clamps_input() const { return in_lo > -INFINITY || in_hi < INFINITY; }
  bool clamps_output() const { return out_lo > -INFINITY || out_hi < INFINITY; }
};

struct VitLayerWeights {
  TensorView ln1_w, ln1_b, ln2_w, ln2_b;  // norms before attention and before the FFN
  TensorView wq, bq, wk, bk, wv, bv, wo, bo;
  TensorView w_up, b_up, w_down, b_down, w_gate, b_gate;  // w_gate: a gated FFN (gemma4v, qwen2.5vl)
  // gemma4v: per-head q/k RMSNorm weights [head_dim], the norms after attention and after the FFN, the gated
  // FFN's gate, the layer's output scale ([1] or [n_embd]), and each linear's clamps.
  TensorView q_norm, k_norm, attn_post_norm, ffn_post_norm, out_scale;
  LinearClamp cq, ck, cv, co, c_up, c_gate, c_down;
};

struct VisionWeights {
  // As a matmul weight: [3 * patch * patch, n_embd] (channel, row, column); qwen3vl's two temporal kernels summed
  // (a still image is both frames).
  TensorView patch_embd;
  TensorView patch_bias;   // [n_embd]
  TensorView pos_embd;     // [n_embd, n_patches]; gemma4v: [n_embd, table, 2], a table per axis (x, then y)
  TensorView post_ln_w, post_ln_b;
  std::vector<VitLayerWeights> layers;
  TensorView soft_emb_norm;  // gemma3: [n_embd], the RMSNorm before the projection (the file stores 1 + w)
  TensorView input_proj;     // gemma3: as a matmul weight [n_embd, n_embd_out] (the file stores it transposed);
                             // gemma4v: as stored, after an RMSNorm without weight
  LinearClamp c_proj;        // gemma4v: input_proj's clamps
  TensorView std_bias, std_scale;  // gemma4v (optional): pooled rows standardised, (x - bias) * scale
  // qwen3vl, qwen2vl: the merger (LayerNorm, qwen2.5vl RMSNorm, is post_ln; then fc 4d -> 4d, GELU, fc 4d -> n_embd_out) and, per deepstack
  // layer, its own merger (LayerNorm over the 4 merged patches, fc, GELU, fc).
  TensorView mm0_w, mm0_b, mm2_w, mm2_b;
  struct Deepstack {
    int64_t layer = 0;
    TensorView norm_w, norm_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };
  std::vector<Deepstack> deepstack;
};

class VisionEncoder {
 public:
  // Opens and validates a projector file. The pool runs the encoder's matmuls (the model's own, when served).
  static Result<std::unique_ptr<VisionEncoder>> load(const std::string& path, std::shared_ptr<ThreadPool> pool);
  ~VisionEncoder();

  const VisionConfig& config() const { return cfg_; }
  const GgufFile& file() const { return *file_; }

  // The size an image is resized to: gemma3 image_size square; qwen3vl its aspect kept, whole merged patches,
  // between min_rows and max_rows rows (Qwen's smart resize). An error for a degenerate aspect (over 200:1).
  Result<ImageGrid> input_size(int width, int height) const;
  // Whether an image of this size is one preprocess() makes (gemma4v: whole pooled patches within the budget;
  // the others: its own input_size).
  bool is_input_size(int width, int height) const;
  // The image as the encoder reads it: resized (Pillow's arithmetic, the model's filter), scaled to [0, 1] and
  // normalised per channel.
  Result<EncoderInput> preprocess(const Image& img) const;
  // The rows an input of this size becomes.
  ImageGrid output_grid(int width, int height) const;

  // Embeddings of a preprocessed image: out is [output_grid().rows(), row_width()]. Bitwise the same whatever
  // the pool's thread count.
  Status encode(const EncoderInput& in, float* out);
  // The same in parts, one image at a time: begin() it (an error while another is under way), advance() it some
  // layers (its embedding and last layers' work go with the first and last), finish() it into its rows. The same
  // bits however its layers are split, so an engine can spread an image's encoder over several steps.
  Status begin(const EncoderInput& in);
  bool busy() const { return job_.active; }
  int64_t layers_left() const { return job_.active ? cfg_.n_layer - job_.next : 0; }
  void advance(int64_t n_layers);
  Status finish(float* out);
  void cancel() { job_.active = false; }

  // Bytes of the encoder's working buffers at their largest so far (its weights are the mapped file).
  size_t scratch_bytes() const;

 private:
  VisionEncoder() = default;
  void layer_norm_rows(const float* x, const TensorView& w, const TensorView& b, float* y, int64_t n_rows,
                       int64_t n = 0);
  // RMSNorm of rows n wide (0: the ViT's width), weights w's (none when w is null or empty).
  void rms_norm_rows(const float* x, const TensorView* w, float* y, int64_t n_rows, int64_t n = 0);
  // The px x py patch rows of x_ averaged m x m (summed row by row, then scaled) into pooled, row-major.
  void avg_pool(int64_t px, int64_t py, float* pooled);
  // y [T, w's outputs] = x [T, w's inputs] w^T, as f32 GEMMs (vision/sgemm.h) over fixed blocks of rows.
  void gemm(const TensorView& w, const float* x, int64_t T, float* y);
  // The patch rows (in `order`: patch y * side_x + x for each row) through the patch convolution into x_.
  void embed_patches(const float* pixels, int width, const std::vector<int32_t>& order);
  // The image under way: its patches, the next layer, each family's tables.
  struct Job {
    bool active = false;
    int64_t T = 0, px = 0, py = 0, next = 0;
    std::vector<float> cos_sin, cs_y;                   // rotary tables (gemma4v: columns, rows)
    std::vector<int64_t> block_at;                      // qwen2vl: the blocks in window order
    std::vector<std::pair<int64_t, int64_t>> windows;   // qwen2vl: each window's rows
    size_t next_ds = 0;                                 // qwen3vl: the next deepstack merger
    std::vector<float> rows;                            // qwen3vl: the output rows, deepstack parts as they come
  };
  // Q, K and V of the normed rows xn_ (with their biases) into q_, k_, v_.
  void qkv(const VitLayerWeights& L, int64_t T);
  // Layer l of a pre-norm ViT (gemma3, qwen3vl) over x_ ([T, n_embd]); cos_sin: a rotary table, or null.
  void vit_layer(int64_t l, const float* cos_sin);
  void begin_gemma3(const EncoderInput& in);
  void end_gemma3(float* out);
  void begin_qwen3vl(const EncoderInput& in);
  void qwen3vl_layer(int64_t l);
  void end_qwen3vl(float* out);
  Status begin_gemma4v(const EncoderInput& in);
  void gemma4v_layer(int64_t l);
  void end_gemma4v(float* out);
  void begin_qwen2vl(const EncoderInput& in);
  void qwen2vl_layer(int64_t l);
  void qwen2vl_norm(const TensorView& w, const TensorView& b, float* x, float* y, int64_t rows);
  void end_qwen2vl(float* out);
  // The merger's order of patches (blocks of n_merge x n_merge row by row, a block's patches row by row), with
  // each patch's row and column.
  void merger_order(int64_t px, int64_t py, std::vector<int32_t>* order, std::vector<int32_t>* ys,
                    std::vector<int32_t>* xs) const;
  // Qwen's 2D rotary table: pair i < hd/4 turns by the row, pair hd/4 + i by the column, both by
  // base^(-4i/hd) (NeoX pairs over the whole head).
  std::vector<float> rope_2d_table(const std::vector<int32_t>& ys, const std::vector<int32_t>& xs) const;
  // gemma4v's own tensors (norms, gate, scales, clamps, standardisation, projection), after the common ones.
  static Status load_gemma4v(ArchReader& r, VisionConfig& c, VisionWeights& w,
                             std::vector<AlignedBuffer<float>>* owned);
  // y = w x as gemm(), the input and output clamped as c says (gemma4v).
  void clamped_gemm(const TensorView& w, const LinearClamp& c, const float* x, int64_t T, float* y);
  // x [n, 4d] -> LayerNorm (if given) -> fc1, GELU (erf) -> fc2 into out rows (stride out_stride).
  void merger(const float* x, int64_t n, const TensorView* nw, const TensorView* nb, const TensorView& w1,
              const TensorView& b1, const TensorView& w2, const TensorView& b2, float* out, int64_t out_stride);

  VisionConfig cfg_;
  VisionWeights w_;
  std::unique_ptr<GgufFile> file_;
  std::shared_ptr<ThreadPool> pool_;
  std::vector<AlignedBuffer<float>> owned_;  // f32 copies of vectors and the transposed projection
  AlignedBuffer<float> patches_, x_, xn_, q_, k_, v_, attn_, proj_, up_, ones_, m_in_, m_mid_, m_out_, gate_, clamp_;
  VitAttention vit_attn_;
  Job job_;
  AlignedBuffer<float> wf_;  // a weight dequantized to f32 for gemm()
};

}  // namespace cachet
