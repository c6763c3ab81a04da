#include "kv/kv_cache_manager.h"

#include <utility>

#include "base/check.h"

namespace cachet {

KvCacheManager::KvCacheManager(int n_blocks, int block_size) : block_size_(block_size), pool_(n_blocks) {
  CACHET_CHECK(block_size > 0);
}

int KvCacheManager::num_tokens(SeqId s) const {
  auto it = seqs_.find(s);
  return it == seqs_.end() ? 0 : it->second.num_tokens;
}

const std::vector<BlockId>& KvCacheManager::block_table(SeqId s) const {
  static const std::vector<BlockId> kEmpty;
  auto it = seqs_.find(s);
  return it == seqs_.end() ? kEmpty : it->second.table;
}

int KvCacheManager::blocks_to_append(SeqId s, int n_new) const {
  auto it = seqs_.find(s);
  const int have = it == seqs_.end() ? 0 : static_cast<int>(it->second.table.size());
  const int tokens = it == seqs_.end() ? 0 : it->second.num_tokens;
  const int need = (tokens + n_new + block_size_ - 1) / block_size_;
  int n = std::max(0, need - have);
  const bool partial_last = tokens % block_size_ != 0;
  if (n_new > 0 && partial_last && pool_.ref_cnt(it->second.table.back()) > 1) ++n;  // copy-on-write
  return n;
}

bool KvCacheManager::append(SeqId s, int n_new) {
  CACHET_CHECK(n_new >= 0);
  const int n = blocks_to_append(s, n_new);
  std::vector<BlockId> fresh;
  if (!pool_.allocate(n, &fresh)) return false;
  Seq& q = seqs_[s];
  size_t next = 0;
  if (n_new > 0 && q.num_tokens % block_size_ != 0 && pool_.ref_cnt(q.table.back()) > 1) {
    const BlockId shared = q.table.back(), own = fresh[next++];
    copies_.push_back({shared, own, q.num_tokens % block_size_});
    pool_.decref(shared);
    q.table.back() = own;
  }
  for (; next < fresh.size(); ++next) q.table.push_back(fresh[next]);
  q.num_tokens += n_new;
  return true;
}

void KvCacheManager::fork(SeqId parent, SeqId child) {
  CACHET_CHECK(has(parent) && !has(child));
  Seq c = seqs_.at(parent);
  for (BlockId b : c.table) pool_.incref(b);
  seqs_.emplace(child, std::move(c));
}

void KvCacheManager::adopt(SeqId s, const std::vector<BlockId>& blocks) {
  CACHET_CHECK(!has(s));
  Seq q;
  q.table = blocks;
  q.num_tokens = static_cast<int>(blocks.size()) * block_size_;
  for (BlockId b : blocks) pool_.incref(b);
  seqs_.emplace(s, std::move(q));
}

void KvCacheManager::free(SeqId s) {
  auto it = seqs_.find(s);
  if (it == seqs_.end()) return;
  for (BlockId b : it->second.table) release(b);
  seqs_.erase(it);
}

void KvCacheManager::truncate(SeqId s, int n_tokens) {
  Seq& q = seqs_.at(s);
  CACHET_CHECK(n_tokens >= 0 && n_tokens <= q.num_tokens);
  const size_t keep = static_cast<size_t>((n_tokens + block_size_ - 1) / block_size_);
  for (size_t i = keep; i < q.table.size(); ++i) release(q.table[i]);
  q.table.resize(keep);
  q.num_tokens = n_tokens;
}

void KvCacheManager::release(BlockId b) {
  pool_.decref(b);
  if (pool_.ref_cnt(b) == 0 && !copies_.empty())
    std::erase_if(copies_, [b](const KvBlockCopy& c) { return c.dst == b; });
}

std::vector<KvBlockCopy> KvCacheManager::take_copies() { return std::exchange(copies_, {}); }

std::string KvCacheManager::check(const std::function<int(BlockId)>& external) const {
  std::vector<int> refs(pool_.n_total(), 0);
  for (const auto& [id, q] : seqs_) {
    const int need = (q.num_tokens + block_size_ - 1) / block_size_;
    if (static_cast<int>(q.table.size()) != need)
      return "sequence " + std::to_string(id) + " holds " + std::to_string(q.table.size()) + " blocks for " +
             std::to_string(q.num_tokens) + " tokens";
    for (BlockId b : q.table) refs[b]++;
  }
  for (BlockId b = 0; b < pool_.n_total(); ++b)
    if (refs[b] + (external ? external(b) : 0) != pool_.ref_cnt(b))
      return "block " + std::to_string(b) + " has ref_cnt " + std::to_string(pool_.ref_cnt(b)) + " but " +
             std::to_string(refs[b]) + " references";
  return pool_.check();
}

}  // namespace cachet
