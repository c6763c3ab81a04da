// VisionEncoder::load: a projector file's metadata and tensors, by the names llama.cpp's converter writes.
#include <algorithm>
#include <cmath>

#include "io/gguf.h"
#include "kernels/kernels.h"
#include "model/arch_reader.h"
#include "model/decoder.h"
#include "vision/vision_encoder.h"

namespace cachet {

namespace {

Result<bool> flag(ArchReader& r, const std::string& key, bool fallback) {
  r.consume(key);
  if (!r.has(key)) return fallback;
  return r.file().get_bool("clip." + key);
}

Status three_floats(ArchReader& r, const std::string& key, std::array<float, 3>* out) {
  r.consume(key);
  const GgufValue* v = r.file().find("clip." + key);
  if (!v) return Status::ok();
  if (v->type != GgufType::kArray || !(v->elem_type == GgufType::kF32 || v->elem_type == GgufType::kF64) ||
      v->count != 3)
    return invalid_argument("metadata 'clip." + key + "' must hold three numbers (red, green, blue)");
  for (size_t i = 0; i < 3; ++i) {
    const double x = v->float_at(i);
    if (!std::isfinite(x)) return invalid_argument("metadata 'clip." + key + "' holds a value that is not finite");
    (*out)[i] = static_cast<float>(x);
  }
  return Status::ok();
}

}  // namespace

VisionEncoder::~VisionEncoder() = default;

Result<std::unique_ptr<VisionEncoder>> VisionEncoder::load(const std::string& path, std::shared_ptr<ThreadPool> pool) {
  CACHET_RETURN_IF_ERROR(kernel_choice());
  CACHET_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::open(path));
  CACHET_ASSIGN_OR_RETURN(std::string arch, f->get_string("general.architecture"));
  if (arch != "clip")
    return invalid_argument(path + " is a '" + arch + "' file, not a projector (general.architecture 'clip'); " +
                            "pass the model with -m and its mmproj file with --mmproj");
  std::unique_ptr<VisionEncoder> e(new VisionEncoder());
  ArchReader r(*f, "clip");
  VisionConfig& c = e->cfg_;
  CACHET_ASSIGN_OR_RETURN(bool has_vision, flag(r, "has_vision_encoder", false));
  CACHET_ASSIGN_OR_RETURN(bool has_audio, flag(r, "has_audio_encoder", false));
  if (!has_vision) return unimplemented(path + " has no vision encoder (clip.has_vision_encoder)");
  if (has_audio) {  // images only: the audio encoder beside (Gemma 4's small models) is left unread
    for (const std::string& key : f->keys())
      if (key.rfind("clip.audio.", 0) == 0) r.consume(key.substr(5));
    for (const GgufTensorInfo& t : f->tensors())
      if (t.name.rfind("a.", 0) == 0 || t.name.rfind("mm.a.", 0) == 0) r.tensor(t.name);
  }
  std::string proj;
  if (r.has("vision.projector_type")) {
    CACHET_ASSIGN_OR_RETURN(proj, r.text("vision.projector_type"));
  } else {
    CACHET_ASSIGN_OR_RETURN(proj, r.text("projector_type"));
  }
  r.consume("projector_type");
  c.projector_name = proj;
  if (proj == "gemma3") {
    c.projector = ProjectorType::kGemma3;
  } else if (proj == "qwen3vl_merger") {
    c.projector = ProjectorType::kQwen3Vl;
  } else if (proj == "gemma4v") {
    c.projector = ProjectorType::kGemma4V;
  } else if (proj == "qwen2vl_merger") {
    c.projector = ProjectorType::kQwen2Vl;
  } else if (proj == "qwen2.5vl_merger") {
    c.projector = ProjectorType::kQwen25Vl;
  } else {
    return unimplemented("projector type '" + proj + "' is not one cachet runs yet (gemma3, gemma4v, "
                         "qwen2vl_merger, qwen2.5vl_merger and qwen3vl_merger are)");
  }
  auto positive = [&](const char* key, std::optional<int64_t> fallback) -> Result<int64_t> {
    CACHET_ASSIGN_OR_RETURN(int64_t v, r.dim(key, fallback));
    if (v <= 0 || v > (int64_t{1} << 24)) return invalid_argument(std::string("metadata 'clip.") + key + "' is out of range");
    return v;
  };
  CACHET_ASSIGN_OR_RETURN(c.image_size, positive("vision.image_size", std::nullopt));
  CACHET_ASSIGN_OR_RETURN(c.patch_size, positive("vision.patch_size", std::nullopt));
  CACHET_ASSIGN_OR_RETURN(c.n_embd, positive("vision.embedding_length", std::nullopt));
  CACHET_ASSIGN_OR_RETURN(c.n_ff, positive("vision.feed_forward_length", std::nullopt));
  CACHET_ASSIGN_OR_RETURN(c.n_layer, positive("vision.block_count", std::nullopt));
  CACHET_ASSIGN_OR_RETURN(c.n_head, positive("vision.attention.head_count", std::nullopt));
  CACHET_ASSIGN_OR_RETURN(int64_t n_embd_out, positive("vision.projection_dim", std::nullopt));
  CACHET_ASSIGN_OR_RETURN(double eps, r.real("vision.attention.layer_norm_epsilon", 1e-6));
  if (!(eps > 0.0 && eps < 1.0)) return invalid_argument("metadata 'clip.vision.attention.layer_norm_epsilon' is out of range");
  c.eps = static_cast<float>(eps);
  CACHET_RETURN_IF_ERROR(three_floats(r, "vision.image_mean", &c.mean));
  CACHET_RETURN_IF_ERROR(three_floats(r, "vision.image_std", &c.std));
  for (float s : c.std)
    if (!(s > 0.0f)) return invalid_argument("metadata 'clip.vision.image_std' must be positive");
  CACHET_ASSIGN_OR_RETURN(bool gelu, flag(r, "use_gelu", false));
  CACHET_ASSIGN_OR_RETURN(bool silu, flag(r, "use_silu", false));
  const bool qwen2 = c.projector == ProjectorType::kQwen2Vl || c.projector == ProjectorType::kQwen25Vl;
  if (gelu && silu) return invalid_argument("metadata 'clip.use_gelu' and 'clip.use_silu' are both set");
  // Without a flag llama.cpp's converters mean GELU-quick (Qwen2-VL's quick_gelu); Gemma 4's writes none for
  // its GELU (tanh form, by the model's config).
  c.act = gelu ? VitAct::kGelu : silu ? VitAct::kSilu : VitAct::kGeluQuick;
  if (c.projector == ProjectorType::kGemma4V && !silu) c.act = VitAct::kGelu;
  const bool act_ok = c.projector == ProjectorType::kQwen2Vl ? c.act == VitAct::kGeluQuick
                      : c.projector == ProjectorType::kQwen25Vl ? c.act == VitAct::kSilu
                                                                : c.act == VitAct::kGelu;
  if (!act_ok) return unimplemented("projector '" + proj + "' with this vision FFN activation (clip.use_gelu / "
                                    "use_silu) is not one cachet runs");
  if (c.n_embd % c.n_head != 0) return invalid_argument("the vision width is not a whole number of heads");
  c.head_dim = c.n_embd / c.n_head;
  if (c.image_size % c.patch_size != 0) return invalid_argument("the image size is not a whole number of patches");
  if (c.projector == ProjectorType::kGemma3) {
    CACHET_ASSIGN_OR_RETURN(c.n_merge, positive("vision.projector.scale_factor", 4));
    c.resize = ResizeFilter::kBilinear;
    c.bidirectional = true;
    if (c.patches_per_side() % c.n_merge != 0)
      return invalid_argument("gemma3: the patches per side are not a multiple of the pooling (scale_factor)");
  } else if (c.projector == ProjectorType::kGemma4V) {
    CACHET_ASSIGN_OR_RETURN(c.n_merge, positive("vision.projector.scale_factor", 3));
    if (c.n_merge > 8) return invalid_argument("metadata 'clip.vision.projector.scale_factor' is out of range");
    c.resize = ResizeFilter::kBicubic;
    c.bidirectional = true;
    c.rope_theta = 100.0f;
    c.max_rows = 280;  // the processor's max_soft_tokens
    if (r.has("vision.image_max_pixels")) {
      const double f2 = static_cast<double>(c.patch_size * c.n_merge * c.patch_size * c.n_merge);
      CACHET_ASSIGN_OR_RETURN(int64_t px, positive("vision.image_max_pixels", std::nullopt));
      c.max_rows = std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(px) / f2)));
    }
    if (c.head_dim % 4 != 0) return invalid_argument("gemma4v: the ViT's head width is not a multiple of 4 (2D RoPE)");
  } else {
    CACHET_ASSIGN_OR_RETURN(c.n_merge, positive("vision.spatial_merge_size", 2));
    if (c.n_merge > 8) return invalid_argument("metadata 'clip.vision.spatial_merge_size' is out of range");
    c.resize = ResizeFilter::kBicubic;
    c.mrope = true;
    if (qwen2) {
      c.min_rows = 4;  // Qwen2-VL's and Qwen2.5-VL's processors: 56 x 56 px at the least
      c.rms_norm = c.projector == ProjectorType::kQwen25Vl;
      if (c.projector == ProjectorType::kQwen25Vl) {
        CACHET_ASSIGN_OR_RETURN(c.n_wa_pattern, positive("vision.n_wa_pattern", std::nullopt));
        CACHET_ASSIGN_OR_RETURN(c.window_size, positive("vision.window_size", 112));
      }
    }
    if (c.head_dim % 4 != 0) return invalid_argument("qwen3vl: the ViT's head width is not a multiple of 4 (2D RoPE)");
    const double f2 = static_cast<double>(c.patch_size * c.n_merge * c.patch_size * c.n_merge);
    if (r.has("vision.image_min_pixels")) {
      CACHET_ASSIGN_OR_RETURN(int64_t px, positive("vision.image_min_pixels", std::nullopt));
      c.min_rows = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(px) / f2)));
    }
    if (r.has("vision.image_max_pixels")) {
      CACHET_ASSIGN_OR_RETURN(int64_t px, positive("vision.image_max_pixels", std::nullopt));
      c.max_rows = std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(px) / f2)));
    }
    c.min_rows = std::min(c.min_rows, c.max_rows);
  }
  if (c.n_patches() > 65536) return invalid_argument("the projector's image takes over 65536 patches");
  std::vector<bool> deepstack_layer(static_cast<size_t>(c.n_layer), false);
  r.consume("vision.is_deepstack_layers");
  if (const GgufValue* v = f->find("clip.vision.is_deepstack_layers")) {
    if (c.projector != ProjectorType::kQwen3Vl || v->type != GgufType::kArray ||
        v->elem_type != GgufType::kBool || static_cast<int64_t>(v->count) != c.n_layer)
      return invalid_argument("metadata 'clip.vision.is_deepstack_layers' must hold one bool per layer (qwen3vl)");
    for (int64_t l = 0; l < c.n_layer; ++l) deepstack_layer[l] = v->int_at(l) != 0;
  }

  VisionWeights& w = e->w_;
  const int64_t d = c.n_embd, P = c.patch_size, K = 3 * P * P;
  TensorView pe = r.tensor("v.patch_embd.weight");
  if (!pe.data) return invalid_argument("missing tensor 'v.patch_embd.weight'");
  if (pe.ne[0] != P || pe.ne[1] != P || pe.ne[2] != 3 || pe.ne[3] != d)
    return invalid_argument("tensor 'v.patch_embd.weight' is not the patch convolution [" + std::to_string(P) +
                            ", " + std::to_string(P) + ", 3, " + std::to_string(d) + "]");
  const std::optional<size_t> rb = row_bytes(pe.type, K);
  if (!rb) return unimplemented("tensor 'v.patch_embd.weight' is of a type cachet cannot use for the patch convolution");
  pe.ne = {K, d, 1, 1};
  pe.row_bytes = *rb;
  w.patch_embd = pe;
  CACHET_RETURN_IF_ERROR(check_tensor(w.patch_embd, "v.patch_embd.weight", K, d, -1));
  std::vector<AlignedBuffer<float>>& owned = e->owned_;
  if (c.projector == ProjectorType::kQwen3Vl || qwen2) {
    // Conv3D over two frames, split by the converter into two kernels: a still image is both frames, so the
    // convolution is their sum's.
    TensorView pe1 = r.tensor("v.patch_embd.weight.1");
    if (!pe1.data || pe1.ne != std::array<int64_t, 4>{P, P, 3, d})
      return invalid_argument("qwen3vl: tensor 'v.patch_embd.weight.1' (the second frame's kernel) is missing or "
                              "not [" + std::to_string(P) + ", " + std::to_string(P) + ", 3, " + std::to_string(d) + "]");
    const std::optional<size_t> rb1 = row_bytes(pe1.type, K);
    if (!rb1) return unimplemented("tensor 'v.patch_embd.weight.1' is of a type cachet cannot use");
    AlignedBuffer<float> sum(static_cast<size_t>(K * d));
    std::vector<float> row(static_cast<size_t>(K));
    const Kernels& kern = kernels();
    for (int64_t i = 0; i < d; ++i) {
      kern.dequantize_row(pe.type, pe.data + i * *rb, sum.data() + i * K, K);
      kern.dequantize_row(pe1.type, pe1.data + i * *rb1, row.data(), K);
      for (int64_t j = 0; j < K; ++j) sum[i * K + j] += row[j];
    }
    w.patch_embd.type = DType::kF32;
    w.patch_embd.data = reinterpret_cast<const uint8_t*>(sum.data());
    w.patch_embd.row_bytes = static_cast<size_t>(K) * sizeof(float);
    owned.push_back(std::move(sum));
  }
  w.patch_bias = r.tensor("v.patch_embd.bias");
  w.pos_embd = r.tensor("v.position_embd.weight");
  if (qwen2 && (w.pos_embd.data || w.patch_bias.data))
    return invalid_argument(proj + ": the ViT has no learned position embeddings and no patch bias");
  if (c.projector != ProjectorType::kGemma4V && !qwen2)
    CACHET_RETURN_IF_ERROR(check_tensor(w.pos_embd, "v.position_embd.weight", d, c.n_patches(), -1));
  w.post_ln_w = r.tensor("v.post_ln.weight");
  w.post_ln_b = r.tensor("v.post_ln.bias");
  auto vec = [&](TensorView* t, int64_t n, int64_t layer, const std::string& name, bool required) -> Status {
    if (!t->data) return required ? invalid_argument("missing tensor '" + name + "'") : Status::ok();
    return vector_to_f32(t, n, &owned, layer, name);
  };
  CACHET_RETURN_IF_ERROR(vec(&w.patch_bias, d, -1, "v.patch_embd.bias", false));
  CACHET_RETURN_IF_ERROR(vec(&w.post_ln_w, d, -1, "v.post_ln.weight", false));
  CACHET_RETURN_IF_ERROR(vec(&w.post_ln_b, d, -1, "v.post_ln.bias", false));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    VitLayerWeights L;
    const std::string p = "v.blk." + std::to_string(l) + ".";
    auto get = [&](const std::string& n) { return r.tensor(p + n); };
    L.ln1_w = get("ln1.weight");
    L.ln1_b = get("ln1.bias");
    L.ln2_w = get("ln2.weight");
    L.ln2_b = get("ln2.bias");
    L.wq = get("attn_q.weight");
    L.bq = get("attn_q.bias");
    L.wk = get("attn_k.weight");
    L.bk = get("attn_k.bias");
    L.wv = get("attn_v.weight");
    L.bv = get("attn_v.bias");
    if (TensorView qkv = get("attn_qkv.weight"); qkv.data) {  // Q, K and V as one [d, 3d]: three views of it
      if (L.wq.data || L.wk.data || L.wv.data)
        return invalid_argument(p + "attn_qkv.weight beside separate Q, K, V weights");
      CACHET_RETURN_IF_ERROR(check_tensor(qkv, p + "attn_qkv.weight", d, 3 * d, l));
      TensorView* parts[3] = {&L.wq, &L.wk, &L.wv};
      for (int i = 0; i < 3; ++i) {
        *parts[i] = qkv;
        parts[i]->ne[1] = d;
        parts[i]->data = qkv.data + i * d * qkv.row_bytes;
      }
      if (TensorView b = get("attn_qkv.bias"); b.data) {
        CACHET_RETURN_IF_ERROR(vec(&b, 3 * d, l, p + "attn_qkv.bias", true));
        TensorView* bparts[3] = {&L.bq, &L.bk, &L.bv};
        for (int i = 0; i < 3; ++i) {
          *bparts[i] = b;
          bparts[i]->ne = {d, 1, 1, 1};
          bparts[i]->row_bytes = static_cast<size_t>(d) * sizeof(float);
          bparts[i]->data = b.data + i * d * sizeof(float);
        }
      }
    }
    L.wo = get("attn_out.weight");
    L.bo = get("attn_out.bias");
    L.w_up = get("ffn_up.weight");
    L.b_up = get("ffn_up.bias");
    L.w_down = get("ffn_down.weight");
    L.b_down = get("ffn_down.bias");
    L.w_gate = get("ffn_gate.weight");
    L.b_gate = get("ffn_gate.bias");
    const bool gated = c.projector == ProjectorType::kGemma4V || c.projector == ProjectorType::kQwen25Vl;
    if (gated != static_cast<bool>(L.w_gate.data))
      return invalid_argument(p + "ffn_gate.weight: " + (gated ? "missing (" : "not used by ") + proj + ")");
    if (gated) CACHET_RETURN_IF_ERROR(check_tensor(L.w_gate, p + "ffn_gate.weight", d, c.n_ff, l));
    if (c.rms_norm && (L.ln1_b.data || L.ln2_b.data))
      return invalid_argument(p + "ln1 / ln2 biases beside RMS norms (" + proj + ")");
    // Early conversions stored SigLIP's fc1 / fc2 under each other's names: tell them apart by shape.
    if (L.w_up.data && L.w_down.data && L.w_down.ne[0] == d && L.w_down.ne[1] == c.n_ff && c.n_ff != d) {
      std::swap(L.w_up, L.w_down);
      std::swap(L.b_up, L.b_down);
    }
    for (auto [t, n0, n1, name] : {std::tuple{&L.wq, d, d, "attn_q.weight"}, {&L.wk, d, d, "attn_k.weight"},
                                   {&L.wv, d, d, "attn_v.weight"}, {&L.wo, d, d, "attn_out.weight"},
                                   {&L.w_up, d, c.n_ff, "ffn_up.weight"}, {&L.w_down, c.n_ff, d, "ffn_down.weight"}})
      CACHET_RETURN_IF_ERROR(check_tensor(*t, p + name, n0, n1, l));
    for (auto [t, n, name, req] : {std::tuple{&L.ln1_w, d, "ln1.weight", true}, {&L.ln1_b, d, "ln1.bias", false},
                                   {&L.ln2_w, d, "ln2.weight", true}, {&L.ln2_b, d, "ln2.bias", false},
                                   {&L.bq, d, "attn_q.bias", false}, {&L.bk, d, "attn_k.bias", false},
                                   {&L.bv, d, "attn_v.bias", false}, {&L.bo, d, "attn_out.bias", false},
                                   {&L.b_up, c.n_ff, "ffn_up.bias", false}, {&L.b_down, d, "ffn_down.bias", false},
                                   {&L.b_gate, c.n_ff, "ffn_gate.bias", false}})
      CACHET_RETURN_IF_ERROR(vec(t, n, l, p + name, req));
    w.layers.push_back(std::move(L));
    const std::string dp = "v.deepstack." + std::to_string(l) + ".";
    VisionWeights::Deepstack ds;
    ds.layer = l;
    ds.norm_w = r.tensor(dp + "norm.weight");
    ds.norm_b = r.tensor(dp + "norm.bias");
    ds.fc1_w = r.tensor(dp + "fc1.weight");
    ds.fc1_b = r.tensor(dp + "fc1.bias");
    ds.fc2_w = r.tensor(dp + "fc2.weight");
    ds.fc2_b = r.tensor(dp + "fc2.bias");
    if (!ds.fc1_w.data && !deepstack_layer[l]) continue;
    if (!ds.fc1_w.data || !deepstack_layer[l])
      return invalid_argument("layer " + std::to_string(l) + ": deepstack tensors and clip.vision.is_deepstack_layers "
                              "disagree");
    const int64_t wide = d * c.n_merge * c.n_merge;
    CACHET_RETURN_IF_ERROR(check_tensor(ds.fc1_w, dp + "fc1.weight", wide, wide, l));
    CACHET_RETURN_IF_ERROR(check_tensor(ds.fc2_w, dp + "fc2.weight", wide, n_embd_out, l));
    CACHET_RETURN_IF_ERROR(vec(&ds.norm_w, wide, l, dp + "norm.weight", true));
    CACHET_RETURN_IF_ERROR(vec(&ds.norm_b, wide, l, dp + "norm.bias", true));
    CACHET_RETURN_IF_ERROR(vec(&ds.fc1_b, wide, l, dp + "fc1.bias", false));
    CACHET_RETURN_IF_ERROR(vec(&ds.fc2_b, n_embd_out, l, dp + "fc2.bias", false));
    w.deepstack.push_back(std::move(ds));
  }
  c.n_deepstack = static_cast<int64_t>(w.deepstack.size());
  if (c.projector == ProjectorType::kQwen3Vl || qwen2) {
    const int64_t wide = d * c.n_merge * c.n_merge;
    w.mm0_w = r.tensor("mm.0.weight");
    w.mm0_b = r.tensor("mm.0.bias");
    w.mm2_w = r.tensor("mm.2.weight");
    w.mm2_b = r.tensor("mm.2.bias");
    CACHET_RETURN_IF_ERROR(check_tensor(w.mm0_w, "mm.0.weight", wide, wide, -1));
    CACHET_RETURN_IF_ERROR(check_tensor(w.mm2_w, "mm.2.weight", wide, n_embd_out, -1));
    CACHET_RETURN_IF_ERROR(vec(&w.mm0_b, wide, -1, "mm.0.bias", false));
    CACHET_RETURN_IF_ERROR(vec(&w.mm2_b, n_embd_out, -1, "mm.2.bias", false));
    if (!w.post_ln_w.data) return invalid_argument(proj + ": missing tensor 'v.post_ln.weight' (the merger's norm)");
    if (c.rms_norm && w.post_ln_b.data) return invalid_argument(proj + ": 'v.post_ln.bias' beside an RMS norm");
  }
  if (c.projector == ProjectorType::kGemma3) {
    w.soft_emb_norm = r.tensor("mm.soft_emb_norm.weight");
    CACHET_RETURN_IF_ERROR(vec(&w.soft_emb_norm, d, -1, "mm.soft_emb_norm.weight", true));
    const TensorView proj = r.tensor("mm.input_projection.weight");
    CACHET_RETURN_IF_ERROR(check_tensor(proj, "mm.input_projection.weight", n_embd_out, d, -1));
    // Stored [n_embd_out, n_embd] (x @ W); the matmul wants rows of n_embd: transposed once, to f32.
    AlignedBuffer<float> t(static_cast<size_t>(d * n_embd_out));
    std::vector<float> row(static_cast<size_t>(n_embd_out));
    const Kernels& kern = kernels();
    for (int64_t i = 0; i < d; ++i) {
      kern.dequantize_row(proj.type, proj.row(i), row.data(), n_embd_out);
      for (int64_t j = 0; j < n_embd_out; ++j) t[j * d + i] = row[j];
    }
    TensorView tv;
    tv.name = proj.name;
    tv.type = DType::kF32;
    tv.ne = {d, n_embd_out, 1, 1};
    tv.data = reinterpret_cast<const uint8_t*>(t.data());
    tv.row_bytes = static_cast<size_t>(d) * sizeof(float);
    w.input_proj = tv;
    owned.push_back(std::move(t));
  }
  c.n_embd_out = n_embd_out;
  if (c.projector == ProjectorType::kGemma4V) CACHET_RETURN_IF_ERROR(load_gemma4v(r, c, w, &owned));
  CACHET_RETURN_IF_ERROR(r.finish());
  e->file_ = std::move(f);
  e->pool_ = std::move(pool);
  return e;
}

}  // namespace cachet
