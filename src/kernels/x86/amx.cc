// The AMX table's packed float kernel: F16/BF16 weights packed as bf16 pairs (FloatPack::kBf16Pairs) times bf16
// activation pairs on AMX tiles (TDPBF16PS: 16 tokens x 16 rows x 16 pairs per instruction, ~10x the rate of
// vdpbf16ps here). The rest of the AMX table is the AVX512_BF16 table; dispatch.cc builds it on first use, after
// cpuid and the kernel (arch_prctl) have granted the tile state, so nothing here runs before dispatch.
//
// A group's pairs are already an AMX B operand: pair p holds the 16 rows' pairs side by side (64 bytes), so 16
// consecutive pairs are one 16 x 64-byte tile. Chunk c (pairs 16c .. 16c + 15) accumulates into chain c mod 4
// (four C tiles, so four TDPBF16PS are in flight), and the result is (c0 + c1) + (c2 + c3). The summation order
// inside one TDPBF16PS is the hardware's (it matches no sequential order of f32 adds; measured, docs/numerics.md),
// so this table is not bitwise equal to the scalar one; it is equal to itself whatever the token count (rows of
// a tile are independent: token t's result is the same alone or in a tile of 16) and whatever the thread count.
#include <immintrin.h>

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

// The token rows of this thread's loaded configuration (0: none yet). Tiles 0-3: the chains' C (rows x 16 f32);
// 4, 5: A (rows x 16 pairs of bf16); 6, 7: B (16 pairs x 16 rows' pairs).
thread_local int t_rows = 0;

void configure(int rows) {
  if (t_rows == rows) return;
  TileConfig c;
  for (int i = 0; i < 8; ++i) {
    c.colsb[i] = 64;
    c.rows[i] = static_cast<uint8_t>(i < 6 ? rows : kPairs);
  }
  // Inline asm rather than _tile_loadconfig: GCC 12 miscompiles the intrinsic (docs/decisions.md).
  __asm__ volatile("ldtilecfg %0" : : "m"(c));
  t_rows = rows;
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
    configure(rows);
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

}  // namespace cachet::amx
