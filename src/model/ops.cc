#include "model/ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "base/check.h"
#include "kernels/attn_query.h"
#include "kernels/kernels.h"

namespace cachet {

void rms_norm(const float* x, const float* w, float* y, int n_rows, int64_t n, float eps) {
  for (int r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    // The sum of squares in double, in eight interleaved partial sums: one chain of dependent adds took four
    // cycles an element (2.7% of a 64-sequence decode of the default model). Baseline code, so the same order
    // and bits on every CPU.
    double part[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) part[j] += static_cast<double>(xr[i + j]) * xr[i + j];
    double ss = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
    for (; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    if (w) {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale * w[i];
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale;
    }
  }
}

void layer_norm(const float* x, const float* w, const float* b, float* y, int n_rows, int64_t n, float eps) {
  for (int r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += xr[i];
    const double mean = sum / static_cast<double>(n);
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += (xr[i] - mean) * (xr[i] - mean);
    const float m = static_cast<float>(mean);
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) * scale * w[i] + (b ? b[i] : 0.0f);
  }
}

void kv_store(KvType t, const float* src, uint8_t* dst, int64_t n, int head_dim) {
  if (t == KvType::kF32 || t == KvType::kF16) return kernels().kv_store(kv_layout(t), src, dst, static_cast<int>(n));
  kv_quantize_row(t, src, dst, n, head_dim);
}

void silu_mul(float* g, const float* u, int64_t n) { kernels().silu_mul(g, u, n); }
void gelu_mul(float* g, const float* u, int64_t n) { kernels().gelu_mul(g, u, n); }

void swiglu_oai_mul(float* g, float* u, int64_t n) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    g[i] = kAlpha * std::min(g[i], kLimit);
    u[i] = (std::clamp(u[i], -kLimit, kLimit) + 1.0f) / kAlpha;
  }
  kernels().silu_mul(g, u, n);
}

Glu glu_of(const std::string& ffn_act) {
  if (ffn_act == "relu2") return Glu::kRelu2;
  return ffn_act == "gelu" ? Glu::kGelu : ffn_act == "swiglu_oai" ? Glu::kSwigluOai : Glu::kSilu;
}

void glu_mul(Glu act, float* g, float* u, int64_t n) {
  switch (act) {
    case Glu::kSilu: return silu_mul(g, u, n);
    case Glu::kGelu: return gelu_mul(g, u, n);
    case Glu::kSwigluOai: return swiglu_oai_mul(g, u, n);
    case Glu::kRelu2:
      for (int64_t i = 0; i < n; ++i) {
        const float r = g[i] > 0.0f ? g[i] : 0.0f;
        g[i] = r * r * u[i];
      }
      return;
  }
}

void add_bias(float* x, const float* b, int n_rows, int64_t n) {
  for (int r = 0; r < n_rows; ++r)
    for (int64_t i = 0; i < n; ++i) x[r * n + i] += b[i];
}

void softcap(float* x, int64_t n, float c) {
  for (int64_t i = 0; i < n; ++i) x[i] = c * std::tanh(x[i] / c);
}

namespace {

// Per-thread scratch for dequantized weight tiles and score rows; grows, never shrinks.
thread_local AlignedBuffer<float> t_scratch;

float* scratch(size_t n) {
  if (t_scratch.size() < n) t_scratch.resize(n);
  return t_scratch.data();
}

constexpr int kRowGrain = 4;
// Positions per attention tile (KV block sizes must be multiples of it for paged == contiguous, bit for bit).
constexpr int kAttnTile = kAttnTileMax;
// Prefill tiles: this many bytes of dequantized weights per tile (fits L2 beside a few activation rows).
constexpr int64_t kTileBytes = 192 * 1024;
// Below this many tokens, decode-style dot products beat dequantize-then-GEMM.
constexpr int kGemmMinTokens = 4;

}  // namespace

void pack_weight(ThreadPool& pool, TensorView* w, AlignedBuffer<uint8_t>* storage) {
  if (!packable(w->type)) return;
  const int64_t K = w->ne[0], N = w->n_rows();
  const int64_t n_groups = (N + kPackRows - 1) / kPackRows;
  const FloatPack fp = kernels().float_pack;
  const size_t gb = packed_group_bytes(w->type, K, fp);
  storage->resize(gb * n_groups);
  uint8_t* dst = storage->data();
  pool.parallel_for(n_groups, [&](int, int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int rows = static_cast<int>(std::min<int64_t>(kPackRows, N - g * kPackRows));
      repack_group(w->type, w->row(g * kPackRows), w->row_bytes, rows, K, fp, dst + g * gb);
    }
  });
  w->packed = dst;
  w->packed_group_bytes = gb;
}

namespace {

thread_local AlignedBuffer<ActQ8> t_act;
thread_local AlignedBuffer<uint16_t> t_act_bf16;

// The activations a packed matmul over weights of type `t` reads, for n_tokens rows of K floats: int8 blocks
// (ActQ8) for the block types; for F16/BF16, bf16 pairs (rows of K rounded up to even, the pad zero) where the
// table packs bf16 pairs, else the f32 rows themselves. Converted on the calling thread when there is too
// little work to share, or when `pool` is null (into the calling thread's own buffers).
const void* packed_activations(ThreadPool* pool, DType t, const float* x, int n_tokens, int64_t K) {
  const Kernels& k = kernels();
  const auto over_tokens = [&](const auto& row) {
    if (pool == nullptr || n_tokens * K <= (1 << 14)) {
      for (int64_t i = 0; i < n_tokens; ++i) row(i);
    } else {
      pool->parallel_for(n_tokens, [&](int, int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) row(i);
      });
    }
  };
  if (packed_is_float(t) && k.float_pack == FloatPack::kHalfRows) return x;
  if (packed_is_float(t)) {
    const int64_t kp = (K + 1) / 2 * 2;
    if (t_act_bf16.size() < static_cast<size_t>(n_tokens * kp)) t_act_bf16.resize(n_tokens * kp);
    uint16_t* act = t_act_bf16.data();
    over_tokens([&](int64_t i) {
      k.round_bf16(x + i * K, K, act + i * kp);
      if (kp != K) act[i * kp + K] = 0;
    });
    return act;
  }
  const int64_t nb = K / 32;
  if (t_act.size() < static_cast<size_t>(n_tokens * nb)) t_act.resize(n_tokens * nb);
  ActQ8* act = t_act.data();
  const int bps = act_blocks_per_scale(t, k.k_sums);
  over_tokens([&](int64_t i) { k.quantize_act(x + i * K, K, bps, act + i * nb); });
  return act;
}

// Batches up to kLocalActTokens tokens convert their activations on every thread (packed_groups), on pools of
// at most kLocalActThreads threads whose weights have at least kLocalActRowsPerThread rows a thread. Converting a
// token's K floats costs a thread about what 40 rows of K multiply-adds do (bench_kernels quantize_act against
// packed_dot, Zen 4), so 128 rows a thread bound the copy to ~30% of its matmul, ~10% on the default model's
// matrices with 2 threads, where the shared conversion measured ~3x slower per float than alone (its lines
// written after the other thread read them) plus a parallel region. With n threads each copy is n times the
// shared one's share: past 4 threads the shared conversion is the cheaper.
constexpr int kLocalActTokens = 64;
constexpr int kLocalActThreads = 4;
constexpr int64_t kLocalActRowsPerThread = 128;

// The packed paths: each thread takes whole 16-row groups of the weights, in chunks of tokens, over the
// activations x (n_tokens rows of K floats) converted as the weights' type reads them (packed_activations).
void packed_groups(ThreadPool& pool, const MatmulOut* outs, int n_outs, const float* x, int64_t K,
                   int n_tokens) {
  const Kernels& k = kernels();
  const int64_t nb = K / 32, n_pairs = (K + 1) / 2;
  int64_t first[8], total = 0;
  CACHET_CHECK(n_outs <= 8);
  for (int i = 0; i < n_outs; ++i) {
    first[i] = total;
    total += (outs[i].w->n_rows() + kPackRows - 1) / kPackRows;
  }
  constexpr int kTokenChunk = 64;
  // A decode-sized batch's activations are converted by every thread for itself, into its own buffer, on its
  // first chunk: no parallel region of their own, and no thread writes lines the other threads read in the
  // matmul before (in a 64-sequence decode the shared conversion, split across threads, spent most of its time
  // waiting for those lines). Larger batches convert once, split across the threads.
  const int n_thr = pool.n_threads();
  const bool local = n_tokens <= kLocalActTokens && n_thr > 1 && n_thr <= kLocalActThreads &&
                     total * kPackRows >= kLocalActRowsPerThread * n_thr;
  const void* shared = local ? nullptr : packed_activations(&pool, outs[0].w->type, x, n_tokens, K);
  thread_local std::vector<const void*> t_acts;
  t_acts.assign(n_thr, shared);
  const void** acts = t_acts.data();
  // Groups are independent: a thread that finishes early takes the rest of a slower one's (about 8 chunks each).
  const int64_t grain = std::max<int64_t>(1, total / (8 * pool.n_threads()));
  pool.parallel_chunks(total, [&](int ti, int64_t g0, int64_t g1) {
    if (acts[ti] == nullptr) acts[ti] = packed_activations(nullptr, outs[0].w->type, x, n_tokens, K);
    const void* act = acts[ti];
    float tmp[kTokenChunk * kPackRows];
    for (int t0 = 0; t0 < n_tokens; t0 += kTokenChunk) {
      const int nt = std::min(kTokenChunk, n_tokens - t0);
      int i = 0;
      for (int64_t gg = g0; gg < g1; ++gg) {
        while (i + 1 < n_outs && gg >= first[i + 1]) ++i;
        const TensorView& w = *outs[i].w;
        float* y = outs[i].y;
        const int64_t N = w.n_rows(), g = gg - first[i];
        const uint8_t* grp = w.packed + g * w.packed_group_bytes;
        const int64_t r0 = g * kPackRows;
        const bool direct = r0 + kPackRows <= N;
        float* dst = direct ? y + t0 * N + r0 : tmp;
        const int64_t ds = direct ? N : kPackRows;
        if (packed_is_float(w.type) && k.float_pack == FloatPack::kHalfRows) {
          k.packed_dot_half(w.type, grp, K, static_cast<const float*>(act) + t0 * K, K, nt, dst, ds);
        } else if (packed_is_float(w.type)) {
          k.packed_dot_bf16(grp, n_pairs, static_cast<const uint32_t*>(act) + t0 * n_pairs, n_pairs, nt, dst, ds);
        } else {
          k.packed_dot(w.type, grp, nb, static_cast<const ActQ8*>(act) + t0 * nb, nb, nt, dst, ds);
        }
        if (!direct) {
          for (int t = 0; t < nt; ++t)
            for (int64_t r = 0; r < N - r0; ++r) y[(t0 + t) * N + r0 + r] = tmp[t * kPackRows + r];
        }
      }
    }
  }, grain);
}

void matmul_packed(ThreadPool& pool, const TensorView& w, const float* x, int n_tokens, float* y) {
  const MatmulOut out{&w, y};
  packed_groups(pool, &out, 1, x, w.ne[0], n_tokens);
}

}  // namespace

namespace {
std::atomic<int64_t> g_unpacked_matmuls{0};
}  // namespace

int64_t unpacked_matmuls() { return g_unpacked_matmuls.load(std::memory_order_relaxed); }

void matmul(ThreadPool& pool, const TensorView& w, const float* x, int n_tokens, float* y) {
  if (w.packed) return matmul_packed(pool, w, x, n_tokens, y);
  if (packable(w.type)) g_unpacked_matmuls.fetch_add(1, std::memory_order_relaxed);
  const Kernels& k = kernels();
  const int64_t K = w.ne[0];
  const int64_t N = w.n_rows();
  if (n_tokens < kGemmMinTokens) {
    pool.parallel_for(
        N,
        [&](int, int64_t r0, int64_t r1) {
          float* tmp = scratch(r1 - r0);
          for (int t = 0; t < n_tokens; ++t) {
            k.dot_rows(w.type, w.row(r0), w.row_bytes, static_cast<int>(r1 - r0), x + t * K, K, tmp);
            std::copy(tmp, tmp + (r1 - r0), y + t * N + r0);
          }
        },
        kRowGrain);
    return;
  }
  const int64_t lda = K;
  int64_t tile = std::clamp<int64_t>(kTileBytes / (K * 4) / kRowGrain * kRowGrain, kRowGrain, 256);
  pool.parallel_for(
      N,
      [&](int, int64_t r0, int64_t r1) {
        float* buf = w.type == DType::kF32 ? nullptr : scratch(tile * K);
        for (int64_t j0 = r0; j0 < r1; j0 += tile) {
          int64_t nj = std::min(tile, r1 - j0);
          const float* b;
          if (buf) {
            for (int64_t j = 0; j < nj; ++j) k.dequantize_row(w.type, w.row(j0 + j), buf + j * K, K);
            b = buf;
          } else {
            b = reinterpret_cast<const float*>(w.row(j0));
          }
          k.gemm_nt(n_tokens, static_cast<int>(nj), K, x, lda, b, K, y + j0, N);
        }
      },
      kRowGrain);
}

// Flash-style attention: positions are visited in tiles of kAttnTile aligned to absolute positions, with an
// online softmax (running max, running sum, rescaled accumulator), so no score row longer than a tile is ever
// materialized. Tiles never straddle a span as long as spans (KV blocks) are multiples of kAttnTile, so a
// paged cache and the contiguous one compute the same operations in the same order.
//
// Positions are further cut into chunks of kAttnChunk at absolute multiples of it. Each chunk's softmax state
// starts fresh, and the chunks are merged in order (merge_chunk). The operations are therefore the same
// whether one thread walks all of a head's chunks or the chunks are spread over threads and merged afterwards
// (flash-decoding), so a decode step with few heads uses every core at depth and its logits still do not depend
// on what else shares its batch.
namespace {

constexpr int kAttnChunk = 256;
static_assert(kAttnChunk % kAttnTile == 0);
// Tiles ahead of the one being computed whose K/V rows are prefetched (2 and 4 measured alike, 8 worse).
constexpr int kAttnPrefetch = 2;
// Consecutive tokens of one sequence that walk a KV head's tiles together (prefill: a tile read from memory
// once serves them all).
constexpr int kAttnQueryBlock = 16;
// Attention with at most this many (query head, position) pairs runs on the calling thread.
constexpr int64_t kAttnInlineWork = 1024;

// One tile of K and V rows of one head widened to f32 (quantized and bf16 caches).
thread_local AlignedBuffer<float> t_tile;

// The softmax state of `group` heads: max, sum and unnormalized output.
struct HeadState {
  float* m;
  float* l;
  float* acc;
};

void reset_state(const HeadState& s, int group, int d) {
  std::fill(s.acc, s.acc + static_cast<size_t>(group) * d, 0.0f);
  std::fill(s.m, s.m + group, -std::numeric_limits<float>::infinity());
  std::fill(s.l, s.l + group, 0.0f);
}

// The kernel reads most type pairs in place (kernels.h attn_tile_reads); for the others (mixed pairs) each
// tile's rows of a head are widened to f32 first (t_tile: K rows, then V rows), still in the turned basis of a
// quantized cache (attention() turns q and the output).
void widen_tile(KvTypes types, const uint8_t* kt, const uint8_t* vt, const KvSpan& sp, int nt, int d) {
  if (t_tile.size() < static_cast<size_t>(2 * kAttnTile * d)) t_tile.resize(2 * kAttnTile * d);
  float* kbuf = t_tile.data();
  float* vbuf = t_tile.data() + static_cast<size_t>(kAttnTile) * d;
  for (int i = 0; i < nt; ++i) {
    kv_dequantize_row_raw(types.k, kt + i * sp.k_stride, kbuf + static_cast<size_t>(i) * d, d);
    kv_dequantize_row_raw(types.v, vt + i * sp.v_stride, vbuf + static_cast<size_t>(i) * d, d);
  }
}

// The tile that starts at position p of a walk ending at p1: its span, its offset in the span and its length.
// Tiles end at absolute multiples of kAttnTile and at span ends (a window's first tile is partial), so every
// cache layout cuts a token's positions into the same tiles.
struct TileAt {
  KvSpan sp;
  int off, n;
};
TileAt tile_at(const KvView& seq, int layer, int p, int p1) {
  const int len = seq.span_len();
  const int sp_i = p / len;
  const KvSpan sp = seq.span(layer, sp_i, p1);
  const int off = p - sp_i * len;
  return {sp, off, std::min({kAttnTile - p % kAttnTile, sp.n - off, p1 - p})};
}

// The tiles of positions [p0, p1) as attn_chunk reads them (tile_at's cuts), at most `cap` (fewer: only the
// first of them, a prefetch's); their number. A chunk's positions are at most kChunkTiles tiles: spans are whole
// tiles (KvBlockStorage checks its block size).
constexpr int kChunkTiles = kAttnChunkRows / kAttnTile;
int chunk_tiles(const KvView& seq, int layer, int p0, int p1, AttnTile* out, int cap = kChunkTiles) {
  int n = 0, p = p0;
  for (; p < p1 && n < cap; ++n) {
    const auto [sp, off, nt] = tile_at(seq, layer, p, p1);
    out[n] = {sp.k + static_cast<size_t>(off) * sp.k_stride, sp.v + static_cast<size_t>(off) * sp.v_stride,
              sp.k_stride, sp.v_stride, nt};
    p += nt;
  }
  CACHET_CHECK(cap < kChunkTiles || p >= p1);
  return n;
}

// A K/V walk from memory runs at well under the read bandwidth (bench_attention, 30 layers' caches): the rows
// of KV heads [kvh0, kvh1) of the tile kAttnPrefetch tiles after position p are asked for into L2, looked up
// through the cache (a paged cache's next blocks too: with 16-position blocks a tile is a whole span) and
// walking on to `end` (past the chunk, where the same thread walks the next chunk). The lines go out in
// `parts` pieces, one before each head's tile is computed: a whole tile's lines at once (~100 for SmolLM2's
// q8_0 rows) filled the core's miss buffers and stalled it on the prefetch instructions themselves (16k
// positions, 2 threads, per layer: q8_0 617-637 -> 467-474 us, f16 796-830 -> 736-788 us; docs/kv_quant.md).
class TilePrefetch {
 public:
  TilePrefetch(const KvView& seq, int layer, int p, int end, int kvh0, int kvh1, size_t k_head, size_t v_head) {
    const int pa = p + kAttnPrefetch * kAttnTile;
    if (pa >= end) return;
    const auto [sp, off, n] = tile_at(seq, layer, pa, end);
    n_ = n;
    k_ = sp.k + static_cast<size_t>(off) * sp.k_stride + kvh0 * k_head;
    v_ = sp.v + static_cast<size_t>(off) * sp.v_stride + kvh0 * v_head;
    k_stride_ = sp.k_stride;
    v_stride_ = sp.v_stride;
    k_bytes_ = (kvh1 - kvh0) * k_head;
    v_bytes_ = (kvh1 - kvh0) * v_head;
    whole_ = k_bytes_ == k_stride_ && v_bytes_ == v_stride_;
  }
  // Piece i of `parts`: whole rows (every KV head) are one run of bytes, each line asked for once; else rows.
  void part(int i, int parts) const {
    if (n_ == 0) return;
    if (whole_) {
      run(k_, n_ * k_stride_, i, parts);
      run(v_, n_ * v_stride_, i, parts);
      return;
    }
    for (int r = n_ * i / parts; r < n_ * (i + 1) / parts; ++r) {
      run(k_ + r * k_stride_, k_bytes_, 0, 1);
      run(v_ + r * v_stride_, v_bytes_, 0, 1);
    }
  }

 private:
  static void run(const uint8_t* p, size_t bytes, int i, int parts) {
    const auto base = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
    const size_t lines = (reinterpret_cast<uintptr_t>(p) + bytes - base + 63) / 64;
    for (size_t l = lines * i / parts; l < lines * (i + 1) / parts; ++l)
      __builtin_prefetch(reinterpret_cast<const void*>(base + l * 64), 0, 2);
  }
  const uint8_t *k_ = nullptr, *v_ = nullptr;
  size_t k_stride_ = 0, v_stride_ = 0, k_bytes_ = 0, v_bytes_ = 0;
  int n_ = 0;
  bool whole_ = false;
};

// A KV head's query rows (group x head_dim floats) and, for integer Q.K, the same rows quantized per 32-block.
struct QueryRows {
  const float* f;
  const ActQ8* qq;
};

// What a walk needs of a cache's types: bytes of one head in a K and a V row, whether the kernel reads the pair
// in place (else tiles are widened first), and the byte stride of a widened row.
struct CacheLayout {
  KvTypes types;
  size_t k_head, v_head;
  bool direct;
  size_t row;
  CacheLayout(KvTypes t, int d)
      : types(t), k_head(kv_row_bytes(t.k, d)), v_head(kv_row_bytes(t.v, d)),
        direct(attn_tile_reads(kv_layout(t.k), kv_layout(t.v))), row(static_cast<size_t>(d) * 4) {}
};

// Fresh state, then every tile of positions [p0, p1) of KV heads [kvh0, kvh1): for each tile, each head in
// turn, so one thread consumes whole K/V rows (all heads of a position) front to back, a sequential stream.
// Prefetch looks ahead up to pf_end >= p1 (the walk the thread does next).
// q(kvh) and st(kvh) give a KV head's query rows and softmax state. Per head, the same tiles in the same order
// as a head walked alone.
template <typename QueryOf, typename StateOf>
void attend_chunk(const Kernels& k, const AttentionArgs& a, const KvView& seq, int kvh0, int kvh1, QueryOf q, int group,
                  float scale, int p0, int p1, int pf_end, StateOf st) {
  const CacheLayout cl(seq.types(), a.head_dim);
  const auto& [types, k_head, v_head, direct, row] = cl;
  if (direct) {
    // Up to kAttnChunkHeads KV heads a call: the kernel may read whole rows. q(h) and st(h) are a fixed stride
    // apart from head to head (checked). Its prefetch runs on into the thread's next chunk.
    AttnTile tiles[kChunkTiles], next[kChunkTiles];
    const int nt = chunk_tiles(seq, a.layer, p0, p1, tiles);
    const int nn = chunk_tiles(seq, a.layer, p1, pf_end, next);
    for (int h0 = kvh0; h0 < kvh1; h0 += kAttnChunkHeads) {
      const int n = std::min(kAttnChunkHeads, kvh1 - h0);
      const QueryRows qr = q(h0);
      const HeadState s = st(h0);
      AttnChunk c{tiles, nt, h0 * k_head, h0 * v_head};
      c.n_heads = n, c.k_head = k_head, c.v_head = v_head;
      if (n > 1) {
        c.q_stride = static_cast<size_t>(q(h0 + 1).f - qr.f);
        c.state_stride = static_cast<size_t>(st(h0 + 1).acc - s.acc);
      }
      for (int h = 1; h < n; ++h) {
        const HeadState sh = st(h0 + h);
        CACHET_CHECK(q(h0 + h).f == qr.f + h * c.q_stride && sh.acc == s.acc + h * c.state_stride &&
                      sh.m == s.m + h * c.state_stride && sh.l == s.l + h * c.state_stride);
      }
      if (h0 + n < kvh1) {
        c.next = tiles, c.n_next = nt, c.next_k_off = (h0 + n) * k_head, c.next_v_off = (h0 + n) * v_head;
      } else {
        c.next = next, c.n_next = nn, c.next_k_off = kvh0 * k_head, c.next_v_off = kvh0 * v_head;
      }
      k.attn_chunk(kv_layout(types.k), kv_layout(types.v), c, qr.f, qr.qq, group, a.head_dim, scale, a.softcap, s.m,
                   s.l, s.acc);
    }
    return;
  }
  for (int h = kvh0; h < kvh1; ++h) reset_state(st(h), group, a.head_dim);
  for (int p = p0; p < p1;) {
    const auto [sp, off, nt] = tile_at(seq, a.layer, p, p1);
    const TilePrefetch pf(seq, a.layer, p, pf_end, kvh0, kvh1, k_head, v_head);
    for (int h = kvh0; h < kvh1; ++h) {
      pf.part(h - kvh0, kvh1 - kvh0);
      const uint8_t* kt = sp.k + static_cast<size_t>(off) * sp.k_stride + h * k_head;
      const uint8_t* vt = sp.v + static_cast<size_t>(off) * sp.v_stride + h * v_head;
      const HeadState s = st(h);
      const QueryRows qr = q(h);
      widen_tile(types, kt, vt, sp, nt, a.head_dim);
      const float* kbuf = t_tile.data();
      const float* vbuf = kbuf + static_cast<size_t>(kAttnTile) * a.head_dim;
      k.attn_tile(DType::kF32, DType::kF32, kbuf, row, vbuf, row, nt, qr.f, nullptr, group, a.head_dim, scale,
                  a.softcap, s.m, s.l, s.acc);
    }
    p += nt;
  }
}

// The tokens of a query block for one KV head: each with its query rows, softmax state and positions [p0, p1).
struct BlockQuery {
  QueryRows q;
  HeadState st;
  int p0, p1;  // empty (p0 >= p1): the token has no positions in this chunk
};

// attend_chunk for one KV head and several tokens of one sequence (a prefill's query block), within one chunk.
// Each token gets the pieces a walk of its own range would cut (tiles end at absolute multiples of kAttnTile and
// at span ends; its own range clips the first and last), in the same order: results equal a token walked alone.
// Kernel-read types: the chunk's tiles once, each token's call reads them from L2. Widened types: the union of
// the ranges tile by tile, each tile widened once and, in L1, serving every token whose range it meets.
void attend_tokens(const Kernels& k, const AttentionArgs& a, const KvView& seq, int kvh, std::span<BlockQuery> qs,
                   int group, float scale) {
  int lo = std::numeric_limits<int>::max(), hi = 0;
  for (const BlockQuery& b : qs)
    if (b.p0 < b.p1) lo = std::min(lo, b.p0), hi = std::max(hi, b.p1);
  const CacheLayout cl(seq.types(), a.head_dim);
  const auto& [types, k_head, v_head, direct, row] = cl;
  if (direct) {
    AttnTile tiles[kChunkTiles], mine[kChunkTiles];
    const int nt = lo < hi ? chunk_tiles(seq, a.layer, lo, hi, tiles) : 0;
    bool first = true;
    for (const BlockQuery& b : qs) {
      if (b.p0 >= b.p1) {
        reset_state(b.st, group, a.head_dim);
        continue;
      }
      int n = 0;
      for (int j = 0, p = lo; j < nt; p += tiles[j++].n) {
        const int s0 = std::max(p, b.p0), s1 = std::min(p + tiles[j].n, b.p1);
        if (s0 >= s1) continue;
        const AttnTile& t = tiles[j];
        const size_t skip = static_cast<size_t>(s0 - p);
        mine[n++] = {t.k + skip * t.k_stride, t.v + skip * t.v_stride, t.k_stride, t.v_stride, s1 - s0};
      }
      AttnChunk c{mine, n, kvh * k_head, kvh * v_head};
      c.prefetch = first;  // the first token's walk brings the chunk in
      c.keys_again = !first;
      k.attn_chunk(kv_layout(types.k), kv_layout(types.v), c, b.q.f, b.q.qq, group, a.head_dim, scale, a.softcap,
                   b.st.m, b.st.l, b.st.acc);
      first = false;
    }
    return;
  }
  for (const BlockQuery& b : qs) reset_state(b.st, group, a.head_dim);
  for (int p = lo; p < hi;) {
    const auto [sp, off, nt] = tile_at(seq, a.layer, p, hi);
    TilePrefetch(seq, a.layer, p, hi, kvh, kvh + 1, k_head, v_head).part(0, 1);
    const uint8_t* kt = sp.k + static_cast<size_t>(off) * sp.k_stride + kvh * k_head;
    const uint8_t* vt = sp.v + static_cast<size_t>(off) * sp.v_stride + kvh * v_head;
    widen_tile(types, kt, vt, sp, nt, a.head_dim);
    const float* kbuf = t_tile.data();
    const float* vbuf = kbuf + static_cast<size_t>(kAttnTile) * a.head_dim;
    for (const BlockQuery& b : qs) {
      const int s0 = std::max(p, b.p0), s1 = std::min(p + nt, b.p1);
      if (s0 >= s1) continue;
      const int skip = s0 - p;
      k.attn_tile(DType::kF32, DType::kF32, kbuf + static_cast<size_t>(skip) * a.head_dim, row,
                  vbuf + static_cast<size_t>(skip) * a.head_dim, row, s1 - s0, b.q.f, nullptr, group, a.head_dim,
                  scale, a.softcap, b.st.m, b.st.l, b.st.acc);
    }
    p += nt;
  }
}

// into = merge(into, c), per head: both rescaled to the larger max. `first`: into is empty, take c as it is.
void merge_chunk(const HeadState& into, const HeadState& c, int group, int d, bool first) {
  for (int g = 0; g < group; ++g) {
    float* ia = into.acc + static_cast<size_t>(g) * d;
    const float* ca = c.acc + static_cast<size_t>(g) * d;
    if (first) {
      std::copy(ca, ca + d, ia);
      into.m[g] = c.m[g];
      into.l[g] = c.l[g];
      continue;
    }
    const float m = std::max(into.m[g], c.m[g]);
    const float wa = std::exp(into.m[g] - m), wb = std::exp(c.m[g] - m);
    for (int j = 0; j < d; ++j) ia[j] = ia[j] * wa + ca[j] * wb;
    into.l[g] = into.l[g] * wa + c.l[g] * wb;
    into.m[g] = m;
  }
}

void write_heads(const AttentionArgs& a, int t, int kvh, int group, const HeadState& st) {
  const int q_dim = a.n_head * a.head_dim;
  for (int g = 0; g < group; ++g) {
    const int h = kvh * group + g;
    float* out = a.out + static_cast<int64_t>(t) * q_dim + h * a.head_dim;
    // A sink adds e^(sink - m) to the softmax's denominator (m: the running max the sums are relative to).
    const float inv = 1.0f / (a.sinks ? st.l[g] + std::exp(a.sinks[h] - st.m[g]) : st.l[g]);
    for (int d = 0; d < a.head_dim; ++d) out[d] = st.acc[static_cast<size_t>(g) * a.head_dim + d] * inv;
  }
}

thread_local AlignedBuffer<float> t_partials;
thread_local std::vector<std::pair<int, int>> t_blocks, t_zigzag;  // query blocks: [first token, end)
thread_local AlignedBuffer<float> t_rotated;  // q turned into a q4r cache's basis
thread_local std::vector<ActQ8> t_query_q8;   // q quantized for integer Q.K (kernels/attn_query.h)

void attention_rows(ThreadPool& pool, const AttentionArgs& a, const ActQ8* qq);

}  // namespace

void attention(ThreadPool& pool, const AttentionArgs& args) {
  // A q4r cache holds K and V turned block by block (kv/kv_type.h): q.k is the same with q turned alike, and the
  // output comes back turned, so it is turned back at the end.
  const KvTypes types = args.seqs[0].types();
  AttentionArgs a = args;
  const int64_t q_floats = static_cast<int64_t>(a.n_tokens) * a.n_head * a.head_dim;
  if (kv_rotated(types.k)) {
    if (t_rotated.size() < static_cast<size_t>(q_floats)) t_rotated.resize(q_floats);
    std::copy(a.q, a.q + q_floats, t_rotated.data());
    kv_rotate(t_rotated.data(), q_floats, a.head_dim);
    a.q = t_rotated.data();
  }
  // Block-quantized keys read in place take integer Q.K (kernels.h attn_tile): every query row quantized per
  // 32-block (kernels/attn_query.h) once here, not once per tile.
  const ActQ8* qq = nullptr;
  if (CacheLayout(types, a.head_dim).direct && attn_integer_keys(kv_layout(types.k))) {
    t_query_q8.resize(static_cast<size_t>(q_floats / 16));
    quantize_query(a.q, q_floats, t_query_q8.data());
    qq = t_query_q8.data();
  }
  attention_rows(pool, a, qq);
  if (kv_rotated(types.v)) kv_unrotate(a.out, q_floats, a.head_dim);
}

namespace {

void attention_rows(ThreadPool& pool, const AttentionArgs& a, const ActQ8* qq) {
  const Kernels& k = kernels();
  const int group = a.n_head / a.n_head_kv;
  const int q_dim = a.n_head * a.head_dim;
  const float scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  // Token t attends to positions [lo(t), hi(t)]: up to itself (causal) or its sequence's end (bidirectional),
  // within the window behind it or, centred, either side of it.
  const int half = a.window / 2;
  auto lo = [&](int t) {
    if (a.window <= 0) return 0;
    return std::max(0, a.symmetric_window ? a.positions[t] - half : a.positions[t] - a.window + 1);
  };
  auto hi = [&](int t) {
    if (!a.ends) return a.positions[t];
    return a.window > 0 && a.symmetric_window ? std::min(a.ends[t], a.positions[t] + half) : a.ends[t];
  };
  const size_t state_floats = static_cast<size_t>(group) * a.head_dim + 2 * group;
  auto state_at = [&](float* base) {
    return HeadState{base + static_cast<size_t>(group) * a.head_dim, base + static_cast<size_t>(group) * a.head_dim + group,
                     base};
  };
  auto query = [&](int t, int kvh) {
    const int64_t at = static_cast<int64_t>(t) * q_dim + static_cast<int64_t>(kvh) * group * a.head_dim;
    return QueryRows{a.q + at, qq != nullptr ? qq + at / 16 : nullptr};
  };
  int max_chunks = 0;
  for (int t = 0; t < a.n_tokens; ++t) max_chunks = std::max(max_chunks, hi(t) / kAttnChunk + 1);
  const int64_t heads = static_cast<int64_t>(a.n_tokens) * a.n_head_kv;

  // Little work (short contexts): on the calling thread; handing out a few microseconds of work costs more.
  int64_t work = 0;
  for (int t = 0; t < a.n_tokens; ++t) work += static_cast<int64_t>(hi(t) + 1 - lo(t)) * a.n_head;
  const bool inline_only = work <= kAttnInlineWork;
  // Decode tokens (no two of one sequence) walk whole K/V rows by chunks too when their partial states stay
  // small: a KV head's slice of a block-quantized row (68 bytes of q8_0 at head dim 64) straddles cache lines,
  // so walking each head alone reads most lines twice.
  bool decode_only = true;
  for (int t = 1; t < a.n_tokens && decode_only; ++t) decode_only = a.seq_index[t] != a.seq_index[t - 1];
  const bool small_partials = heads * max_chunks * static_cast<int64_t>(state_floats) * 4 <= (int64_t{4} << 20);
  if (!inline_only && max_chunks > 1 && (heads < 4 * pool.n_threads() || (decode_only && small_partials))) {
    // Few heads, deep context: one work item per (token, chunk) covering every KV head, merged in chunk order
    // afterwards (flash-decoding).
    const int64_t items = static_cast<int64_t>(a.n_tokens) * max_chunks;
    if (t_partials.size() < heads * max_chunks * state_floats) t_partials.resize(heads * max_chunks * state_floats);
    float* partials = t_partials.data();
    auto partial = [&](int t, int kvh, int c) {
      return state_at(partials + ((static_cast<int64_t>(t) * a.n_head_kv + kvh) * max_chunks + c) * state_floats);
    };
    pool.parallel_for(items, [&](int, int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int t = static_cast<int>(i / max_chunks), c = static_cast<int>(i % max_chunks);
        const int n_ctx = hi(t) + 1;
        const int c0 = std::max(lo(t), c * kAttnChunk), c1 = std::min(n_ctx, (c + 1) * kAttnChunk);
        if (c0 >= c1) continue;
        // This thread's next item is the next chunk of the same token: prefetch runs on into it.
        const int pf_end = i + 1 < i1 && (i + 1) / max_chunks == t ? std::min(n_ctx, c1 + kAttnChunk) : c1;
        attend_chunk(
            k, a, a.seqs[a.seq_index[t]], 0, a.n_head_kv, [&](int h) { return query(t, h); }, group, scale, c0, c1,
            pf_end, [&](int h) { return partial(t, h, c); });
      }
    });
    float* run = scratch(state_floats);
    for (int64_t th = 0; th < heads; ++th) {
      const int t = static_cast<int>(th / a.n_head_kv), kvh = static_cast<int>(th % a.n_head_kv);
      const int n_chunks = (hi(t) + 1 + kAttnChunk - 1) / kAttnChunk, first = lo(t) / kAttnChunk;
      for (int c = first; c < n_chunks; ++c)
        merge_chunk(state_at(run), partial(t, kvh, c), group, a.head_dim, c == first);
      write_heads(a, t, kvh, group, state_at(run));
    }
    return;
  }
  // One work item per (query block, KV head): a block is up to kAttnQueryBlock consecutive tokens of one
  // sequence (a prefill chunk), whose query heads of a group walk the same K/V tiles together, so each tile is
  // read from memory once and reused from L1 by the other heads and tokens. Per head and token, the operations
  // and their order are those of a head of a token alone.
  // Smaller blocks when there are few tokens (a speculative verify, a short chunk), so that every thread still
  // gets several items: the block size never changes a result, only how the work is shared.
  const int block = static_cast<int>(std::clamp<int64_t>(heads / (4 * pool.n_threads()), 1, kAttnQueryBlock));
  t_blocks.clear();
  for (int t = 0; t < a.n_tokens; ++t) {
    if (t_blocks.empty() || t_blocks.back().second - t_blocks.back().first == block ||
        a.seq_index[t] != a.seq_index[t_blocks.back().first])
      t_blocks.emplace_back(t, t);
    ++t_blocks.back().second;
  }
  // Zig-zag order (first, last, second, second to last, ...): parallel_for hands out contiguous ranges, and a
  // prompt's later tokens attend to more positions, so each range gets short and long blocks alike.
  t_zigzag.resize(t_blocks.size());
  for (size_t r = 0; r < t_blocks.size(); ++r)
    t_zigzag[r] = t_blocks[r % 2 == 0 ? r / 2 : t_blocks.size() - 1 - r / 2];
  const std::vector<std::pair<int, int>>& blocks = t_zigzag;
  const int64_t items = static_cast<int64_t>(blocks.size()) * a.n_head_kv;
  auto body = [&](int, int64_t i0, int64_t i1) {
    float* buf = scratch(2 * kAttnQueryBlock * state_floats);
    BlockQuery qs[kAttnQueryBlock];
    for (int64_t i = i0; i < i1; ++i) {
      const auto [t0, t1] = blocks[static_cast<size_t>(i / a.n_head_kv)];
      const int kvh = static_cast<int>(i % a.n_head_kv), nb = t1 - t0;
      auto run = [&](int j) { return state_at(buf + static_cast<size_t>(2 * j) * state_floats); };
      int c_lo = std::numeric_limits<int>::max(), c_hi = 0;
      for (int j = 0; j < nb; ++j) {
        c_lo = std::min(c_lo, lo(t0 + j) / kAttnChunk);
        c_hi = std::max(c_hi, (hi(t0 + j) + kAttnChunk) / kAttnChunk);
      }
      for (int c = c_lo; c < c_hi; ++c) {
        for (int j = 0; j < nb; ++j) {
          const int t = t0 + j;
          qs[j] = {query(t, kvh), state_at(buf + static_cast<size_t>(2 * j + 1) * state_floats),
                   std::max(lo(t), c * kAttnChunk), std::min(hi(t) + 1, (c + 1) * kAttnChunk)};
        }
        attend_tokens(k, a, a.seqs[a.seq_index[t0]], kvh, std::span<BlockQuery>(qs, nb), group, scale);
        for (int j = 0; j < nb; ++j)
          if (qs[j].p0 < qs[j].p1) merge_chunk(run(j), qs[j].st, group, a.head_dim, c == lo(t0 + j) / kAttnChunk);
      }
      for (int j = 0; j < nb; ++j) write_heads(a, t0 + j, kvh, group, run(j));
    }
  };
  if (inline_only) {
    body(0, 0, items);
  } else {
    pool.parallel_for(items, body);
  }
}

}  // namespace

void matmul_multi(ThreadPool& pool, std::initializer_list<MatmulOut> outs, const float* x, int n_tokens) {
  const int64_t K = outs.begin()->w->ne[0];
  bool fused = outs.size() <= 8;
  const DType t0 = outs.begin()->w->type;
  const bool is_float = packed_is_float(t0);
  // One set of activations for all: the same kind, and for the block types the same scale grouping.
  const KSums sums = kernels().k_sums;
  for (const MatmulOut& o : outs)
    fused = fused && o.w->packed && o.w->ne[0] == K && packed_is_float(o.w->type) == is_float &&
            (is_float || act_blocks_per_scale(o.w->type, sums) == act_blocks_per_scale(t0, sums));
  if (!fused) {
    for (const MatmulOut& o : outs) matmul(pool, *o.w, x, n_tokens, o.y);
    return;
  }
  packed_groups(pool, outs.begin(), static_cast<int>(outs.size()), x, K, n_tokens);
}

}  // namespace cachet
