#include "kv/radix_cache.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <set>
#include <tuple>

#include "base/check.h"

namespace cachet {

RadixCache::RadixCache(BlockPool* pool, int block_size) : pool_(pool), block_size_(block_size) {
  CACHET_CHECK(pool_ != nullptr && block_size_ > 0);
  held_.assign(pool_->n_total(), 0);
}

RadixCache::~RadixCache() {
  // Give back the tree's references, locked nodes too (a lock guards against eviction only; a request's blocks stay
  // alive through its own block table).
  std::function<void(Node*)> drop = [&](Node* n) {
    for (auto& [k, c] : n->children) drop(c.get());
    for (BlockId b : n->blocks) pool_->decref(b);
  };
  for (auto& [ns, r] : roots_) drop(r.get());
}

RadixCache::Node* RadixCache::root(uint64_t ns) {
  auto& r = roots_[ns];
  if (!r) {
    r = std::make_unique<Node>();
    r->ns = ns;
  }
  return r.get();
}

void RadixCache::touch(Node* n) {
  const uint64_t now = ++clock_;
  for (; n; n = n->parent) n->last_access = now;
}

RadixCache::Node* RadixCache::split(Node* node, int n_blocks) {
  CACHET_CHECK(n_blocks > 0 && n_blocks < static_cast<int>(node->blocks.size()));
  Node* parent = node->parent;
  auto upper = std::make_unique<Node>();
  upper->parent = parent;
  upper->ns = node->ns;
  upper->tokens.assign(node->tokens.begin(), node->tokens.begin() + static_cast<size_t>(n_blocks) * block_size_);
  upper->blocks.assign(node->blocks.begin(), node->blocks.begin() + n_blocks);
  upper->lock_ref = node->lock_ref;  // every lock through node passes through its new parent
  upper->hits = node->hits;
  upper->last_access = node->last_access;
  node->tokens.erase(node->tokens.begin(), node->tokens.begin() + static_cast<size_t>(n_blocks) * block_size_);
  node->blocks.erase(node->blocks.begin(), node->blocks.begin() + n_blocks);
  // Re-hang: parent -> upper -> node.
  auto it = parent->children.find(first_block(upper->tokens.data()));
  CACHET_CHECK(it != parent->children.end() && it->second.get() == node);
  std::unique_ptr<Node> lower = std::move(it->second);
  lower->parent = upper.get();
  Node* u = upper.get();
  u->children.emplace(first_block(lower->tokens.data()), std::move(lower));
  it->second = std::move(upper);
  return u;
}

int RadixCache::common_blocks(const Node* c, const int32_t* tokens, int max_blocks) const {
  int j = 1;  // the first block matched by the key that found c
  const int cb = static_cast<int>(c->blocks.size());
  while (j < cb && j < max_blocks &&
         std::equal(tokens + static_cast<size_t>(j) * block_size_, tokens + static_cast<size_t>(j + 1) * block_size_,
                    c->tokens.begin() + static_cast<size_t>(j) * block_size_))
    ++j;
  return j;
}

RadixCache::Match RadixCache::match(uint64_t ns, const int32_t* tokens, int n, int max_blocks, bool need_checkpoint) {
  ++queries_;
  query_tokens_ += n;
  Match m;
  auto rit = roots_.find(ns);
  if (rit == roots_.end()) return m;
  Node* cur = rit->second.get();
  const int nb = std::min(n / block_size_, max_blocks);
  int i = 0;
  while (i < nb) {
    auto it = cur->children.find(first_block(tokens + static_cast<size_t>(i) * block_size_));
    if (it == cur->children.end()) break;
    Node* c = it->second.get();
    const int cb = static_cast<int>(c->blocks.size());
    const int j = common_blocks(c, tokens + static_cast<size_t>(i) * block_size_, nb - i);
    if (j < cb) c = split(c, j);
    m.blocks.insert(m.blocks.end(), c->blocks.begin(), c->blocks.end());
    i += j;
    cur = c;
    if (j < cb) break;
  }
  if (need_checkpoint) {  // back up to the deepest node holding a state
    m.kv_tokens = static_cast<int>(m.blocks.size()) * block_size_;
    while (cur->parent && cur->checkpoint < 0) {
      m.blocks.resize(m.blocks.size() - cur->blocks.size());
      cur = cur->parent;
    }
    m.checkpoint = cur->parent ? cur->checkpoint : -1;
  }
  if (cur->parent) {
    m.last = cur;
    ++cur->hits;
    touch(cur);
  }
  m.n_tokens = static_cast<int>(m.blocks.size()) * block_size_;
  hit_tokens_ += m.n_tokens;
  return m;
}

int RadixCache::insert(uint64_t ns, const int32_t* tokens, int n, const BlockId* blocks) {
  Node* cur = root(ns);
  const int nb = n / block_size_;
  int i = 0, added = 0;
  while (i < nb) {
    const int32_t* at = tokens + static_cast<size_t>(i) * block_size_;
    auto it = cur->children.find(first_block(at));
    if (it == cur->children.end()) {
      auto node = std::make_unique<Node>();
      node->parent = cur;
      node->ns = ns;
      node->tokens.assign(at, tokens + static_cast<size_t>(nb) * block_size_);
      node->blocks.assign(blocks + i, blocks + nb);
      for (BlockId b : node->blocks) {
        pool_->incref(b);
        held_[b] = 1;
      }
      added = nb - i;
      n_blocks_ += added;
      Node* raw = node.get();
      cur->children.emplace(first_block(at), std::move(node));
      cur = raw;
      break;
    }
    Node* c = it->second.get();
    const int j = common_blocks(c, at, nb - i);
    if (j < static_cast<int>(c->blocks.size())) c = split(c, j);
    i += j;
    cur = c;
  }
  if (cur->parent) touch(cur);
  return added;
}

bool RadixCache::attach_checkpoint(uint64_t ns, const int32_t* tokens, int n, int32_t slot) {
  auto rit = roots_.find(ns);
  if (rit == roots_.end() || n <= 0 || n % block_size_ != 0) return false;
  Node* cur = rit->second.get();
  const int nb = n / block_size_;
  int i = 0;
  while (i < nb) {
    auto it = cur->children.find(first_block(tokens + static_cast<size_t>(i) * block_size_));
    if (it == cur->children.end()) return false;
    Node* c = it->second.get();
    const int j = common_blocks(c, tokens + static_cast<size_t>(i) * block_size_, nb - i);
    if (j < static_cast<int>(c->blocks.size())) {
      if (i + j < nb) return false;  // the prefix leaves the tree inside c
      c = split(c, j);
    }
    i += j;
    cur = c;
  }
  if (cur->checkpoint >= 0) return false;
  cur->checkpoint = slot;
  ++n_checkpoints_;
  return true;
}

bool RadixCache::drop_lru_checkpoint() {
  // A checkpoint whose node has one child, below which another checkpoint lies, serves only prompts that leave
  // that path between the two (a conversation's next turn resumes from the deeper one): those go first. Among
  // the rest (the deepest of a path, and branch points such as a shared system prompt), the least recently used;
  // on a tie (touch() stamps a whole path at once) the shallower, which the deeper one's path also passes.
  // A locked node's checkpoint may go unless a request locked that node itself (its lock_ref above its
  // children's): that request adopted this checkpoint. The nodes above it are locked only for their blocks; with
  // every conversation of an agent load running, their earlier turns' checkpoints were all locked that way and
  // filled the store.
  Node* victim = nullptr;
  std::tuple<bool, uint64_t, int> best{};
  std::function<bool(Node*, int)> walk = [&](Node* x, int depth) {
    bool below = false;
    int child_locks = 0;
    for (auto& [k, c] : x->children) {
      below = walk(c.get(), depth + 1) || below;
      child_locks += c->lock_ref;
    }
    if (x->parent && x->checkpoint >= 0 && x->lock_ref == child_locks) {
      const bool shadowed = below && x->children.size() == 1;
      const std::tuple<bool, uint64_t, int> key{!shadowed, x->last_access, depth};
      if (!victim || key < best) victim = x, best = key;
    }
    return below || x->checkpoint >= 0;
  };
  for (auto& [ns, r] : roots_) walk(r.get(), 0);
  if (!victim) return false;
  dropped_checkpoints_.push_back(victim->checkpoint);
  victim->checkpoint = -1;
  --n_checkpoints_;
  return true;
}

void RadixCache::lock(Node* node) {
  for (Node* n = node; n && n->parent; n = n->parent) {
    if (n->lock_ref++ == 0) n_locked_blocks_ += static_cast<int>(n->blocks.size());
  }
}

void RadixCache::unlock(Node* node) {
  for (Node* n = node; n && n->parent; n = n->parent) {
    CACHET_CHECK_MSG(n->lock_ref > 0, "RadixCache::unlock without a lock");
    if (--n->lock_ref == 0) n_locked_blocks_ -= static_cast<int>(n->blocks.size());
  }
}

int RadixCache::evict(int n) {
  // Unlocked leaves, least recently used first (ties: the older node pointer order is irrelevant, any is fine).
  using Item = std::pair<uint64_t, Node*>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> leaves;
  std::function<void(Node*)> collect = [&](Node* x) {
    for (auto& [k, c] : x->children) collect(c.get());
    if (x->parent && x->children.empty() && x->lock_ref == 0) leaves.push({x->last_access, x});
  };
  for (auto& [ns, r] : roots_) collect(r.get());
  int dropped = 0;
  last_evicted_access_ = 0;
  while (dropped < n && !leaves.empty()) {
    Node* x = leaves.top().second;
    last_evicted_access_ = std::max(last_evicted_access_, leaves.top().first);
    leaves.pop();
    for (BlockId b : x->blocks) {
      pool_->decref(b);
      held_[b] = 0;
    }
    dropped += static_cast<int>(x->blocks.size());
    n_blocks_ -= static_cast<int>(x->blocks.size());
    if (x->checkpoint >= 0) {
      dropped_checkpoints_.push_back(x->checkpoint);
      --n_checkpoints_;
    }
    Node* parent = x->parent;
    parent->children.erase(first_block(x->tokens.data()));  // destroys x
    if (parent->parent && parent->children.empty() && parent->lock_ref == 0)
      leaves.push({parent->last_access, parent});
  }
  return dropped;
}

uint64_t RadixCache::oldest_evictable_access() const {
  uint64_t oldest = UINT64_MAX;
  std::function<void(const Node*)> walk = [&](const Node* x) {
    for (const auto& [k, c] : x->children) walk(c.get());
    if (x->parent && x->children.empty() && x->lock_ref == 0) oldest = std::min(oldest, x->last_access);
  };
  for (const auto& [ns, r] : roots_) walk(r.get());
  return oldest;
}

void RadixCache::check_node(const Node* n, int* blocks, std::string* err) const {
  int child_locks = 0;
  for (const auto& [key, c] : n->children) {
    if (c->parent != n) *err += "child's parent link is wrong; ";
    if (c->ns != n->ns) *err += "child in another namespace; ";
    if (c->blocks.empty()) *err += "a non-root node without blocks; ";
    if (c->tokens.size() != c->blocks.size() * static_cast<size_t>(block_size_)) *err += "tokens != blocks x size; ";
    if (c->tokens.size() >= static_cast<size_t>(block_size_) &&
        key != std::vector<int32_t>(c->tokens.begin(), c->tokens.begin() + block_size_))
      *err += "child key is not its first block; ";
    if (c->last_access > n->last_access && n->parent) *err += "child used more recently than its parent; ";
    child_locks += c->lock_ref;
    check_node(c.get(), blocks, err);
  }
  if (n->parent) {
    if (n->lock_ref < child_locks) *err += "lock_ref below its children's; ";
    for (BlockId b : n->blocks) {
      if (b < 0 || b >= pool_->n_total()) {
        *err += "block id out of range; ";
        continue;
      }
      if (pool_->ref_cnt(b) < 1) *err += "a held block has no reference; ";
      if (!held_[b]) *err += "a held block is not marked held; ";
    }
    *blocks += static_cast<int>(n->blocks.size());
  }
}

std::string RadixCache::check() const {
  std::string err;
  int blocks = 0;
  std::set<BlockId> seen;
  int locked = 0, checkpoints = 0;
  std::set<int32_t> slots;
  std::function<void(const Node*)> walk = [&](const Node* n) {
    for (const auto& [k, c] : n->children) walk(c.get());
    if (!n->parent) return;
    if (n->checkpoint >= 0) {
      ++checkpoints;
      if (!slots.insert(n->checkpoint).second) err += "a state checkpoint held by two nodes; ";
    }
    for (BlockId b : n->blocks)
      if (!seen.insert(b).second) err += "a block held twice by the tree; ";
    if (n->lock_ref > 0) locked += static_cast<int>(n->blocks.size());
  };
  for (const auto& [ns, r] : roots_) {
    if (r->lock_ref != 0 || !r->blocks.empty()) err += "a root with blocks or locks; ";
    check_node(r.get(), &blocks, &err);
    walk(r.get());
  }
  if (blocks != n_blocks_) err += "block count " + std::to_string(n_blocks_) + " != " + std::to_string(blocks) + "; ";
  if (locked != n_locked_blocks_) err += "locked block count is off; ";
  if (checkpoints != n_checkpoints_) err += "checkpoint count is off; ";
  if (std::count(held_.begin(), held_.end(), 1) != n_blocks_) err += "held marks != blocks in the tree; ";
  return err;
}

std::vector<RadixCache::NodeInfo> RadixCache::largest(int max_nodes) const {
  std::vector<NodeInfo> all;
  std::function<void(const Node*, int)> walk = [&](const Node* n, int depth) {
    if (n->parent) {
      NodeInfo i{n->ns, depth, static_cast<int>(n->tokens.size()), n->hits, n->lock_ref, {}};
      i.first_tokens.assign(n->tokens.begin(), n->tokens.begin() + std::min<size_t>(32, n->tokens.size()));
      all.push_back(std::move(i));
    }
    for (const auto& [k, c] : n->children) walk(c.get(), depth + static_cast<int>(n->tokens.size()));
  };
  for (const auto& [ns, r] : roots_) walk(r.get(), 0);
  std::sort(all.begin(), all.end(), [](const NodeInfo& a, const NodeInfo& b) {
    return a.n_tokens != b.n_tokens ? a.n_tokens > b.n_tokens : a.hits > b.hits;
  });
  if (static_cast<int>(all.size()) > max_nodes) all.resize(max_nodes);
  return all;
}

}  // namespace cachet
