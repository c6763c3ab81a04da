// The kernel table: every hot operation, one implementation per ISA, chosen once at start from cpuid.
// ref/ holds the scalar implementations, which are the specification; x86/ the SIMD ones. Tests run every
// table the CPU supports against the scalar one.
//
// Reduction order contract (batch invariance): within one table, the dot product of a weight row with an
// activation row is computed by the same sequence of operations whether it comes from `dot_rows` (decode)
// or from `gemm_nt` over a dequantized tile (prefill): weights are dequantized to exactly the same floats
// (`dequantize_row`), accumulated lane-wise in k order, then reduced by one fixed tree. So a token's logits
// never depend on how many other tokens share its batch.
#pragma once

#include "cachet/status.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "kernels/packed.h"

namespace cachet {

// The levels, lowest first. kAvxVnni is kAvx2 with the VEX-encoded 256-bit vpdpbusd (Alder Lake and later,
// Zen 5) for the integer path; kAvx512Bf16 is kAvx512 with vdpbf16ps for the packed float path; kAmx is kAvx512Bf16
// with AMX bf16 tiles for the packed float path (Sapphire Rapids and later Xeons).
enum class Isa { kScalar, kAvx2, kAvxVnni, kAvx512, kAvx512Bf16, kAmx };
const char* isa_name(Isa isa);

// The rows attn_chunk reads: 1 <= n <= kAttnTileMax positions per tile, row i's K at k + i * k_stride + k_off
// and V at v + i * v_stride + v_off (k, v: the rows' starts; the offsets: this KV head's bytes in a row).
struct AttnTile {
  const uint8_t* k;
  const uint8_t* v;
  size_t k_stride, v_stride;
  int n;
};
struct AttnChunk {
  const AttnTile* tiles;
  int n_tiles;
  size_t k_off, v_off;
  // What the caller reads next (the next chunk), only prefetched: the walk asks for the K and V lines of its heads
  // ahead of use, running on into these tiles (up to a chunk's; heads [0, n_heads) at next_k_off, next_v_off).
  const AttnTile* next = nullptr;
  int n_next = 0;
  size_t next_k_off = 0, next_v_off = 0;
  bool prefetch = true;  // false: no prefetch at all (the rows are in cache already)
  // The caller's promise that the K rows of this call were read by the previous call on this thread and have not
  // changed since the last call without it (model/ops.cc: a query block's tokens over one chunk): a kernel may
  // reuse what it derived from them (x86/attn_keys_t.inc). Results are the same bits either way.
  bool keys_again = false;
  // KV heads [0, n_heads) (at most kAttnChunkHeads) in one call: head h's K at k_off + h * k_head in a row (V:
  // v_off + h * v_head), its query rows at q + h * q_stride floats (qq + h * q_stride / 16), its state at
  // m, l, acc + h * state_stride floats. Each head's result is the bits of a call for it alone; one call lets a
  // kernel read whole rows front to back (a q8_0 head's 68 bytes straddle cache lines).
  int n_heads = 1;
  size_t k_head = 0, v_head = 0, q_stride = 0, state_stride = 0;
};

struct Kernels {
  Isa isa;
  // Lane width of the f32 accumulation; gemm tiles pad k to a multiple of it.
  int lanes;

  // dst[0..n) = the row's values as f32, exactly. n is a multiple of the type's block size.
  void (*dequantize_row)(DType t, const void* src, float* dst, int64_t n);

  // out[r] = dot(row r of w, x) for r < n_rows; rows are `row_stride` bytes apart, each n elements.
  void (*dot_rows)(DType t, const void* w, size_t row_stride, int n_rows, const float* x, int64_t n, float* out);

  // C[i*ldc + j] = dot(A row i, B row j), i < m, j < n, rows of k floats (A stride lda, B stride ldb).
  void (*gemm_nt)(int m, int n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                  int64_t ldc);

  // Attention over one contiguous run of cached positions; kv_type is kF32 or kF16, rows `stride` bytes apart.
  // scores[i] = scale * dot(q, k_i), i < n.
  void (*kv_scores)(DType kv_type, const void* k, size_t stride, int n, const float* q, int d, float scale,
                    float* scores);
  // out[0..d) += sum_i p[i] * v_i, i < n.
  void (*kv_accumulate)(DType kv_type, const void* v, size_t stride, int n, const float* p, int d, float* out);
  // dst[0..n) = src as kv_type (f32 copy or f16 round-to-nearest-even).
  void (*kv_store)(DType kv_type, const float* src, void* dst, int n);

  // The integer path (kernels/packed.h). x[0..n) -> n/32 ActQ8 blocks, each run of blocks_per_scale blocks
  // (1 or 8, n a multiple of 32 * blocks_per_scale) sharing one scale; bitwise identical in every table.
  void (*quantize_act)(const float* x, int64_t n, int blocks_per_scale, ActQ8* out);
  // For one packed 16-row group of n_blocks blocks and n_tokens activation rows (x + t * x_stride, quantized
  // with act_blocks_per_scale(t, k_sums)): out[t * out_stride + r] = dot(row r, token t) for r < 16, in this
  // table's k_sums arithmetic: bitwise equal to ref::packed_dot_super where super_sums(t, k_sums), else to
  // ref::packed_dot.
  void (*packed_dot)(DType t, const uint8_t* group, int64_t n_blocks, const ActQ8* x, int64_t x_stride,
                     int n_tokens, float* out, int64_t out_stride);
  KSums k_sums;

  // Packed float weights (F16/BF16, kernels/packed.h): this table's layout and arithmetic for them.
  FloatPack float_pack;
  // kBf16Pairs. round_bf16: out[0..n) = the bf16 of x[0..n) (f32_to_bf16_daz), bitwise in every table.
  // packed_dot_bf16: for one 16-row group of n_pairs pairs and n_tokens rows of bf16 pairs (x + t * x_stride
  // dwords): out[t * out_stride + r] = dot(row r, token t) in the packed order; every table has one (the
  // tables without vdpbf16ps compute the same bits with two FMAs per pair), only the BF16 table is fast.
  void (*round_bf16)(const float* x, int64_t n, uint16_t* out);
  void (*packed_dot_bf16)(const uint8_t* group, int64_t n_pairs, const uint32_t* x, int64_t x_stride, int n_tokens,
                          float* out, int64_t out_stride);
  // kHalfRows: for one 16-row group of k elements of type t (F16 or BF16) and n_tokens f32 rows
  // (x + t * x_stride): out[t * out_stride + r] = dot(row r, token t) in the packed order. The same bits in the
  // scalar, AVX2 and AVX-512 tables.
  void (*packed_dot_half)(DType t, const uint8_t* group, int64_t k, const float* x, int64_t x_stride, int n_tokens,
                          float* out, int64_t out_stride);

  // One tile of flash attention for the `group` query heads that share a KV head: 1 <= n <= kAttnTileMax
  // cached positions (K and V rows `stride` bytes apart, kv_type kF32 or kF16), head size d; q holds the
  // group's query rows, d floats each, contiguous. Per head g, with running max m[g], running sum l[g] and
  // unnormalized output acc[g*d, (g+1)*d):
  //   s_i = scale * dot(q_g, k_i), then, when softcap c != 0, s_i = c tanh(s_i / c) (as 2c / (1 + e^(-2 s_i / c)) - c);
  //   m' = max(m, max_i s_i);  c = e^(m - m');  p_i = e^(s_i - m')
  //   acc = c * acc + sum_i p_i v_i;  l = c * l + sum_i p_i;  m = m'
  // Start each head with m = -inf, l = 0, acc = 0; the attention output is acc / l.
  // K rows k_stride bytes apart in k_type, V rows v_stride apart in v_type; the pairs attn_tile_reads() names
  // (block types: d a multiple of 32, a row a run of whole blocks).
  // Block-quantized keys (Q8_0, Q4_0, IQ4_NL) take integer Q.K: qq holds the group's query rows quantized by
  // quantize_query (kernels/attn_query.h: 2 * group * d / 32 blocks; q is then only read for float keys, qq may
  // be null for them). For row i with integer values k (Q8_0 q, Q4_0 q - 8, IQ4_NL its grid) and scales dk per
  // block, and query block b's parts hi, lo and scale dx: isum_b = sum_e k_e (256 hi_e + lo_e) (exact in int32),
  // then a = fma(float(isum_b), dk_b * dx, a) over b = 0, 1, ... from a = 0, and s_i = scale * a: the same float
  // operations in every table. Block-quantized values (the same types): the weight of row i's block b is p_i
  // times its scale; the scalar and AVX2 tables add fma(p_i * dv_b, v_e, acc_e) per row, the AVX-512 tables round
  // a tile's weights to int16 per head and block and sum weight x value in int32 first (x86/attn_values_int.inc:
  // within 2^-15 sqrt(rows) max|v| of the scalar table).
  void (*attn_tile)(DType k_type, DType v_type, const void* k, size_t k_stride, const void* v, size_t v_stride,
                    int n, const float* q, const ActQ8* qq, int group, int d, float scale, float softcap, float* m,
                    float* l, float* acc);
  // One chunk of flash attention for the groups of c.n_heads KV heads (the unit the attention walks merge,
  // kAttnChunkRows positions at most): per head, the tiles' rows from a fresh state, so m[g] = the largest score,
  // l[g] = sum_i e^(s_i - m), acc[g] = sum_i e^(s_i - m) v_i. Scores and types as attn_tile; tables read the rows
  // as a run of attn_tile calls per head (the same bits), except the AVX-512 tables with block-quantized keys and
  // values, which take two passes: every score of every head first (whole K rows), then one exponential per score
  // against the chunk's largest and the values' weights rounded to int16 per block against the chunk's largest
  // scale, summed over the whole chunk in int32 (x86/attn_chunk.inc; within docs/numerics.md's bound of the run
  // of tiles).
  void (*attn_chunk)(DType k_type, DType v_type, const AttnChunk& c, const float* q, const ActQ8* qq,
                     int group, int d, float scale, float softcap, float* m, float* l, float* acc);

  // g[i] = silu(g[i]) * u[i] = g[i] / (1 + e^-g[i]) * u[i], i < n.
  void (*silu_mul)(float* g, const float* u, int64_t n);
  // g[i] = gelu(g[i]) * u[i] with GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
  // computed as x / (1 + e^(-x (kGeluC1 + kGeluC2 x^2))), i < n.
  void (*gelu_mul)(float* g, const float* u, int64_t n);
  // x[i] = e^(x[i] - shift) for i < n (0 below e^-87.3); returns their sum (the table's lanes summed in its
  // order). A softmax's exponentials: the vision encoders' two-way attention over whole rows of scores.
  float (*exp_sum)(float* x, int64_t n, float shift);

  // The gated delta rule for one value head over n tokens in order (model/gated_delta_net.h). S: the head's
  // d x d state, row j (value dim j over the d key dims) contiguous. Token t's (normalised) query, key and value
  // start at q, k, v + t * in_stride, its gates are decay[t] and beta[t], its output goes to o + t * out_stride.
  // Row by row, token by token: S_j = decay S_j;  e_j = beta (v_j - S_j . k);  S_j += e_j k;  o_j = S_j . q.
  // Rows are independent, so a table may walk a block of rows through all n tokens while they stay in L1 (the
  // prefill form): each row sees the same operations in the same order as n calls of one token each, so the
  // two agree bit for bit. Each dot product in the table's lane order: tables agree within rounding
  // (docs/numerics.md), a table with itself bit for bit whatever the batch, the chunking or the threads.
  void (*delta_rule)(float* S, const float* q, const float* k, const float* v, int64_t in_stride, const float* decay,
                     const float* beta, float* o, int64_t out_stride, int n, int d);

  // Mamba-2's selective scan for one head over n tokens in order (model/mamba2.h). S: the head's hd x ds state,
  // row i (channel i of the head over the ds state dims) contiguous. Token t's channels x (hd), B and C (ds each)
  // start at x, b, c + t * in_stride, its step dt[t] and decay da[t], its output goes to y + t * out_stride.
  // Row by row, token by token: S_i = da S_i + (x_i dt) B;  y_i = S_i . C. As delta_rule: rows independent, a
  // table may walk blocks of rows through groups of tokens, n tokens in one call equal n calls of one bit for
  // bit; each dot product in the table's lane order.
  void (*ssm_scan)(float* S, const float* x, const float* b, const float* c, int64_t in_stride, const float* dt,
                   const float* da, float* y, int64_t out_stride, int n, int hd, int ds);

  // The short causal conv of the hybrid models (model/causal_conv.h) for one sequence's n consecutive tokens over
  // `channels` channels: channel c's window win + c (k - 1) (its last k - 1 inputs, oldest first), its taps
  // taps + c k, token t's inputs x + t * stride, each replaced by
  //   y = win_0 tap_0 + ... + win_{k-2} tap_{k-2} + x tap_{k-1}   (in that order; + bias[c] when bias; SiLU of it
  // when silu), the window shifted by x. Channels are independent: any split of them, and n tokens in one call
  // against n calls of one, give the same bits on a table.
  void (*causal_conv)(float* win, const float* taps, const float* bias, float* x, int64_t stride, int n,
                      int64_t channels, int k, bool silu);
};

// 2 sqrt(2/pi) and 2 sqrt(2/pi) 0.044715: the GELU constants of gelu_mul.
constexpr float kGeluC1 = 1.5957691216057308f;
constexpr float kGeluC2 = 0.0713548162726009f;

// The (K, V) element types attn_tile reads in place: each float type with itself, Q8_0, Q4_0 and IQ4_NL with
// themselves, and Q8_0 keys with Q4_0 or IQ4_NL values.
constexpr bool attn_tile_reads(DType k, DType v) {
  return (k == v && (k == DType::kF32 || k == DType::kF16 || k == DType::kBF16 || k == DType::kQ8_0 ||
                     k == DType::kQ4_0 || k == DType::kIQ4_NL)) ||
         (k == DType::kQ8_0 && (v == DType::kQ4_0 || v == DType::kIQ4_NL));
}

// The key types attn_tile multiplies by the query in integers (integer Q.K: qq required).
constexpr bool attn_integer_keys(DType k) { return k == DType::kQ8_0 || k == DType::kQ4_0 || k == DType::kIQ4_NL; }

// Positions per attn_tile call, at most.
constexpr int kAttnTileMax = 16;
// Positions per attn_chunk call, at most (16 whole tiles).
constexpr int kAttnChunkRows = 256;

// Tiles ahead of the one being computed whose lines a run of attn_tile calls prefetches, at most.
constexpr int kAttnPrefetchTiles = 4;
// KV heads per attn_chunk call, at most (AttnChunk::n_heads).
constexpr int kAttnChunkHeads = 8;
// Head size of block-quantized (32-element) keys and values attn_tile reads, at most: 18 blocks (MLA's cached
// latent + rotated key, 512 + 64 on DeepSeek-V3).
constexpr int kAttnMaxBlockHeadDim = 576;

// The best table for this CPU (CACHET_ISA=scalar|avx2|avxvnni|avx512|avx512bf16|amx forces a lower one, for tests and
// benches). A forced name the CPU cannot run leaves the best table in place and makes kernel_choice() an error,
// which load_model returns: nothing runs on a table other than the one asked for.
const Kernels& kernels();
Status kernel_choice();
// Every table this CPU can run, scalar first.
std::vector<const Kernels*> supported_kernels();
// A thread-local buffer of at least n floats, for kernels that need scratch (baseline code, so that no ISA file
// instantiates a container: its weak symbols could be picked by the linker for baseline callers).
float* kernel_scratch(int64_t n);

namespace ref {
extern const Kernels kKernels;
// packed_dot in KSums::kPerSuper arithmetic (kernels/packed.h), for the types it sums per super-block
// (super_sums: Q4_K, Q5_K) on activations quantized with blocks_per_scale 8.
void packed_dot_super(DType t, const uint8_t* group, int64_t n_blocks, const ActQ8* x, int64_t x_stride,
                      int n_tokens, float* out, int64_t out_stride);
}
namespace avx2 {
extern const Kernels kKernels;
}
namespace avx2_vnni {
extern const Kernels kKernels;
}
namespace avx512 {
extern const Kernels kKernels;
}
namespace avx512_bf16 {
extern const Kernels kKernels;
}
// The AMX table is the AVX512_BF16 one with this packed_dot_bf16 (x86/amx.cc); dispatch builds it on first use.
// Its sums are in the tiles' own order: equal to the scalar one within 1e-6 of the sum of |products| (tested), not
// bitwise, and to itself whatever the token and thread counts.
namespace amx {
void packed_dot_bf16(const uint8_t* group, int64_t n_pairs, const uint32_t* x, int64_t x_stride, int n_tokens,
                     float* out, int64_t out_stride);
}

}  // namespace cachet
