// check_forward_batch: whether a batch is one a model of this shape can run (every index inside what it names).
#include <algorithm>

#include "model/decoder.h"

namespace cachet {

Status check_forward_batch(const ModelConfig& cfg_, const ForwardBatch& b, bool embeddings_in) {
  const size_t n = b.token_ids.size();
  if (b.positions.size() != n || b.seq_index.size() != n || b.want_logits.size() != n || b.slots.size() != n ||
      (!b.want_hidden.empty() && b.want_hidden.size() != n))
    return invalid_argument("forward batch: token, position, sequence, output and slot lists differ in length");
  if (!embeddings_in && (!b.embd_row.empty() || !b.attn_end.empty() || !b.input_embd.empty()))
    return unimplemented("this model does not take embeddings (an image's) in place of tokens");
  if ((!b.embd_row.empty() && b.embd_row.size() != n) || (!b.attn_end.empty() && b.attn_end.size() != n))
    return invalid_argument("forward batch: the embedding-row and attention-end lists differ in length");
  // An image's row: the model's width, and as much again for each deepstack layer (Qwen3-VL).
  const int64_t row_width = cfg_.n_embd * (1 + cfg_.n_deepstack_layers);
  if (b.input_embd.size() % static_cast<size_t>(row_width) != 0)
    return invalid_argument("forward batch: input embeddings are not rows of the model's input width");
  const int64_t n_rows = static_cast<int64_t>(b.input_embd.size()) / row_width;
  if (!b.rope_pos.empty() && (b.rope_pos.size() != 3 * n || cfg_.rope_sections.empty()))
    return invalid_argument(cfg_.rope_sections.empty()
                                ? "forward batch: M-RoPE positions for a model without M-RoPE"
                                : "forward batch: M-RoPE positions are not three per token");
  for (int32_t r : b.embd_row)
    if (r >= n_rows) return invalid_argument("forward batch: an embedding row past the rows given");
  if (!b.attn_end.empty()) {
    std::vector<int32_t> last(b.block_tables.size(), -1);
    for (size_t i = 0; i < n; ++i)
      if (b.seq_index[i] >= 0 && b.seq_index[i] < b.n_seqs())
        last[b.seq_index[i]] = std::max(last[b.seq_index[i]], b.positions[i]);
    for (size_t i = 0; i < n; ++i)
      if (b.attn_end[i] >= 0 && (b.attn_end[i] < b.positions[i] || b.seq_index[i] < 0 ||
                                 b.seq_index[i] >= b.n_seqs() || b.attn_end[i] > last[b.seq_index[i]]))
        return invalid_argument("forward batch: a token attends past its sequence's last position in the batch");
  }
  if (n == 0 && b.copies.empty()) return Status::ok();
  const KvBlockStorage* kv = b.kv;
  if (!kv) return invalid_argument("forward batch: no KV storage");
  if (kv->n_layers() != cfg_.n_kv_layers())
    return invalid_argument("forward batch: the KV storage was made for another model's shape");
  for (int kl = 0; kl < kv->n_layers(); ++kl)
    if (kv->k_row_bytes(kl) != kv_row_bytes(kv->types().k, cfg_.kv_dim_of_kv_layer(kl)) ||
        kv->v_row_bytes(kl) != kv_row_bytes(kv->types().v, cfg_.kv_dim_of_kv_layer(kl)))
      return invalid_argument("forward batch: the KV storage was made for another model's shape");
  if (cfg_.n_recurrent_layers() > 0) {
    const StateStore* st = b.state;
    if (!st) return invalid_argument("forward batch: a hybrid model needs its recurrent state store");
    if (st->n_layers() != cfg_.n_recurrent_layers() || st->conv_floats() != cfg_.conv_state_floats() ||
        st->ssm_floats() != cfg_.ssm_state_floats())
      return invalid_argument("forward batch: the state store was made for another model's shape");
    if (static_cast<int>(b.state_slots.size()) != b.n_seqs())
      return invalid_argument("forward batch: every sequence of a hybrid model needs a state slot");
    for (StateSlot s : b.state_slots)
      if (s < 0 || s >= st->n_slots()) return invalid_argument("forward batch: a state slot outside the store");
    for (auto [src, dst] : b.state_copies)
      if (src < 0 || src >= st->n_slots() || dst < 0 || dst >= st->n_slots())
        return invalid_argument("forward batch: a state copy outside the store");
    for (auto [t, slot] : b.state_snapshots)
      if (t < 0 || t >= b.n_tokens() || slot < 0 || slot >= st->n_slots())
        return invalid_argument("forward batch: a state snapshot outside the batch or the store");
  }
  if (cfg_.mtp_head && b.input_hidden.size() != n * static_cast<size_t>(cfg_.n_embd))
    return invalid_argument("forward batch: a multi-token-prediction head needs the trunk's hidden state per token");
  for (const KvBlockCopy& c : b.copies)
    if (c.src < 0 || c.src >= kv->n_blocks() || c.dst < 0 || c.dst >= kv->n_blocks() || c.n_tokens < 0 ||
        c.n_tokens > kv->block_size())
      return invalid_argument("forward batch: a block copy outside the KV storage");
  for (const std::vector<BlockId>& t : b.block_tables)
    for (BlockId blk : t)
      if (blk < 0 || blk >= kv->n_blocks()) return invalid_argument("forward batch: a block outside the KV storage");
  for (size_t i = 0; i < n; ++i) {
    if (b.token_ids[i] < 0 || b.token_ids[i] >= cfg_.n_vocab)
      return invalid_argument("token id " + std::to_string(b.token_ids[i]) + " is outside the vocabulary (0.." +
                              std::to_string(cfg_.n_vocab - 1) + ")");
    if (b.seq_index[i] < 0 || b.seq_index[i] >= b.n_seqs()) return invalid_argument("forward batch: bad sequence index");
    const int capacity = b.view(b.seq_index[i]).capacity();
    if (b.positions[i] < 0 || b.positions[i] >= capacity)
      return out_of_range("position " + std::to_string(b.positions[i]) + " is outside the KV cache (capacity " +
                          std::to_string(capacity) + ")");
    if (b.slots[i] < 0 || b.slots[i] >= kv->n_slots())
      return out_of_range("forward batch: slot " + std::to_string(b.slots[i]) + " is outside the KV storage");
  }
  return Status::ok();
}

}  // namespace cachet
