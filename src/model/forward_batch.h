// ForwardBatch: the contract between whoever schedules tokens and the model, as plain data. A flat list of
// tokens, each with its position, the sequence it belongs to and the KV slot its K and V rows are written to;
// per sequence, its block table in the batch's storage (what attention reads); and the copy-on-writes to make
// before anything is written. Tokens of one sequence appear in position order; a token attends to positions
// [0, its position] of its own sequence (the causal mask). Nothing here points into the scheduler's
// bookkeeping, so another process (a tensor-parallel rank) replays a batch from its bytes against its own
// storage.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_block_storage.h"
#include "kv/kv_cache.h"
#include "kv/state_store.h"

namespace cachet {

struct ForwardBatch {
  std::vector<int32_t> token_ids;    // [n_tokens]
  std::vector<int32_t> positions;    // [n_tokens]
  std::vector<int32_t> seq_index;    // [n_tokens] index into block_tables
  std::vector<uint8_t> want_logits;  // [n_tokens] 1 = return this token's next-token logits
  std::vector<uint8_t> want_hidden;  // [n_tokens] or empty: 1 = return its final hidden state (embeddings)
  std::vector<int64_t> slots;        // [n_tokens] where its K and V go: block * block_size + offset
  KvBlockStorage* kv = nullptr;      // the storage every sequence's blocks are in
  std::vector<std::vector<BlockId>> block_tables;  // [n_seqs] blocks in position order
  std::vector<KvBlockCopy> copies;                 // made, in order, before the step writes
  // Hybrid models (gated delta net layers): each sequence's recurrent state slot. A sequence whose first token
  // here is at position 0 starts from a zero state; any other continues from its slot, which holds the state
  // after the position before. state_copies (src, dst) are made before the step (forks: n > 1, beams).
  // state_snapshots (token index, slot): the state after that token is also written to that slot (a checkpoint
  // for the prefix cache), every layer of it.
  StateStore* state = nullptr;
  std::vector<StateSlot> state_slots;                        // [n_seqs]
  std::vector<std::pair<StateSlot, StateSlot>> state_copies;
  std::vector<std::pair<int, StateSlot>> state_snapshots;
  // A multi-token-prediction head (ModelConfig::mtp_head): per token, the trunk's final hidden state (after its
  // output norm) at the position before; [n_tokens, n_embd].
  std::vector<float> input_hidden;
  // Rows given instead of tokens (an image's embeddings from a vision encoder): a token whose embd_row[t] >= 0
  // reads row embd_row[t] of input_embd ([rows, n_embd x (1 + n_deepstack_layers)], the language model's input
  // width, used as is: no embedding scale; deepstack rows added after the first layers) instead of its id's
  // embedding. Empty: every token is its id.
  std::vector<float> input_embd;
  std::vector<int32_t> embd_row;  // [n_tokens] or empty
  // Per token, the last position of its sequence it attends to (>= its own position; its K and V are in this
  // batch): the tokens of one image see each other both ways (Gemma 3), the rest stay causal (-1). Empty: causal.
  std::vector<int32_t> attn_end;  // [n_tokens] or empty
  // M-RoPE models (ModelConfig::rope_sections): per token, the (time, height, width) positions its rotary pairs
  // turn with, [n_tokens * 3]; empty: all three are its position (text). An image's rows take their grid's
  // (Qwen-VL), and the text after an image its own count, so these part from the cache positions.
  std::vector<int32_t> rope_pos;

  int n_tokens() const { return static_cast<int>(token_ids.size()); }
  int n_seqs() const { return static_cast<int>(block_tables.size()); }
  int n_logits() const {
    int n = 0;
    for (uint8_t w : want_logits) n += w;
    return n;
  }
  int n_hidden() const {
    int n = 0;
    for (uint8_t w : want_hidden) n += w;
    return n;
  }
  // Adds a sequence (its block table); its index for add_token.
  int add_sequence(std::vector<BlockId> blocks) {
    block_tables.push_back(std::move(blocks));
    return n_seqs() - 1;
  }
  // Adds a token of sequence `seq` at `pos`, written to the slot its block table gives (a position past the
  // table gets an out-of-range slot, which the model rejects).
  void add_token(int32_t id, int32_t pos, int seq, bool logits) {
    const std::vector<BlockId>& t = block_tables[seq];
    const int bs = kv->block_size();
    token_ids.push_back(id);
    positions.push_back(pos);
    seq_index.push_back(seq);
    want_logits.push_back(logits);
    if (!want_hidden.empty()) want_hidden.push_back(0);
    slots.push_back(pos >= 0 && pos / bs < static_cast<int>(t.size()) ? static_cast<int64_t>(t[pos / bs]) * bs + pos % bs
                                                                      : kv->n_slots());
  }
  // The last token added also returns its final hidden state.
  void want_hidden_of_last() {
    want_hidden.resize(token_ids.size(), 0);
    want_hidden.back() = 1;
  }
  KvView view(int seq) const { return {kv, block_tables[seq]}; }

  // One sequence: tokens at positions pos0.. ; logits for the last token only, or for all.
  static ForwardBatch single(KvBlockStorage& kv, std::vector<BlockId> blocks, const std::vector<int32_t>& tokens,
                             int pos0, bool all_logits) {
    ForwardBatch b;
    b.kv = &kv;
    b.add_sequence(std::move(blocks));
    for (size_t i = 0; i < tokens.size(); ++i)
      b.add_token(tokens[i], pos0 + static_cast<int32_t>(i), 0, all_logits || i + 1 == tokens.size());
    return b;
  }
  static ForwardBatch single(ContiguousKvCache& cache, const std::vector<int32_t>& tokens, int pos0, bool all_logits) {
    ForwardBatch b = single(cache.storage(), cache.blocks(), tokens, pos0, all_logits);
    b.state = &cache.state();
    b.state_slots = {0};
    return b;
  }
};

}  // namespace cachet
