// BlockPool: fixed-size KV blocks as integer ids with reference counts. Allocation and free are O(1); free
// blocks sit in a doubly linked list threaded through the block metadata, in the order they were freed
// (least recently used at the head), so a later prefix cache can take a block back out of the middle in
// O(1). Check before you change: can_allocate() then allocate(); allocate() changes nothing on failure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cachet {

using BlockId = int32_t;
constexpr BlockId kNoBlock = -1;  // end of the free list

class BlockPool {
 public:
  explicit BlockPool(int n_blocks);

  int n_total() const { return static_cast<int>(meta_.size()); }
  int n_free() const { return n_free_; }
  int n_used() const { return n_total() - n_free_; }
  bool can_allocate(int n) const { return n >= 0 && n <= n_free_; }

  // n fresh blocks with ref_cnt 1, taken from the LRU end; false (and nothing changed) if too few are free.
  bool allocate(int n, std::vector<BlockId>* out);
  void incref(BlockId b);
  // Drops one reference; at zero the block goes to the tail (most recently used end) of the free list.
  void decref(BlockId b);
  int ref_cnt(BlockId b) const { return meta_[b].ref_cnt; }

  // Every invariant of the pool itself; empty when all hold, else what broke (tests call it after each op).
  std::string check() const;

 private:
  struct Meta {
    int32_t ref_cnt = 0;
    BlockId prev = kNoBlock, next = kNoBlock;  // free-list links, valid while ref_cnt == 0
  };
  void unlink(BlockId b);
  void push_back(BlockId b);

  std::vector<Meta> meta_;
  BlockId head_ = kNoBlock, tail_ = kNoBlock;
  int n_free_ = 0;
};

}  // namespace cachet
