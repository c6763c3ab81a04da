// RadixCache: KV blocks of token prefixes that earlier requests computed, kept for later requests that start
// the same way (seed 004, SGLang's RadixAttention), at block granularity. A node holds a run of whole blocks:
// its tokens (a multiple of block_size) and their block ids; children are keyed by their first block's tokens,
// so a lookup walks one block at a time and a partial match splits a node at a block boundary. Every key lives
// under a namespace (tenant: API key plus the request's cache_salt) and never matches across namespaces.
//
// Blocks are shared through the BlockPool's reference counts: the tree holds one reference on every block it
// contains; a request that reuses a prefix takes its own references (KvCacheManager::adopt). Nodes on the path of
// a running request are locked (lock_ref > 0) and never evicted; when the pool runs short, evict() drops the
// least recently used unlocked leaves first. Runs without any KV memory: tested alone (tests/test_radix_cache.cc).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/block_pool.h"

namespace cachet {

class RadixCache {
 public:
  struct Node;
  // The longest cached prefix of a request: its blocks (whole blocks only) and the deepest node reached.
  struct Match {
    std::vector<BlockId> blocks;
    int n_tokens = 0;         // blocks.size() * block_size
    Node* last = nullptr;     // lock() this while the request uses the blocks; nullptr: nothing matched
    int32_t checkpoint = -1;  // with need_checkpoint: the state slot at last's end (the match ends there)
    int kv_tokens = 0;        // with need_checkpoint: the tokens whose blocks matched before backing up
  };

  RadixCache(BlockPool* pool, int block_size);
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  int block_size() const { return block_size_; }
  // Blocks the tree holds, and of those the ones evict() could release now (in unlocked subtrees).
  int cached_blocks() const { return n_blocks_; }
  int evictable_blocks() const { return n_blocks_ - n_locked_blocks_; }
  // Whether the tree holds a reference on b (for KvCacheManager::check).
  bool holds(BlockId b) const { return b >= 0 && b < static_cast<BlockId>(held_.size()) && held_[b]; }
  int64_t queries() const { return queries_; }
  int64_t query_tokens() const { return query_tokens_; }
  int64_t hit_tokens() const { return hit_tokens_; }

  // The longest prefix of tokens[0, n) (in whole blocks, at most max_blocks of them) cached under namespace
  // ns. A match ending inside a node splits it there. Marks the path as just used (LRU) and counts the query.
  // need_checkpoint (hybrid models): the match ends at the deepest node of the prefix holding a state checkpoint
  // (nothing without one), since a recurrent state cannot be rebuilt from KV blocks.
  Match match(uint64_t ns, const int32_t* tokens, int n, int max_blocks = 1 << 30, bool need_checkpoint = false);

  // Hybrid models' state checkpoints: `slot` holds the recurrent state after tokens[0, n) (n a multiple of
  // block_size, the prefix already in the tree under ns). It is attached to the node ending at n (split there if
  // need be) unless that node has one already (the same state: results are deterministic); true when taken. The
  // tree then owns the slot: slots of evicted or dropped checkpoints come back through take_dropped_checkpoints().
  bool attach_checkpoint(uint64_t ns, const int32_t* tokens, int n, int32_t slot);
  // Drops a checkpoint no request has adopted (its node not locked by a request's match itself; nodes above one
  // are), false when there is none: first those with a deeper checkpoint on their node's only path on, then the
  // least recently used (on a tie the shallower).
  bool drop_lru_checkpoint();
  std::vector<int32_t> take_dropped_checkpoints() { return std::exchange(dropped_checkpoints_, {}); }
  int checkpoints() const { return n_checkpoints_; }

  // Adds the whole blocks of tokens[0, n) (n / block_size of them, ids in blocks[]) under ns. Blocks whose
  // tokens the tree already holds are not taken (the tree keeps its own); new ones get one reference from the
  // tree. Returns how many blocks were added.
  int insert(uint64_t ns, const int32_t* tokens, int n, const BlockId* blocks);

  // lock_ref + 1 / - 1 on node and every ancestor (a running request's path).
  void lock(Node* node);
  void unlock(Node* node);

  // Drops least recently used unlocked leaves (and the parents that become such leaves) until n blocks have
  // left the tree or nothing more can go; returns the blocks dropped. A dropped block returns to the pool's
  // free list once no request holds it either.
  int evict(int n);

  // For LRU tests: the last-use time of the least recently used evictable leaf (UINT64_MAX: none), and the
  // latest last-use time among the leaves the last evict() dropped.
  uint64_t oldest_evictable_access() const;
  uint64_t last_evicted_access() const { return last_evicted_access_; }

  // Every invariant: parent/child links, keys, block counts, lock counts (a node's lock_ref >= the sum over its
  // children), one tree reference per held block; empty when all hold.
  std::string check() const;

  // The largest nodes for a dashboard: their namespace, depth in tokens, length, hits and lock count.
  struct NodeInfo {
    uint64_t ns;
    int depth_tokens, n_tokens, hits, lock_ref;
    std::vector<int32_t> first_tokens;  // up to 32 tokens of the node's run
  };
  std::vector<NodeInfo> largest(int max_nodes) const;

  struct Node {
    Node* parent = nullptr;
    uint64_t ns = 0;
    std::vector<int32_t> tokens;  // a multiple of block_size
    std::vector<BlockId> blocks;  // tokens.size() / block_size
    std::map<std::vector<int32_t>, std::unique_ptr<Node>> children;  // keyed by the child's first block
    int lock_ref = 0;
    int hits = 0;
    uint64_t last_access = 0;
    int32_t checkpoint = -1;  // hybrid models: the state slot after this node's last token (-1: none)
  };

 private:
  Node* root(uint64_t ns);
  // Splits node after its first n_blocks blocks; returns the new upper node (the one holding those blocks).
  Node* split(Node* node, int n_blocks);
  std::vector<int32_t> first_block(const int32_t* tokens) const {
    return std::vector<int32_t>(tokens, tokens + block_size_);
  }
  // How many whole blocks of tokens[0, max_blocks * block_size) run along c's blocks (at least 1: c was found
  // by its first block).
  int common_blocks(const Node* c, const int32_t* tokens, int max_blocks) const;
  void touch(Node* n);
  void check_node(const Node* n, int* blocks, std::string* err) const;

  BlockPool* pool_;
  int block_size_;
  std::unordered_map<uint64_t, std::unique_ptr<Node>> roots_;
  uint64_t clock_ = 0;
  uint64_t last_evicted_access_ = 0;
  int n_blocks_ = 0;
  int n_locked_blocks_ = 0;  // blocks in nodes with lock_ref > 0
  std::vector<uint8_t> held_;  // per pool block: 1 while the tree references it
  int64_t queries_ = 0, query_tokens_ = 0, hit_tokens_ = 0;
  int n_checkpoints_ = 0;
  std::vector<int32_t> dropped_checkpoints_;
};

}  // namespace cachet
