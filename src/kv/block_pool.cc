#include "kv/block_pool.h"

#include "base/check.h"

namespace cachet {

BlockPool::BlockPool(int n_blocks) : meta_(n_blocks) {
  CACHET_CHECK(n_blocks > 0);
  for (BlockId b = 0; b < n_blocks; ++b) push_back(b);
}

void BlockPool::unlink(BlockId b) {
  Meta& m = meta_[b];
  if (m.prev != kNoBlock) meta_[m.prev].next = m.next;
  else head_ = m.next;
  if (m.next != kNoBlock) meta_[m.next].prev = m.prev;
  else tail_ = m.prev;
  m.prev = m.next = kNoBlock;
  --n_free_;
}

void BlockPool::push_back(BlockId b) {
  Meta& m = meta_[b];
  m.prev = tail_;
  m.next = kNoBlock;
  if (tail_ != kNoBlock) meta_[tail_].next = b;
  else head_ = b;
  tail_ = b;
  ++n_free_;
}

bool BlockPool::allocate(int n, std::vector<BlockId>* out) {
  if (!can_allocate(n)) return false;
  for (int i = 0; i < n; ++i) {
    const BlockId b = head_;
    unlink(b);
    meta_[b].ref_cnt = 1;
    out->push_back(b);
  }
  return true;
}

void BlockPool::incref(BlockId b) {
  CACHET_CHECK_MSG(b >= 0 && b < n_total() && meta_[b].ref_cnt > 0, "incref of free or bad block %d", b);
  ++meta_[b].ref_cnt;
}

void BlockPool::decref(BlockId b) {
  CACHET_CHECK_MSG(b >= 0 && b < n_total() && meta_[b].ref_cnt > 0, "double free of block %d", b);
  if (--meta_[b].ref_cnt == 0) push_back(b);
}

std::string BlockPool::check() const {
  int n = 0;
  BlockId prev = kNoBlock;
  std::vector<char> seen(meta_.size(), 0);
  for (BlockId b = head_; b != kNoBlock; b = meta_[b].next) {
    if (b < 0 || b >= n_total()) return "free list holds a bad id";
    if (seen[b]++) return "block " + std::to_string(b) + " is twice in the free list";
    if (meta_[b].ref_cnt != 0) return "block " + std::to_string(b) + " is free with ref_cnt " + std::to_string(meta_[b].ref_cnt);
    if (meta_[b].prev != prev) return "free list back link broken at " + std::to_string(b);
    prev = b;
    ++n;
  }
  if (prev != tail_) return "free list tail is wrong";
  if (n != n_free_) return "free count " + std::to_string(n_free_) + " but " + std::to_string(n) + " listed";
  for (BlockId b = 0; b < n_total(); ++b) {
    if (meta_[b].ref_cnt < 0) return "negative ref_cnt";
    if (meta_[b].ref_cnt == 0 && !seen[b]) return "block " + std::to_string(b) + " leaked (ref 0, not free)";
  }
  return {};
}

}  // namespace cachet
