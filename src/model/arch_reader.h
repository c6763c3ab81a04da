// ArchReader: what an architecture file reads from a GGUF file, and a record of it. Every `{arch}.*` key and
// every tensor an architecture does not read is an error when loading finishes (finish()): a file that says
// something cachet would not apply never runs silently (docs/architectures.md). Keys known to leave the math
// unchanged (context length, vocabulary size, ...) are listed once here.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cachet/status.h"
#include "model/config.h"
#include "model/tensor.h"

namespace cachet {

class GgufFile;

class ArchReader {
 public:
  ArchReader(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}

  const std::string& arch() const { return arch_; }
  const GgufFile& file() const { return f_; }

  // `{arch}.key` (marked as read). With a fallback, a missing key gives the fallback.
  bool has(const std::string& key) const;
  Result<int64_t> dim(const std::string& key, std::optional<int64_t> fallback = std::nullopt);
  Result<double> real(const std::string& key, std::optional<double> fallback = std::nullopt);
  Result<std::string> text(const std::string& key, std::optional<std::string> fallback = std::nullopt);
  // Marks `{arch}.key` as read without reading it (a key whose value the architecture handles itself).
  void consume(const std::string& key) { keys_read_.insert(arch_ + "." + key); }

  // A tensor by its full name (marked as read); an empty view (data == nullptr) when the file has none.
  TensorView tensor(const std::string& name);
  TensorView layer_tensor(int64_t layer, const std::string& name) {
    return tensor("blk." + std::to_string(layer + layer_offset_) + "." + name);
  }
  // Layer l's tensors are the file's blk.(l + offset).* (a multi-token-prediction head loaded on its own: its
  // block follows the trunk's).
  void set_layer_offset(int64_t offset) { layer_offset_ = offset; }

  // The hyper-parameters every decoder shares (widths, heads, RoPE base and dims, norm epsilon, vocabulary,
  // tied head); an architecture file adds its own after this.
  Result<ModelConfig> base_config();

  // Mixture-of-experts keys (expert_count, expert_used_count, expert_weights_scale; with expert_ff_key, the
  // experts' own FFN width): sets c->n_expert etc. when the file has experts, else leaves c dense.
  Status experts(ModelConfig* c, const char* expert_ff_key = nullptr);

  // Group-limited routing (expert_group_count, expert_group_used_count; DeepSeek-V3): sets c->n_expert_groups*.
  Status expert_groups(ModelConfig* c);

  // `attention.value_length` (read by base_config, which refuses one that differs from key_length unless an
  // architecture takes it here: MLA's value heads are the latent's width).
  int64_t value_length() {
    value_len_taken_ = true;
    return value_len_;
  }

  // M-RoPE sections (`rope.dimension_sections`: t, h, w and a 4th, in rotary pairs) into c->rope_sections, when the
  // file has them (or must: required). Interleaved, as Qwen3-VL and Qwen3.5 write them (ModelConfig).
  Status mrope_sections(ModelConfig* c, bool required);

  // Mamba-2's widths (ssm.conv_kernel, state_size, group_count, time_step_rank = heads, inner_size = heads x
  // head width), checked: sets c->ssm_* (Granite 4.0-H, Nemotron-H).
  Status mamba2(ModelConfig* c);

  // Which layers use the sliding window, as ModelConfig::swa_layers: `attention.sliding_window_pattern` is
  // either a period n (layer l is local unless l % n == n - 1; 0 or 1 = every layer local) or one bool per layer;
  // without it, `default_period`. dense_first: a period's first layer is the global one (l % n == 0).
  Result<std::string> swa_layers(int64_t n_layer, int64_t default_period, bool dense_first = false);

  // `attention.head_count_kv` given per layer (read by base_config): each layer's count, 0 where a layer does not
  // attend; empty for a single count. An architecture with such layers takes them here.
  const std::vector<int64_t>& kv_heads_per_layer() {
    kv_layers_taken_ = true;
    return kv_heads_per_layer_;
  }
  // An architecture that applies a different KV head count per layer (Gemma 4) says so; others refuse such files.
  void accept_kv_heads_differing() { kv_heads_differ_ok_ = true; }
  // `feed_forward_length` given per layer (read by base_config, n_ff = layer 0's): each layer's width; empty for a
  // single width. Widths that differ must be taken here by an architecture that applies them.
  const std::vector<int64_t>& ff_per_layer() {
    ff_layers_taken_ = true;
    return ff_per_layer_;
  }

  // Errors naming the first `{arch}.*` key or tensor nobody read.
  Status finish() const;

 private:
  const GgufFile& f_;
  std::string arch_;
  std::set<std::string> keys_read_;
  std::set<std::string> tensors_read_;
  int64_t layer_offset_ = 0;
  std::vector<int64_t> kv_heads_per_layer_;
  bool kv_layers_taken_ = false;
  bool kv_heads_differ_ = false;  // attending layers with different counts (Gemma 4: local vs global)
  bool kv_heads_differ_ok_ = false;
  int64_t value_len_ = 0;
  bool value_len_taken_ = false;
  bool value_len_differs_ = false;
  std::vector<int64_t> ff_per_layer_;
  bool ff_layers_taken_ = false;
};

// The GGUF tensor as a view of the mapping (empty when ti is null).
TensorView view_of_tensor(const struct GgufTensorInfo* ti);

}  // namespace cachet
