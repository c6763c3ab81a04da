// KvCacheManager: the block tables of every sequence over one BlockPool. A sequence's positions
// [0, num_tokens) live in block_table[p / block_size] at offset p % block_size. Forked sequences share
// blocks (ref counts); appending into a shared, partly filled last block copies it first (copy-on-write).
// Runs without any KV memory: the copy is a callback, so the bookkeeping is tested alone.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"

namespace cachet {

using SeqId = int64_t;

class KvCacheManager {
 public:
  // copy(src, dst, n): copy the first n token slots of block src into block dst (every layer's K and V).
  using CopyFn = std::function<void(BlockId src, BlockId dst, int n_tokens)>;
  KvCacheManager(int n_blocks, int block_size, CopyFn copy);

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
  CopyFn copy_;
  std::unordered_map<SeqId, Seq> seqs_;
};

}  // namespace cachet
