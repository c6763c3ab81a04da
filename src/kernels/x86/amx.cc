// The AMX table's tile kernels; the rest of the table is the AVX512_BF16 one. dispatch.cc builds the table on
// first use, after cpuid and the kernel (arch_prctl) have granted the tile state, so nothing here runs before
// dispatch.
//
// Packed float weights (F16/BF16 packed as bf16 pairs, FloatPack::kBf16Pairs) times bf16 activation pairs on
// TDPBF16PS (16 tokens x 16 rows x 16 pairs per instruction, ~10x the rate of vdpbf16ps here). A group's pairs
// are already an AMX B operand: pair p holds the 16 rows' pairs side by side (64 bytes), so 16 consecutive pairs
// are one 16 x 64-byte tile. Chunk c (pairs 16c .. 16c + 15) accumulates into chain c mod 4 (four C tiles, so
// four TDPBF16PS are in flight), and the result is (c0 + c1) + (c2 + c3). The summation order inside one
// TDPBF16PS is the hardware's (it matches no sequential order of f32 adds; measured, docs/numerics.md), so this
// kernel is not bitwise equal to the scalar one; it is equal to itself whatever the token count (rows of a tile
// are independent: token t's result is the same alone or in a tile of 16) and whatever the thread count.
//
// The integer path (packed quantized weights, kernels/packed.h) on TDPBSSD when the CPU has AMX-INT8: a block's
// 8 steps of 64 bytes are a B tile of K = 32 int8 (byte r*4+i of step s = element 4s+i of row r, AMX's layout),
// the block's quants of 16 tokens an A tile, and the C tile holds the 16 x 16 exact int32 sums of the block.
// Those go through the same float steps, per (row, token) and in block order, as every other table's, so this
// path is bitwise equal to the scalar reference (and to the AVX-512 tables) — only faster: the integer work of
// 16 tokens x 16 rows x 32 elements is one instruction instead of 128 vpdpbusd.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/packed.h"

namespace cachet::amx {

namespace {

constexpr int kPairs = 16;                          // pairs per chunk: one B tile of 16 x 64 bytes
constexpr int kChunkBytes = kPairs * kPackRows * 4;  // 1 KiB of packed weights

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// What a thread's tiles are configured for. Tiles 0-3: C (rows x 16 f32 or int32); 4, 5: A (rows x 64, 32 or 16
// bytes: 16 bf16 pairs, or K = 32 or 16 int8); 6, 7: B (16, 8 or 4 rows of the 16 weight rows' 4-byte groups).
enum class Shape { kBf16, kInt32, kInt16 };

// This thread's loaded configuration (-1: none yet): shape * 32 + token rows.
thread_local int t_config = -1;

void configure(Shape shape, int rows) {
  const int key = static_cast<int>(shape) * 32 + rows;
  if (t_config == key) return;
  const int a_bytes = shape == Shape::kBf16 ? 64 : shape == Shape::kInt32 ? 32 : 16;
  const int b_rows = shape == Shape::kBf16 ? kPairs : a_bytes / 4;
  TileConfig c;
  for (int i = 0; i < 8; ++i) {
    c.colsb[i] = static_cast<uint16_t>(i == 4 || i == 5 ? a_bytes : 64);
    c.rows[i] = static_cast<uint8_t>(i < 6 ? rows : b_rows);
  }
  // Inline asm rather than _tile_loadconfig: GCC 12 miscompiles the intrinsic (docs/decisions.md).
  __asm__ volatile("ldtilecfg %0" : : "m"(c));
  t_config = key;
}

// Chunks this far ahead are prefetched (a decode step streams the weights from memory: without it a token
// alone ran 15% slower than vdpbf16ps; measured).
constexpr int kPrefetchChunks = 8;

inline void prefetch_chunk(const uint8_t* p) {
  for (int i = 0; i < kChunkBytes; i += 64) _mm_prefetch(reinterpret_cast<const char*>(p + i), _MM_HINT_T0);
}

// One chunk into chain C: A from the tokens' rows (stride bytes apart), B from the packed group.
template <int C>
inline void step(const void* a, int64_t a_stride, const uint8_t* b) {
  constexpr int A = 4 + C % 2, B = 6 + C % 2;
  prefetch_chunk(b + kPrefetchChunks * kChunkBytes);
  _tile_loadd(A, a, a_stride);
  _tile_loadd(B, b, 64);
  _tile_dpbf16ps(C, A, B);
}

inline void step_into(int chain, const void* a, int64_t a_stride, const uint8_t* b) {
  switch (chain) {
    case 0: step<0>(a, a_stride, b); break;
    case 1: step<1>(a, a_stride, b); break;
    case 2: step<2>(a, a_stride, b); break;
    default: step<3>(a, a_stride, b); break;
  }
}

}  // namespace

void packed_dot_bf16(const uint8_t* group, int64_t n_pairs, const uint32_t* x, int64_t x_stride, int n_tokens,
                     float* out, int64_t out_stride) {
  const int64_t full = n_pairs / kPairs, tail = n_pairs % kPairs;
  // The last partial chunk, zero-padded: its weights once, its activations per block of tokens.
  alignas(64) uint8_t w_tail[kChunkBytes];
  alignas(64) uint32_t x_tail[16 * kPairs];
  if (tail) {
    std::memcpy(w_tail, group + full * kChunkBytes, tail * kPackRows * 4);
    std::memset(w_tail + tail * kPackRows * 4, 0, (kPairs - tail) * kPackRows * 4);
  }
  alignas(64) float acc[4][16 * 16];
  const int64_t a_stride = x_stride * 4;
  for (int t0 = 0; t0 < n_tokens; t0 += 16) {
    const int rows = n_tokens - t0 < 16 ? n_tokens - t0 : 16;
    configure(Shape::kBf16, rows);
    const uint32_t* xa = x + t0 * x_stride;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    int64_t c = 0;
    for (; c + 4 <= full; c += 4) {
      step<0>(xa + c * kPairs, a_stride, group + c * kChunkBytes);
      step<1>(xa + (c + 1) * kPairs, a_stride, group + (c + 1) * kChunkBytes);
      step<2>(xa + (c + 2) * kPairs, a_stride, group + (c + 2) * kChunkBytes);
      step<3>(xa + (c + 3) * kPairs, a_stride, group + (c + 3) * kChunkBytes);
    }
    for (; c < full; ++c) step_into(static_cast<int>(c % 4), xa + c * kPairs, a_stride, group + c * kChunkBytes);
    if (tail) {
      for (int t = 0; t < rows; ++t) {
        std::memcpy(x_tail + t * kPairs, xa + t * x_stride + full * kPairs, tail * 4);
        std::memset(x_tail + t * kPairs + tail, 0, (kPairs - tail) * 4);
      }
      step_into(static_cast<int>(full % 4), x_tail, kPairs * 4, w_tail);
    }
    _tile_stored(0, acc[0], 64);
    _tile_stored(1, acc[1], 64);
    _tile_stored(2, acc[2], 64);
    _tile_stored(3, acc[3], 64);
    for (int t = 0; t < rows; ++t) {
      const __m512 s01 = _mm512_add_ps(_mm512_load_ps(acc[0] + t * 16), _mm512_load_ps(acc[1] + t * 16));
      const __m512 s23 = _mm512_add_ps(_mm512_load_ps(acc[2] + t * 16), _mm512_load_ps(acc[3] + t * 16));
      _mm512_storeu_ps(out + (t0 + t) * out_stride, _mm512_add_ps(s01, s23));
    }
  }
}

// ---- The integer path ----

namespace {

// Blocks unpacked per pass: their B tiles and per-row scales (44 KiB on the stack). A longer row is summed in
// passes, its accumulators carried through `out` between them (the same float steps in the same order).
constexpr int64_t kPassBlocks = 64;

struct alignas(64) Pass {
  int8_t w[kPassBlocks][512];     // each block's 8 steps as signed quants (q - bias): a B tile
  float s0[kPassBlocks][16];      // per-row scale of the block (Q6_K: of its first half)
  float s1[kPassBlocks][16];      // Q6_K: of its second half
  float m[kPassBlocks][16];       // *_1: the min; Q4_K, Q5_K: Dmin * mn
};

inline __m512i load64(const uint8_t* p) { return _mm512_loadu_si512(p); }

// Bit `from` of every byte of v moved to bit `to` (the bits in between are masked off first).
template <int From, int To>
inline __m512i move_bits(__m512i v, int mask) {
  const __m512i b = _mm512_and_si512(v, _mm512_set1_epi8(static_cast<char>(mask)));
  if constexpr (From < To) return _mm512_slli_epi16(b, To - From);
  else if constexpr (From > To) return _mm512_srli_epi16(b, From - To);
  else return b;
}

// A block's quants, q - bias as int8, into dst (8 steps x 64 bytes: the B tile).
template <DType T>
inline void unpack_block(const uint8_t* blk, int8_t* dst) {
  constexpr PackedLayout L = packed_layout(T);
  __m512i w[8];
  if constexpr (T == DType::kQ8_0) {
    for (int j = 0; j < 8; ++j) w[j] = _mm512_xor_si512(load64(blk + L.qs + j * 64), _mm512_set1_epi8(-128));
  } else {
    const __m512i lo = _mm512_set1_epi8(0x0f);
    for (int j = 0; j < 4; ++j) {
      const __m512i q = load64(blk + L.qs + j * 64);
      w[j] = _mm512_and_si512(q, lo);
      w[j + 4] = _mm512_and_si512(_mm512_srli_epi16(q, 4), lo);
    }
    if constexpr (T == DType::kQ6_K) {
      for (int k = 0; k < 2; ++k) {
        const __m512i hv = load64(blk + L.hi + k * 64);
        w[4 * k + 0] = _mm512_or_si512(w[4 * k + 0], move_bits<0, 4>(hv, 0x03));
        w[4 * k + 1] = _mm512_or_si512(w[4 * k + 1], move_bits<2, 4>(hv, 0x0c));
        w[4 * k + 2] = _mm512_or_si512(w[4 * k + 2], move_bits<4, 4>(hv, 0x30));
        w[4 * k + 3] = _mm512_or_si512(w[4 * k + 3], move_bits<6, 4>(hv, 0xc0));
      }
    } else if constexpr (L.hi != 0) {
      const __m512i hb = load64(blk + L.hi);
      w[0] = _mm512_or_si512(w[0], move_bits<0, 4>(hb, 0x01));
      w[1] = _mm512_or_si512(w[1], move_bits<1, 4>(hb, 0x02));
      w[2] = _mm512_or_si512(w[2], move_bits<2, 4>(hb, 0x04));
      w[3] = _mm512_or_si512(w[3], move_bits<3, 4>(hb, 0x08));
      w[4] = _mm512_or_si512(w[4], move_bits<4, 4>(hb, 0x10));
      w[5] = _mm512_or_si512(w[5], move_bits<5, 4>(hb, 0x20));
      w[6] = _mm512_or_si512(w[6], move_bits<6, 4>(hb, 0x40));
      w[7] = _mm512_or_si512(w[7], move_bits<7, 4>(hb, 0x80));
    }
    if constexpr (L.bias != 0)
      for (int j = 0; j < 8; ++j) w[j] = _mm512_sub_epi8(w[j], _mm512_set1_epi8(static_cast<char>(L.bias)));
  }
  for (int j = 0; j < 8; ++j) _mm512_store_si512(dst + j * 64, w[j]);
}

inline __m512 load_f16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 cvt_u8(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 cvt_i8(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// Block i of the pass: the per-row float scales every table computes (kernels/packed.h), once per group.
template <DType T>
inline void block_scales(const uint8_t* sup, const uint8_t* blk, Pass& p, int64_t i) {
  if constexpr (T == DType::kQ6_K) {
    const __m512 d = load_f16(sup);
    _mm512_store_ps(p.s0[i], _mm512_mul_ps(d, cvt_i8(blk)));
    _mm512_store_ps(p.s1[i], _mm512_mul_ps(d, cvt_i8(blk + 16)));
  } else if constexpr (T == DType::kQ4_K || T == DType::kQ5_K) {
    _mm512_store_ps(p.s0[i], _mm512_mul_ps(load_f16(sup), cvt_u8(blk)));
    _mm512_store_ps(p.m[i], _mm512_mul_ps(load_f16(sup + 32), cvt_u8(blk + 16)));
  } else {
    _mm512_store_ps(p.s0[i], load_f16(blk));
    if constexpr (T == DType::kQ4_1 || T == DType::kQ5_1) _mm512_store_ps(p.m[i], load_f16(blk + 32));
  }
}

// The C tiles of one block of 16 tokens, stored: [slot][half][token * 16 + row].
using CBuf = int32_t[4][2][256];

// Block b of the pass into slot S: its A (the 16 tokens' quants) and B tiles, C = A.B, C stored.
template <DType T, int S>
inline void issue(const Pass& p, const ActQ8* x, int64_t a_stride, int64_t b, CBuf& c) {
  const int8_t* a = x[b].q;
  if constexpr (T == DType::kQ6_K) {
    // The two halves of the block (16 elements each) are separate sums: K = 16 tiles, C tiles 2S', 2S' + 1.
    constexpr int C0 = 2 * (S % 2), C1 = C0 + 1;
    _tile_loadd(4, a, a_stride);
    _tile_loadd(5, a + 16, a_stride);
    _tile_loadd(6, p.w[b], 64);
    _tile_loadd(7, p.w[b] + 256, 64);
    _tile_zero(C0);
    _tile_zero(C1);
    _tile_dpbssd(C0, 4, 6);
    _tile_dpbssd(C1, 5, 7);
    _tile_stored(C0, c[S][0], 64);
    _tile_stored(C1, c[S][1], 64);
  } else {
    constexpr int A = 4 + S % 2, B = 6 + S % 2;
    _tile_loadd(A, a, a_stride);
    _tile_loadd(B, p.w[b], 64);
    _tile_zero(S);
    _tile_dpbssd(S, A, B);
    _tile_stored(S, c[S][0], 64);
  }
}

template <DType T>
inline void issue_slot(const Pass& p, const ActQ8* x, int64_t a_stride, int64_t b, CBuf& c) {
  switch (b % 4) {
    case 0: return issue<T, 0>(p, x, a_stride, b, c);
    case 1: return issue<T, 1>(p, x, a_stride, b, c);
    case 2: return issue<T, 2>(p, x, a_stride, b, c);
    default: return issue<T, 3>(p, x, a_stride, b, c);
  }
}

// 16 tokens (x + t * x_stride) against the pass's nb blocks: the tiles run kAhead blocks ahead of the float steps.
// Two blocks ahead: one to three measured the same (a microbenchmark of this loop: ~27 ns per block of 16 x 16 x
// 32, the tile loads, multiply and store ~17 and the float steps ~9, which do not overlap: the float loads wait
// for the tile store they read, and issuing the store later, or in batches of four blocks, was no faster).
constexpr int64_t kAhead = 2;
template <DType T>
void tile_tokens(const Pass& p, int64_t nb, const ActQ8* x, int64_t x_stride, float* out, int64_t out_stride,
                 bool first) {
  constexpr bool kQ6 = T == DType::kQ6_K;
  constexpr bool kMin1 = T == DType::kQ4_1 || T == DType::kQ5_1;
  constexpr bool kK = T == DType::kQ4_K || T == DType::kQ5_K;
  const int64_t a_stride = x_stride * static_cast<int64_t>(sizeof(ActQ8));
  alignas(64) CBuf c;
  __m512 acc[16];
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t) acc[t] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out + t * out_stride);
  for (int64_t b = 0; b < kAhead && b < nb; ++b) issue_slot<T>(p, x, a_stride, b, c);
  for (int64_t b = 0; b < nb; ++b) {
    if (b + kAhead < nb) issue_slot<T>(p, x, a_stride, b + kAhead, c);
    const int32_t* c0 = c[b % 4][0];
    const int32_t* c1 = c[b % 4][1];
    const __m512 s0 = _mm512_load_ps(p.s0[b]);
    const __m512 s1 = kQ6 ? _mm512_load_ps(p.s1[b]) : _mm512_setzero_ps();
    const __m512 m = kMin1 || kK ? _mm512_load_ps(p.m[b]) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) {
      const ActQ8& xb = x[t * x_stride + b];
      const __m512 xd = _mm512_set1_ps(xb.d);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c0 + t * 16)), _mm512_mul_ps(s0, xd), acc[t]);
      if constexpr (kQ6)
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c1 + t * 16)), _mm512_mul_ps(s1, xd), acc[t]);
      if constexpr (kMin1) acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(xb.ds), acc[t]);
      if constexpr (kK) acc[t] = _mm512_fnmadd_ps(m, _mm512_set1_ps(xb.ds), acc[t]);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t) _mm512_storeu_ps(out + t * out_stride, acc[t]);
}

// n_tokens a multiple of 16.
template <DType T>
void packed_dot_tiles(const uint8_t* group, int64_t n_blocks, const ActQ8* x, int64_t x_stride, int n_tokens,
                      float* out, int64_t out_stride) {
  constexpr PackedLayout L = packed_layout(T);
  configure(T == DType::kQ6_K ? Shape::kInt16 : Shape::kInt32, 16);
  Pass p;
  for (int64_t b0 = 0; b0 < n_blocks; b0 += kPassBlocks) {
    const int64_t nb = std::min(kPassBlocks, n_blocks - b0);
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t b = b0 + i;
      const uint8_t* sup = group + (b / L.blocks) * L.super_bytes();
      const uint8_t* blk = sup + L.header + (b % L.blocks) * L.block_bytes;
      unpack_block<T>(blk, p.w[i]);
      block_scales<T>(sup, blk, p, i);
    }
    for (int t0 = 0; t0 < n_tokens; t0 += 16)
      tile_tokens<T>(p, nb, x + t0 * x_stride + b0, x_stride, out + t0 * out_stride, out_stride, b0 == 0);
  }
}

}  // namespace

void packed_dot(DType t, const uint8_t* group, int64_t n_blocks, const ActQ8* x, int64_t x_stride, int n_tokens,
                float* out, int64_t out_stride) {
  // Q6_K takes two K = 16 tiles per block (its halves have their own scales), twice the tile traffic: at 16
  // tokens, where one block of tokens carries the unpacking, it ran slower than vpdpbusd (bench_kernels).
  const int min_tokens = packed_as(t) == DType::kQ6_K ? 32 : 16;
  const int full = n_tokens >= min_tokens ? n_tokens / 16 * 16 : 0;
  if (full > 0) {
    switch (packed_as(t)) {
      case DType::kQ4_0: packed_dot_tiles<DType::kQ4_0>(group, n_blocks, x, x_stride, full, out, out_stride); break;
      case DType::kQ4_1: packed_dot_tiles<DType::kQ4_1>(group, n_blocks, x, x_stride, full, out, out_stride); break;
      case DType::kQ8_0: packed_dot_tiles<DType::kQ8_0>(group, n_blocks, x, x_stride, full, out, out_stride); break;
      case DType::kQ5_0: packed_dot_tiles<DType::kQ5_0>(group, n_blocks, x, x_stride, full, out, out_stride); break;
      case DType::kQ5_1: packed_dot_tiles<DType::kQ5_1>(group, n_blocks, x, x_stride, full, out, out_stride); break;
      case DType::kQ4_K: packed_dot_tiles<DType::kQ4_K>(group, n_blocks, x, x_stride, full, out, out_stride); break;
      case DType::kQ5_K: packed_dot_tiles<DType::kQ5_K>(group, n_blocks, x, x_stride, full, out, out_stride); break;
      case DType::kQ6_K: packed_dot_tiles<DType::kQ6_K>(group, n_blocks, x, x_stride, full, out, out_stride); break;
      default: return avx512_bf16::kKernels.packed_dot(t, group, n_blocks, x, x_stride, n_tokens, out, out_stride);
    }
  }
  // Fewer than 16 tokens left: the AVX512_BF16 table's vpdpbusd walk (the same bits).
  if (full < n_tokens)
    avx512_bf16::kKernels.packed_dot(t, group, n_blocks, x + full * x_stride, x_stride, n_tokens - full,
                                     out + full * out_stride, out_stride);
}

}  // namespace cachet::amx
