#include "model/synthetic.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <random>
#include <vector>

#include "io/gguf_writer.h"
#include "model/synthetic_parts.h"

namespace cachet {

// The keys every synthetic file starts with: the architecture, its name and alignment, and its sizes.
void add_common_keys(GgufWriter* w, const SyntheticSpec& s, bool ff_key) {
  const std::string a = s.arch + ".";
  w->set_string("general.architecture", s.arch);
  w->set_string("general.name", "cachet synthetic");
  w->set_u32("general.alignment", 32);
  w->set_u32(a + "context_length", static_cast<uint32_t>(s.n_ctx));
  if (s.pooling_type >= 0) w->set_u32(a + "pooling_type", static_cast<uint32_t>(s.pooling_type));
  w->set_u32(a + "embedding_length", static_cast<uint32_t>(s.n_embd));
  w->set_u32(a + "block_count", static_cast<uint32_t>(s.n_layer));
  if (ff_key) w->set_u32(a + "feed_forward_length", static_cast<uint32_t>(s.n_ff));
}

void add_rope_keys(GgufWriter* w, const SyntheticSpec& s, int64_t rope_dim) {
  const std::string a = s.arch + ".";
  w->set_u32(a + "rope.dimension_count", static_cast<uint32_t>(rope_dim));
  w->set_f32(a + "rope.freq_base", static_cast<float>(s.rope_theta));
  if (s.rope_scaling.empty()) return;
  w->set_string(a + "rope.scaling.type", s.rope_scaling);
  w->set_f32(a + "rope.scaling.factor", static_cast<float>(s.rope_scale));
  if (s.rope_orig_ctx > 0)
    w->set_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(s.rope_orig_ctx));
  if (s.rope_attn_factor > 0) w->set_f32(a + "rope.scaling.attn_factor", static_cast<float>(s.rope_attn_factor));
}

// A WordPiece vocabulary (tokenizer.ggml.model "bert") as llama.cpp's converter stores one: a word-initial piece
// is U+2581 + piece, a continuation ("##ing") the bare piece. [PAD] [UNK] [CLS] [SEP] [MASK], characters both
// ways, some whole words, then filler words up to n_vocab.
static Status add_wpm_vocab(GgufWriter* w, int64_t n_vocab) {
  const std::string start = "\xE2\x96\x81";
  std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  const std::string chars = "abcdefghijklmnopqrstuvwxyz0123456789.,!?'-";
  for (char ch : chars) tokens.push_back(start + std::string(1, ch));
  for (char ch : chars) tokens.push_back(std::string(1, ch));
  for (const char* word : {"the", "is", "of", "and", "to", "in", "hello", "world", "cat", "dog", "sat", "on", "mat",
                           "what", "capital", "france", "paris", "berlin", "city", "river"})
    tokens.push_back(start + word);
  for (const char* cont : {"ing", "ed", "er", "ly", "es"}) tokens.push_back(cont);
  if (static_cast<int64_t>(tokens.size()) > n_vocab)
    return invalid_argument("synthetic model: a WordPiece vocabulary needs at least " + std::to_string(tokens.size()) +
                            " tokens");
  for (int64_t i = static_cast<int64_t>(tokens.size()); i < n_vocab; ++i) tokens.push_back(start + "w" + std::to_string(i));
  std::vector<int32_t> types(tokens.size(), 1);
  for (int i = 0; i < 5; ++i) types[i] = 3;  // control
  w->set_string("tokenizer.ggml.model", "bert");
  w->set_string_array("tokenizer.ggml.tokens", tokens);
  w->set_i32_array("tokenizer.ggml.token_type", types);
  w->set_u32("tokenizer.ggml.token_type_count", 2);
  w->set_u32("tokenizer.ggml.padding_token_id", 0);
  w->set_u32("tokenizer.ggml.unknown_token_id", 1);
  w->set_u32("tokenizer.ggml.bos_token_id", 2);
  w->set_u32("tokenizer.ggml.cls_token_id", 2);
  w->set_u32("tokenizer.ggml.seperator_token_id", 3);
  w->set_u32("tokenizer.ggml.mask_token_id", 4);
  return Status::ok();
}

// The decoders' placeholder SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, then pieces.
void add_spm_vocab(GgufWriter* w, int64_t n_vocab) {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  tokens.reserve(n_vocab);
  for (int64_t i = 0; i < n_vocab; ++i) {
    std::string t;
    int32_t type = 1;  // normal
    if (i == 0) { t = "<unk>"; type = 2; }
    else if (i == 1) { t = "<s>"; type = 3; }
    else if (i == 2) { t = "</s>"; type = 3; }
    else if (i < 3 + 256) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", static_cast<unsigned>(i - 3));
      t = buf;
      type = 6;  // byte
    } else {
      t = "\xE2\x96\x81t" + std::to_string(i);
    }
    tokens.push_back(t);
    scores.push_back(-static_cast<float>(i));
    types.push_back(type);
  }
  w->set_string("tokenizer.ggml.model", "llama");
  w->set_string_array("tokenizer.ggml.tokens", tokens);
  w->set_f32_array("tokenizer.ggml.scores", scores);
  w->set_i32_array("tokenizer.ggml.token_type", types);
  w->set_u32("tokenizer.ggml.bos_token_id", 1);
  w->set_u32("tokenizer.ggml.eos_token_id", 2);
  w->set_u32("tokenizer.ggml.unknown_token_id", 0);
}

static Status write_synthetic_encoder(const SyntheticSpec& s, const std::string& path);

Status write_synthetic_model(const SyntheticSpec& s, const std::string& path) {
  if (s.arch == "qwen35" || s.arch == "qwen35moe" || s.arch == "qwen3next") return write_synthetic_qwen35(s, path);
  if (s.arch == "lfm2" || s.arch == "lfm2moe") return write_synthetic_lfm2(s, path);
  if (s.arch == "gpt-oss") return write_synthetic_gpt_oss(s, path);
  if (s.arch == "granite" || s.arch == "granitemoe" || s.arch == "granitehybrid")
    return write_synthetic_granite(s, path);
  if (s.arch == "nemotron_h" || s.arch == "nemotron_h_moe") return write_synthetic_nemotron_h(s, path);
  if (s.arch == "gemma4") return write_synthetic_gemma4(s, path);
  if (s.arch == "deepseek2") return write_synthetic_deepseek2(s, path);
  if (s.arch.rfind("mmproj-", 0) == 0)
    return write_synthetic_projector(s, path);
  if (s.arch == "bert" || s.arch == "nomic-bert" || s.arch == "nomic-bert-moe" || s.arch == "modern-bert")
    return write_synthetic_encoder(s, path);
  static const char* kArchs[] = {"llama",   "qwen2",   "qwen2vl", "qwen3",    "qwen3moe",       "qwen3vl", "qwen3vlmoe",
                                 "gemma2",  "gemma3",  "phi3",     "smollm3",        "mistral3", "gemma-embedding"};
  if (std::find(std::begin(kArchs), std::end(kArchs), s.arch) == std::end(kArchs))
    return invalid_argument("synthetic model: unknown architecture '" + s.arch + "'");
  if (s.n_head % s.n_head_kv != 0) return invalid_argument("synthetic model: KV heads must divide the heads");
  if (s.head_dim == 0 && s.n_embd % s.n_head != 0)
    return invalid_argument("synthetic model: heads must divide the width (or give a head_dim)");
  const bool moe = s.n_expert > 0;
  const bool qwen_moe = s.arch == "qwen3moe" || s.arch == "qwen3vlmoe";
  if (moe && s.arch != "llama" && !qwen_moe)
    return invalid_argument("synthetic model: experts are written for llama, qwen3moe and qwen3vlmoe only");
  if (qwen_moe && !moe) return invalid_argument("synthetic model: " + s.arch + " needs experts");
  if (moe && (s.n_expert_used < 1 || s.n_expert_used > s.n_expert))
    return invalid_argument("synthetic model: experts used must be in 1..experts");
  const bool gemma = s.arch == "gemma2" || s.arch == "gemma3" || s.arch == "gemma-embedding";
  const bool qwen_vl = s.arch == "qwen3vl" || s.arch == "qwen3vlmoe";
  const bool qwen2 = s.arch == "qwen2" || s.arch == "qwen2vl";
  const bool qk_norm = s.arch == "qwen3" || s.arch == "qwen3moe" || qwen_vl || s.arch == "gemma3" ||
                       s.arch == "gemma-embedding";
  if (s.n_cls_out > 0 && s.arch != "qwen3") return invalid_argument("synthetic model: a decoder reranker is qwen3");
  if (s.n_dense > 0 && s.arch != "gemma-embedding")
    return invalid_argument("synthetic model: dense projections are gemma-embedding's");
  const int64_t hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  const int64_t qd = s.n_head * hd, kvd = s.n_head_kv * hd;
  const std::string a = s.arch + ".";
  GgufWriter w;
  add_common_keys(&w, s);
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  if (hd * s.n_head != s.n_embd) {
    w.set_u32(a + "attention.key_length", static_cast<uint32_t>(hd));
    w.set_u32(a + "attention.value_length", static_cast<uint32_t>(hd));
  }
  add_rope_keys(&w, s, hd);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  if (s.arch == "llama") w.set_u32(a + "vocab_size", static_cast<uint32_t>(s.n_vocab));
  if (moe) {
    w.set_u32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    if (qwen_moe) w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff));
  }
  if (qwen_vl) {  // Qwen3-VL's interleaved sections (about 3:2.5:2.5 of the pairs, as 24/20/20 of 64) and deepstack
    const int32_t pairs = static_cast<int32_t>(hd / 2), t = pairs * 3 / 8, h = (pairs - t) / 2;
    w.set_i32_array(a + "rope.dimension_sections", {t, h, pairs - t - h, 0});
    w.set_u32(a + "n_deepstack_layers", static_cast<uint32_t>(std::min<int64_t>(3, s.n_layer)));
  }
  if (s.arch == "qwen2vl") {  // Qwen2-VL's consecutive sections (16/24/24 of 64 pairs)
    const int32_t pairs = static_cast<int32_t>(hd / 2), t = pairs / 4, h = (pairs - t) / 2;
    w.set_i32_array(a + "rope.dimension_sections", {t, h, pairs - t - h, 0});
  }
  if (gemma && s.sliding_window > 0) w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  if (s.arch == "gemma-embedding") {
    if (s.sliding_window <= 0) w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.n_ctx));
    if (s.n_dense > 0) {
      w.set_u32(a + "dense_2_feat_in", static_cast<uint32_t>(s.n_embd));
      w.set_u32(a + "dense_2_feat_out", static_cast<uint32_t>(s.n_dense));
      w.set_u32(a + "dense_3_feat_in", static_cast<uint32_t>(s.n_dense));
      w.set_u32(a + "dense_3_feat_out", static_cast<uint32_t>(s.n_embd));
    }
  }
  if (s.n_cls_out > 0) {
    std::vector<std::string> labels = {"yes", "no"};
    labels.resize(static_cast<size_t>(s.n_cls_out));
    for (int64_t i = 2; i < s.n_cls_out; ++i) labels[i] = "label" + std::to_string(i);
    w.set_string_array(a + "classifier.output_labels", labels);
    // A reranker's prompt, as Qwen3-Reranker's converted files carry one (control tokens parsed in it).
    if (s.with_vocab) w.set_string("tokenizer.chat_template.rerank", "<s>Query: {query}\nDocument: {document}</s>");
  }
  if (s.arch == "gemma2" && s.attn_softcap > 0) w.set_f32(a + "attn_logit_softcapping", static_cast<float>(s.attn_softcap));
  if (gemma && s.final_softcap > 0) w.set_f32(a + "final_logit_softcapping", static_cast<float>(s.final_softcap));
  if (s.rope_neox && s.arch == "llama") w.set_bool("cachet.rope.neox", true);
  if (s.attn_temp_scale != 0.0) {
    if (s.arch != "mistral3") return invalid_argument("synthetic model: an attention temperature is mistral3's");
    w.set_f32(a + "attention.temperature_scale", static_cast<float>(s.attn_temp_scale));
  }
  if (s.with_vocab) add_spm_vocab(&w, s.n_vocab);

  RandomTensors add(&w, s.seed);
  const auto lim = fan_in_limit;
  const bool tied = s.tied_output || s.arch == "gemma2";  // llama.cpp's gemma2 always ties the head
  CACHET_RETURN_IF_ERROR(add("token_embd.weight", s.embd_type, s.n_embd, s.n_vocab, 1.0f, 0.0f));
  CACHET_RETURN_IF_ERROR(add("output_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
  if (!tied) CACHET_RETURN_IF_ERROR(add("output.weight", s.type, s.n_embd, s.n_vocab, lim(s.n_embd), 0.0f));
  if (s.n_cls_out > 0) CACHET_RETURN_IF_ERROR(add("cls.output.weight", s.type, s.n_embd, s.n_cls_out, 1.0f, 0.0f));
  if (s.n_dense > 0) {
    CACHET_RETURN_IF_ERROR(add("dense_2.weight", s.type, s.n_embd, s.n_dense, lim(s.n_embd), 0.0f));
    CACHET_RETURN_IF_ERROR(add("dense_3.weight", s.type, s.n_dense, s.n_embd, lim(s.n_dense), 0.0f));
  }
  if (s.rope_freqs) {
    if (s.arch != "llama") return invalid_argument("synthetic model: rope_freqs is written for llama only");
    // Llama 3's shape of factors: 1 for the fast pairs, growing to 8 for the slowest.
    std::vector<float> f(hd / 2);
    for (int64_t i = 0; i < hd / 2; ++i) f[i] = 1.0f + 7.0f * static_cast<float>(i) / static_cast<float>(hd / 2);
    CACHET_RETURN_IF_ERROR(w.add_tensor_f32("rope_freqs.weight", DType::kF32, {hd / 2}, f.data()));
  }
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    CACHET_RETURN_IF_ERROR(add(p + "attn_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
    if (s.arch == "phi3") {
      CACHET_RETURN_IF_ERROR(add(p + "attn_qkv.weight", s.type, s.n_embd, qd + 2 * kvd, lim(s.n_embd), 0.0f));
    } else {
      CACHET_RETURN_IF_ERROR(add(p + "attn_q.weight", s.type, s.n_embd, qd, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_k.weight", s.type, s.n_embd, kvd, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_v.weight", s.type, s.n_embd, kvd, lim(s.n_embd), 0.0f));
    }
    if (qwen2) {
      CACHET_RETURN_IF_ERROR(add(p + "attn_q.bias", DType::kF32, qd, 1, 0.5f, 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_k.bias", DType::kF32, kvd, 1, 0.5f, 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_v.bias", DType::kF32, kvd, 1, 0.5f, 0.0f));
    }
    if (qk_norm) {
      CACHET_RETURN_IF_ERROR(add(p + "attn_q_norm.weight", DType::kF32, hd, 1, 0.1f, 1.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_k_norm.weight", DType::kF32, hd, 1, 0.1f, 1.0f));
    }
    CACHET_RETURN_IF_ERROR(add(p + "attn_output.weight", s.type, qd, s.n_embd, lim(qd), 0.0f));
    if (gemma) CACHET_RETURN_IF_ERROR(add(p + "post_attention_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
    CACHET_RETURN_IF_ERROR(add(p + "ffn_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
    if (moe) {
      // A decisive router (logits of std ~4, as trained routers' are peaked): random near-ties would make the
      // expert choice, and every oracle comparison, hinge on rounding noise.
      CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_inp.weight", DType::kF32, s.n_embd, s.n_expert, 4 * lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_gate_exps.weight", s.type, {s.n_embd, s.n_ff, s.n_expert}, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_up_exps.weight", s.type, {s.n_embd, s.n_ff, s.n_expert}, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add.nd(p + "ffn_down_exps.weight", s.type, {s.n_ff, s.n_embd, s.n_expert}, lim(s.n_ff), 0.0f));
    } else if (s.arch == "phi3") {
      CACHET_RETURN_IF_ERROR(add(p + "ffn_up.weight", s.type, s.n_embd, 2 * s.n_ff, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_down.weight", s.type, s.n_ff, s.n_embd, lim(s.n_ff), 0.0f));
    } else {
      CACHET_RETURN_IF_ERROR(add(p + "ffn_gate.weight", s.type, s.n_embd, s.n_ff, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_up.weight", s.type, s.n_embd, s.n_ff, lim(s.n_embd), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_down.weight", s.type, s.n_ff, s.n_embd, lim(s.n_ff), 0.0f));
    }
    if (gemma) CACHET_RETURN_IF_ERROR(add(p + "post_ffw_norm.weight", DType::kF32, s.n_embd, 1, 0.1f, 1.0f));
  }
  return w.write(path);
}

// bert / nomic-bert / modern-bert (model/encoder.h): the tensors and keys llama.cpp's converter writes.
static Status write_synthetic_encoder(const SyntheticSpec& s, const std::string& path) {
  const bool bert = s.arch == "bert", nomic = s.arch == "nomic-bert", modern = s.arch == "modern-bert";
  const bool moe = s.arch == "nomic-bert-moe";  // nomic-bert's attention, bert's FFN, experts every 2nd layer
  if (s.n_embd % s.n_head != 0 || s.head_dim != 0 || s.n_head_kv != s.n_head)
    return invalid_argument("synthetic model: an encoder has n_head heads of n_embd / n_head (no GQA)");
  if (moe != (s.n_expert > 0)) return invalid_argument("synthetic model: nomic-bert-moe, and only it, has experts");
  if (moe && (s.n_expert_used < 1 || s.n_expert_used > s.n_expert))
    return invalid_argument("synthetic model: experts used must be in 1..experts");
  const int64_t d = s.n_embd, ff = s.n_ff, hd = d / s.n_head;
  const std::string a = s.arch + ".";
  GgufWriter w;
  add_common_keys(&w, s);
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_f32(a + "attention.layer_norm_epsilon", 1e-12f);
  w.set_bool(a + "attention.causal", false);
  if (moe) {
    w.set_u32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    w.set_u32(a + "moe_every_n_layers", 2);
  }
  if (!bert) {
    w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(hd));
    w.set_f32(a + "rope.freq_base", static_cast<float>(s.rope_theta));
  }
  if (modern && s.sliding_window > 0) {
    w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
    w.set_u32(a + "attention.sliding_window_pattern", 3);
    w.set_f32(a + "rope.freq_base_swa", 10000.0f);
  }
  if (bert) {
    CACHET_RETURN_IF_ERROR(add_wpm_vocab(&w, s.n_vocab));
  } else {  // the placeholder SentencePiece pieces (modern-bert's real files have BPE), with [SEP] = </s>
    add_spm_vocab(&w, s.n_vocab);
    w.set_u32("tokenizer.ggml.seperator_token_id", 2);
    w.set_u32("tokenizer.ggml.token_type_count", 2);
    w.set_bool("tokenizer.ggml.add_eos_token", true);
  }
  RandomTensors add(&w, s.seed);
  const auto lim = fan_in_limit;
  CACHET_RETURN_IF_ERROR(add("token_embd.weight", s.embd_type, d, s.n_vocab, 1.0f, 0.0f));
  if (!modern) CACHET_RETURN_IF_ERROR(add("token_types.weight", DType::kF32, d, 2, 0.5f, 0.0f));
  if (bert) CACHET_RETURN_IF_ERROR(add("position_embd.weight", DType::kF32, d, s.n_ctx, 0.5f, 0.0f));
  CACHET_RETURN_IF_ERROR(add("token_embd_norm.weight", DType::kF32, d, 1, 0.1f, 1.0f));
  if (!modern) CACHET_RETURN_IF_ERROR(add("token_embd_norm.bias", DType::kF32, d, 1, 0.1f, 0.0f));
  if (modern) CACHET_RETURN_IF_ERROR(add("output_norm.weight", DType::kF32, d, 1, 0.1f, 1.0f));
  if (s.n_cls_out > 0) {
    CACHET_RETURN_IF_ERROR(add("cls.weight", s.type, d, d, lim(d), 0.0f));
    if (!modern) CACHET_RETURN_IF_ERROR(add("cls.bias", DType::kF32, d, 1, 0.1f, 0.0f));
    if (modern) CACHET_RETURN_IF_ERROR(add("cls.norm.weight", DType::kF32, d, 1, 0.1f, 1.0f));
    CACHET_RETURN_IF_ERROR(add("cls.output.weight", s.type, d, s.n_cls_out, lim(d), 0.0f));
    CACHET_RETURN_IF_ERROR(add("cls.output.bias", DType::kF32, s.n_cls_out, 1, 0.1f, 0.0f));
  }
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    if (modern && l > 0) CACHET_RETURN_IF_ERROR(add(p + "attn_norm.weight", DType::kF32, d, 1, 0.1f, 1.0f));
    if (bert) {
      for (const char* m : {"attn_q", "attn_k", "attn_v"}) {
        CACHET_RETURN_IF_ERROR(add(p + m + ".weight", s.type, d, d, lim(d), 0.0f));
        CACHET_RETURN_IF_ERROR(add(p + m + ".bias", DType::kF32, d, 1, 0.1f, 0.0f));
      }
    } else {
      CACHET_RETURN_IF_ERROR(add(p + "attn_qkv.weight", s.type, d, 3 * d, lim(d), 0.0f));
      if (moe) CACHET_RETURN_IF_ERROR(add(p + "attn_qkv.bias", DType::kF32, 3 * d, 1, 0.1f, 0.0f));
    }
    CACHET_RETURN_IF_ERROR(add(p + "attn_output.weight", s.type, d, d, lim(d), 0.0f));
    if (bert || moe) CACHET_RETURN_IF_ERROR(add(p + "attn_output.bias", DType::kF32, d, 1, 0.1f, 0.0f));
    if (!modern) {
      CACHET_RETURN_IF_ERROR(add(p + "attn_output_norm.weight", DType::kF32, d, 1, 0.1f, 1.0f));
      CACHET_RETURN_IF_ERROR(add(p + "attn_output_norm.bias", DType::kF32, d, 1, 0.1f, 0.0f));
    } else {
      CACHET_RETURN_IF_ERROR(add(p + "ffn_norm.weight", DType::kF32, d, 1, 0.1f, 1.0f));
    }
    if (moe && l % 2 == 1) {
      // A decisive router (as in the decoders' synthetic experts), so no choice hinges on rounding noise.
      auto add3 = [&](const std::string& name, int64_t ne0, int64_t ne1, float lim) {
        return add.nd(name, s.type, {ne0, ne1, s.n_expert}, lim, 0.0f);
      };
      CACHET_RETURN_IF_ERROR(add(p + "ffn_gate_inp.weight", DType::kF32, d, s.n_expert, 4 * lim(d), 0.0f));
      CACHET_RETURN_IF_ERROR(add3(p + "ffn_up_exps.weight", d, ff, lim(d)));
      CACHET_RETURN_IF_ERROR(add3(p + "ffn_down_exps.weight", ff, d, lim(ff)));
    } else {
      if (nomic) CACHET_RETURN_IF_ERROR(add(p + "ffn_gate.weight", s.type, d, ff, lim(d), 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_up.weight", s.type, d, modern ? 2 * ff : ff, lim(d), 0.0f));
      if (bert || moe) CACHET_RETURN_IF_ERROR(add(p + "ffn_up.bias", DType::kF32, ff, 1, 0.1f, 0.0f));
      CACHET_RETURN_IF_ERROR(add(p + "ffn_down.weight", s.type, ff, d, lim(ff), 0.0f));
      if (bert || moe) CACHET_RETURN_IF_ERROR(add(p + "ffn_down.bias", DType::kF32, d, 1, 0.1f, 0.0f));
    }
    if (!modern) {
      CACHET_RETURN_IF_ERROR(add(p + "layer_output_norm.weight", DType::kF32, d, 1, 0.1f, 1.0f));
      CACHET_RETURN_IF_ERROR(add(p + "layer_output_norm.bias", DType::kF32, d, 1, 0.1f, 0.0f));
    }
  }
  return w.write(path);
}

}  // namespace cachet
