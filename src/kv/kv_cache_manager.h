// KvCacheManager: the block tables of every sequence over one BlockPool. A sequence's positions
// [0, num_tokens) live in block_table[p / block_size] at offset p % block_size. Forked sequences share
// blocks (ref counts); appending into a shared, partly filled last block copies it first (copy-on-write).
// Runs without any KV memory: a copy is recorded (take_copies), and whoever builds the next forward batch
// hands it to the model, which makes it before the step writes anything; so the bookkeeping is tested alone.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_block_storage.h"

namespace cachet {

using SeqId = int64_t;

class KvCacheManager {
 public:
  KvCacheManager(int n_blocks, int block_size);

  int block_size() const { return block_size_; }
  const BlockPool& pool() const { return pool_; }
  bool has(SeqId s) const { return seqs_.count(s) != 0; }
  int num_tokens(SeqId s) const;
  const std::vector<BlockId>& block_table(SeqId s) const;

  // Blocks that append(s, n_new) would take from the pool (new blocks plus a copy-on-write).
  int blocks_to_append(SeqId s, int n_new) const;
  bool can_append(SeqId s, int n_new) const { return pool_.can_allocate(blocks_to_append(s, n_new)); }
  // Makes room for n_new more tokens at the end of s (creating s if new); false, with nothing changed, when
  // the pool is short.
  bool append(SeqId s, int n_new);
  // child (new) shares every block of parent.
  void fork(SeqId parent, SeqId child);
  // s (new) starts with whole blocks computed elsewhere (a prefix cache hit): it takes a reference on each and
  // holds blocks.size() * block_size tokens.
  void adopt(SeqId s, const std::vector<BlockId>& blocks);
  // The copy-on-writes recorded since the last call, in order. A copy whose destination goes back to the pool
  // before it is taken is dropped then (the block may be handed out again, or revived by a prefix cache).
  std::vector<KvBlockCopy> take_copies();
  bool has_copies() const { return !copies_.empty(); }

  // Drops all of s's references (finish, abort, or preemption by recompute).
  void free(SeqId s);
  // s keeps only its first n_tokens (n_tokens <= num_tokens): blocks past them go back (speculative positions
  // that were rejected). Slots past n_tokens in its last block are stale until written again.
  void truncate(SeqId s, int n_tokens);

  // Ref counts == table references (plus, per block, what `external` says others hold, e.g. a prefix cache's
  // one reference per block it keeps), and the pool's own invariants; empty when all hold.
  std::string check(const std::function<int(BlockId)>& external = nullptr) const;
  // The pool, for a prefix cache that shares it (its references are counted in the same ref counts).
  BlockPool* shared_pool() { return &pool_; }

 private:
  struct Seq {
    std::vector<BlockId> table;
    int num_tokens = 0;
  };
  int block_size_;
  BlockPool pool_;
  std::vector<KvBlockCopy> copies_;
  void release(BlockId b);  // one reference of b dropped
  std::unordered_map<SeqId, Seq> seqs_;
};

}  // namespace cachet
