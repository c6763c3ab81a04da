// A synthetic projector file (mmproj) as llama.cpp's converter writes Gemma 3's (mmproj-gemma3), Gemma 4's
// (mmproj-gemma4: RMS norms, q/k norms, gated FFN, clamped linears, per-axis position tables) or Qwen3-VL's
// (mmproj-qwen3vl): the ViT's tensors under v.*, the projector's under mm.*, clip.* metadata. Convolution and
// position embeddings in F32 (and Gemma 3's input projection in F16), as the converter forces them; the rest in
// the spec's type. Qwen3-VL's: fused QKV, two temporal patch kernels, deepstack mergers after the layers
// spec.deepstack names.
#include <algorithm>

#include "model/synthetic_parts.h"

namespace cachet {

namespace {

// The metadata every projector carries: its type (under the key given), the ViT's shape, the pixel statistics.
void clip_header(GgufWriter* w, const SyntheticSpec& s, const char* type_key, const std::string& type,
                 std::initializer_list<float> mean, std::initializer_list<float> std) {
  w->set_string("general.architecture", "clip");
  w->set_string("general.name", "cachet synthetic projector");
  w->set_u32("general.alignment", 32);
  w->set_bool("clip.has_vision_encoder", true);
  w->set_string(type_key, type);
  w->set_u32("clip.vision.projection_dim", static_cast<uint32_t>(s.n_proj));
  w->set_u32("clip.vision.image_size", static_cast<uint32_t>(s.image_size));
  w->set_u32("clip.vision.patch_size", static_cast<uint32_t>(s.patch_size));
  w->set_u32("clip.vision.embedding_length", static_cast<uint32_t>(s.n_embd));
  w->set_u32("clip.vision.feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w->set_u32("clip.vision.block_count", static_cast<uint32_t>(s.n_layer));
  w->set_u32("clip.vision.attention.head_count", static_cast<uint32_t>(s.n_head));
  w->set_f32_array("clip.vision.image_mean", std::vector<float>(mean));
  w->set_f32_array("clip.vision.image_std", std::vector<float>(std));
  w->set_f32("clip.vision.attention.layer_norm_epsilon", 1e-6f);
}

// Gemma 4's: no activation flag (GELU by the model's config; llama.cpp reads the flag, so it is written here too),
// mean 0 and std 1 (the model maps pixels to [-1, 1] itself), clamps on some linears tight enough to bind.
Status write_synthetic_gemma4_projector(const SyntheticSpec& s, const std::string& path) {
  GgufWriter w;
  clip_header(&w, s, "clip.vision.projector_type", "gemma4v", {0.0f, 0.0f, 0.0f}, {1.0f, 1.0f, 1.0f});
  w.set_bool("clip.use_gelu", true);
  if (s.n_merge != 3) w.set_u32("clip.vision.projector.scale_factor", static_cast<uint32_t>(s.n_merge));
  RandomTensors add(&w, s.seed);
  const int64_t d = s.n_embd, P = s.patch_size, hd = s.n_embd / s.n_head, table = 1024;
  auto scalar = [&](const std::string& name, float v) { return add(name, DType::kF32, 1, 1, 0.0f, v); };
  CACHET_RETURN_IF_ERROR(add.nd("v.patch_embd.weight", DType::kF32, {P, P, 3, d}, fan_in_limit(3 * P * P), 0.0f));
  CACHET_RETURN_IF_ERROR(add.nd("v.position_embd.weight", DType::kF32, {d, table, 2, 1}, 0.5f, 0.0f));
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "v.blk." + std::to_string(l) + ".";
    for (const char* n : {"ln1", "ln2", "attn_post_norm", "ffn_post_norm"})
      CACHET_RETURN_IF_ERROR(add(p + n + ".weight", DType::kF32, d, 1, 0.2f, 1.0f));
    // Queries and keys RMS-normed and unscaled make random attention very peaked (a rounding in one engine then
    // moves the rows by 1e-3: llama.cpp's own flash and plain paths differ that much at 1.0); norm weights near
    // 0.5 keep the scores in the range a trained model's are.
    CACHET_RETURN_IF_ERROR(add(p + "attn_q_norm.weight", DType::kF32, hd, 1, 0.1f, 0.5f));
    CACHET_RETURN_IF_ERROR(add(p + "attn_k_norm.weight", DType::kF32, hd, 1, 0.1f, 0.5f));
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_out"})
      CACHET_RETURN_IF_ERROR(add(p + m + ".weight", s.type, d, d, fan_in_limit(d), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_gate.weight", s.type, d, s.n_ff, fan_in_limit(d), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_up.weight", s.type, d, s.n_ff, fan_in_limit(d), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_down.weight", s.type, s.n_ff, d, fan_in_limit(s.n_ff), 0.0f));
    CACHET_RETURN_IF_ERROR(scalar(p + "out_scale.weight", 0.9f));
    // The query's input and the FFN's output clamped (RMS-normed inputs reach past 1.5; FFN outputs past 0.3).
    CACHET_RETURN_IF_ERROR(scalar(p + "attn_q.input_min", -1.5f));
    CACHET_RETURN_IF_ERROR(scalar(p + "attn_q.input_max", 1.5f));
    CACHET_RETURN_IF_ERROR(scalar(p + "ffn_down.output_min", -0.3f));
    CACHET_RETURN_IF_ERROR(scalar(p + "ffn_down.output_max", 0.3f));
  }
  CACHET_RETURN_IF_ERROR(add("v.std_bias", DType::kF32, d, 1, 0.1f, 0.0f));
  CACHET_RETURN_IF_ERROR(add("v.std_scale", DType::kF32, d, 1, 0.2f, 1.0f));
  // Rows about as large as a synthetic Gemma 4's scaled token embeddings (sqrt(width) times rows of RMS ~0.6),
  // as a trained projector's match its model's: unit rows among text 5x larger make a random deep model amplify
  // every rounding in them.
  CACHET_RETURN_IF_ERROR(add("mm.input_projection.weight", DType::kF16, d, s.n_proj, 5.0f * fan_in_limit(d), 0.0f));
  CACHET_RETURN_IF_ERROR(scalar("mm.input_projection.input_min", -2.0f));
  CACHET_RETURN_IF_ERROR(scalar("mm.input_projection.input_max", 2.0f));
  return w.write(path);
}

// Qwen2-VL's (LayerNorm, GELU-quick FFN) or Qwen2.5-VL's (RMSNorm, gated SiLU FFN, window attention in all
// but every 2nd layer, windows of 112 px as the model's, the key unwritten as the converter leaves it): two
// temporal patch kernels, no position embeddings, Q, K and V split as the converter splits them.
Status write_synthetic_qwen2vl_projector(const SyntheticSpec& s, const std::string& path) {
  const bool v25 = s.arch == "mmproj-qwen25vl";
  GgufWriter w;
  clip_header(&w, s, "clip.projector_type", v25 ? "qwen2.5vl_merger" : "qwen2vl_merger", {0.48145466f, 0.4578275f, 0.40821073f}, {0.26862954f, 0.26130258f, 0.27577711f});
  w.set_u32("clip.vision.spatial_merge_size", static_cast<uint32_t>(s.n_merge));
  if (v25) {
    w.set_bool("clip.use_silu", true);
    w.set_u32("clip.vision.n_wa_pattern", 2);
  }
  RandomTensors add(&w, s.seed);
  const int64_t d = s.n_embd, P = s.patch_size, wide = d * s.n_merge * s.n_merge;
  for (const char* k : {"v.patch_embd.weight", "v.patch_embd.weight.1"})
    CACHET_RETURN_IF_ERROR(add.nd(k, DType::kF32, {P, P, 3, d}, fan_in_limit(3 * P * P), 0.0f));
  auto norm = [&](const std::string& n, int64_t len) -> Status {
    CACHET_RETURN_IF_ERROR(add(n + ".weight", DType::kF32, len, 1, 0.2f, 1.0f));
    return v25 ? Status::ok() : add(n + ".bias", DType::kF32, len, 1, 0.1f, 0.0f);
  };
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "v.blk." + std::to_string(l) + ".";
    CACHET_RETURN_IF_ERROR(norm(p + "ln1", d));
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
      CACHET_RETURN_IF_ERROR(add(p + m + ".weight", s.type, d, d, fan_in_limit(d), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + m + ".bias", DType::kF32, d, 1, 0.1f, 0.0f));
    }
    CACHET_RETURN_IF_ERROR(norm(p + "ln2", d));
    for (const char* m : {"ffn_gate", "ffn_up"}) {
      if (!v25 && m[4] == 'g') continue;
      CACHET_RETURN_IF_ERROR(add(p + m + ".weight", s.type, d, s.n_ff, fan_in_limit(d), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + m + ".bias", DType::kF32, s.n_ff, 1, 0.1f, 0.0f));
    }
    CACHET_RETURN_IF_ERROR(add(p + "ffn_down.weight", s.type, s.n_ff, d, fan_in_limit(s.n_ff), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_down.bias", DType::kF32, d, 1, 0.1f, 0.0f));
  }
  CACHET_RETURN_IF_ERROR(norm("v.post_ln", d));
  CACHET_RETURN_IF_ERROR(add("mm.0.weight", s.type, wide, wide, fan_in_limit(wide), 0.0f));
  CACHET_RETURN_IF_ERROR(add("mm.0.bias", DType::kF32, wide, 1, 0.1f, 0.0f));
  CACHET_RETURN_IF_ERROR(add("mm.2.weight", s.type, wide, s.n_proj, fan_in_limit(wide), 0.0f));
  CACHET_RETURN_IF_ERROR(add("mm.2.bias", DType::kF32, s.n_proj, 1, 0.1f, 0.0f));
  return w.write(path);
}

}  // namespace

Status write_synthetic_projector(const SyntheticSpec& s, const std::string& path) {
  if (s.image_size <= 0 || s.patch_size <= 0 || s.image_size % s.patch_size != 0)
    return invalid_argument("synthetic projector: the image size must be a whole number of patches");
  const int64_t side = s.image_size / s.patch_size;
  if (s.n_merge <= 0 || side % s.n_merge != 0)
    return invalid_argument("synthetic projector: the pooling must divide the patches per side");
  if (s.n_embd % s.n_head != 0) return invalid_argument("synthetic projector: heads must divide the width");
  const bool qwen = s.arch == "mmproj-qwen3vl";
  if (s.arch == "mmproj-gemma4") return write_synthetic_gemma4_projector(s, path);
  if (s.arch == "mmproj-qwen2vl" || s.arch == "mmproj-qwen25vl") return write_synthetic_qwen2vl_projector(s, path);
  GgufWriter w;
  clip_header(&w, s, "clip.projector_type", qwen ? "qwen3vl_merger" : "gemma3", {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f});
  w.set_bool("clip.use_gelu", true);
  std::vector<bool> deepstack(static_cast<size_t>(s.n_layer), false);
  if (qwen) {
    w.set_u32("clip.vision.spatial_merge_size", static_cast<uint32_t>(s.n_merge));
    // As many deepstack layers as the synthetic qwen3vl language model takes (min(3, its layers)), spread out
    // as Qwen3-VL's (5, 11, 17 of 24).
    const int64_t nds = s.n_deepstack >= 0 ? std::min(s.n_deepstack, s.n_layer) : std::min<int64_t>(3, s.n_layer);
    for (int64_t k = 0; k < nds; ++k) deepstack[static_cast<size_t>((k + 1) * s.n_layer / (nds + 1))] = true;
    if (nds > 0) w.set_bool_array("clip.vision.is_deepstack_layers", deepstack);
  } else if (s.n_merge != 4) {
    w.set_u32("clip.vision.projector.scale_factor", static_cast<uint32_t>(s.n_merge));
  }

  RandomTensors add(&w, s.seed);
  const int64_t d = s.n_embd, P = s.patch_size;
  CACHET_RETURN_IF_ERROR(add.nd("v.patch_embd.weight", DType::kF32, {P, P, 3, d}, fan_in_limit(3 * P * P), 0.0f));
  if (qwen)
    CACHET_RETURN_IF_ERROR(add.nd("v.patch_embd.weight.1", DType::kF32, {P, P, 3, d}, fan_in_limit(3 * P * P), 0.0f));
  CACHET_RETURN_IF_ERROR(add("v.patch_embd.bias", DType::kF32, d, 1, 0.1f, 0.0f));
  CACHET_RETURN_IF_ERROR(add("v.position_embd.weight", DType::kF32, d, side * side, 0.5f, 0.0f));
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "v.blk." + std::to_string(l) + ".";
    CACHET_RETURN_IF_ERROR(add(p + "ln1.weight", DType::kF32, d, 1, 0.2f, 1.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ln1.bias", DType::kF32, d, 1, 0.1f, 0.0f));
    if (qwen) {
      CACHET_RETURN_IF_ERROR(add(p + "attn_qkv.weight", s.type, d, 3 * d, fan_in_limit(d), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_qkv.bias", DType::kF32, 3 * d, 1, 0.1f, 0.0f));
    }
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
      if (qwen && m[5] != 'o') continue;
      CACHET_RETURN_IF_ERROR(add(p + m + ".weight", s.type, d, d, fan_in_limit(d), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + m + ".bias", DType::kF32, d, 1, 0.1f, 0.0f));
    }
    CACHET_RETURN_IF_ERROR(add(p + "ln2.weight", DType::kF32, d, 1, 0.2f, 1.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ln2.bias", DType::kF32, d, 1, 0.1f, 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_up.weight", s.type, d, s.n_ff, fan_in_limit(d), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_up.bias", DType::kF32, s.n_ff, 1, 0.1f, 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_down.weight", s.type, s.n_ff, d, fan_in_limit(s.n_ff), 0.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_down.bias", DType::kF32, d, 1, 0.1f, 0.0f));
  }
  CACHET_RETURN_IF_ERROR(add("v.post_ln.weight", DType::kF32, d, 1, 0.2f, 1.0f));
  CACHET_RETURN_IF_ERROR(add("v.post_ln.bias", DType::kF32, d, 1, 0.1f, 0.0f));
  if (qwen) {
    const int64_t wide = d * s.n_merge * s.n_merge;
    for (int64_t l = 0; l < s.n_layer; ++l) {
      if (!deepstack[l]) continue;
      const std::string p = "v.deepstack." + std::to_string(l) + ".";
      CACHET_RETURN_IF_ERROR(add(p + "norm.weight", DType::kF32, wide, 1, 0.2f, 1.0f));
      CACHET_RETURN_IF_ERROR(add(p + "norm.bias", DType::kF32, wide, 1, 0.1f, 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "fc1.weight", s.type, wide, wide, fan_in_limit(wide), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "fc1.bias", DType::kF32, wide, 1, 0.1f, 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "fc2.weight", s.type, wide, s.n_proj, fan_in_limit(wide), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "fc2.bias", DType::kF32, s.n_proj, 1, 0.1f, 0.0f));
    }
    CACHET_RETURN_IF_ERROR(add("mm.0.weight", s.type, wide, wide, fan_in_limit(wide), 0.0f));
    CACHET_RETURN_IF_ERROR(add("mm.0.bias", DType::kF32, wide, 1, 0.1f, 0.0f));
    CACHET_RETURN_IF_ERROR(add("mm.2.weight", s.type, wide, s.n_proj, fan_in_limit(wide), 0.0f));
    CACHET_RETURN_IF_ERROR(add("mm.2.bias", DType::kF32, s.n_proj, 1, 0.1f, 0.0f));
  } else {
    CACHET_RETURN_IF_ERROR(add("mm.soft_emb_norm.weight", DType::kF32, d, 1, 0.2f, 1.0f));
    CACHET_RETURN_IF_ERROR(add("mm.input_projection.weight", DType::kF16, s.n_proj, d, fan_in_limit(d), 0.0f));
  }
  return w.write(path);
}

}  // namespace cachet
