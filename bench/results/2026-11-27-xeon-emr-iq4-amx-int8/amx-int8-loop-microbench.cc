#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <algorithm>
struct alignas(64) TileConfig { uint8_t palette=1, start_row=0; uint8_t reserved[14]={}; uint16_t colsb[16]={}; uint8_t rows[16]={}; };
struct ActQ8 { float d, ds; int16_t sum; int16_t hsum[2]; uint8_t shift, pad; int8_t q[32]; };
constexpr int NB = 64;
alignas(64) int8_t W[NB][512];
alignas(64) float S0[NB][16];
alignas(64) ActQ8 X[16 * NB];
alignas(64) int32_t CB[4][256];
alignas(64) int32_t CB2[4][256];
float OUT[16][16];
template <int S> inline void issue(int64_t b, int mode) {
  constexpr int A = 4 + S % 2, B = 6 + S % 2;
  if (mode == 4) { _tile_zero(S); _tile_dpbssd(S, A, B); return; }
  if (mode == 5) _tile_loadd(A, W[(b + 7) % NB], 32); else _tile_loadd(A, X[b].q, NB * 48);
  if (mode != 6) _tile_loadd(B, W[b], 64);
  _tile_zero(S);
  _tile_dpbssd(S, A, B);
  if (mode != 2) _tile_stored(S, CB[S], 64);
}
inline void issue_slot(int64_t b, int mode) {
  switch (b % 4) { case 0: issue<0>(b, mode); break; case 1: issue<1>(b, mode); break; case 2: issue<2>(b, mode); break; default: issue<3>(b, mode); }
}
// The float steps of block b for 16 tokens from its stored C (the kernel's).
inline void float_block(__m512* acc, const int32_t* c0, int64_t b) {
  const __m512 s0 = _mm512_load_ps(S0[b]);
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t) {
    const __m512 xd = _mm512_set1_ps(X[t * NB + b].d);
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c0 + t * 16)), _mm512_mul_ps(s0, xd), acc[t]);
  }
}
template <int AHEAD, int MODE, bool LATE = false>  // MODE 0: all; 1: float only (no tiles); 2: tiles only no store; 3: tiles+store no float
__attribute__((noinline)) void run() {
  __m512 acc[16];
  for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
  if (MODE != 1) for (int64_t b = 0; b < AHEAD; ++b) issue_slot(b, MODE == 7 ? 0 : MODE);
  for (int64_t b = 0; b < NB; ++b) {
    if (!LATE && MODE != 1 && b + AHEAD < NB) issue_slot(b + AHEAD, MODE == 7 ? 0 : MODE);
    if (MODE >= 2 && MODE != 7) continue;
    float_block(acc, MODE == 7 ? CB2[b % 4] : CB[b % 4], b);
    if (LATE && b + AHEAD < NB) issue_slot(b + AHEAD, 0);
  }
  for (int t = 0; t < 16; ++t) _mm512_storeu_ps(OUT[t], acc[t]);
}
// Best of 200 rounds of 200 calls, ns per block.
template <typename F> double best_ns(F f) {
  double best = 1e30;
  for (int rep = 0; rep < 200; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 200; ++i) f();
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count() / 200 / NB);
  }
  return best;
}
template <int AHEAD, int MODE, bool LATE = false> double bench() { return best_ns(run<AHEAD, MODE, LATE>); }
template <int BATCH>
__attribute__((noinline)) void run_batch() {
  __m512 acc[16];
  for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < NB; b0 += BATCH) {
    for (int64_t b = b0; b < b0 + BATCH; ++b) issue_slot(b, 0);
    for (int64_t b = b0; b < b0 + BATCH; ++b) {
      float_block(acc, CB[b % 4], b);
    }
  }
  for (int t = 0; t < 16; ++t) _mm512_storeu_ps(OUT[t], acc[t]);
}
template <int BATCH> double bench_batch() { return best_ns(run_batch<BATCH>); }
template <int S> inline void mul_only(int64_t b) {
  constexpr int A = 4 + S % 2, B = 6 + S % 2;
  _tile_loadd(A, X[b].q, NB * 48);
  _tile_loadd(B, W[b], 64);
  _tile_zero(S);
  _tile_dpbssd(S, A, B);
}
template <int S> inline void store_only() { _tile_stored(S, CB[S], 64); }
inline void mul_slot(int64_t b) { switch (b % 4) { case 0: mul_only<0>(b); break; case 1: mul_only<1>(b); break; case 2: mul_only<2>(b); break; default: mul_only<3>(b); } }
inline void store_slot(int64_t b) { switch (b % 4) { case 0: store_only<0>(); break; case 1: store_only<1>(); break; case 2: store_only<2>(); break; default: store_only<3>(); } }
template <int AHEAD>
__attribute__((noinline)) void run_split() {
  __m512 acc[16];
  for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < AHEAD; ++b) mul_slot(b);
  for (int64_t b = 0; b < NB; ++b) {
    if (b + AHEAD < NB) mul_slot(b + AHEAD);
    store_slot(b);
    float_block(acc, CB[b % 4], b);
  }
  for (int t = 0; t < 16; ++t) _mm512_storeu_ps(OUT[t], acc[t]);
}
template <int AHEAD> double bench_split() { return best_ns(run_split<AHEAD>); }
int main() {
  syscall(SYS_arch_prctl, 0x1023, 18);
  TileConfig c; for (int i = 0; i < 8; ++i) { c.colsb[i] = (i == 4 || i == 5) ? 32 : 64; c.rows[i] = i < 6 ? 16 : 8; }
  __asm__ volatile("ldtilecfg %0" : : "m"(c));
  for (int i = 0; i < NB; ++i) for (int j = 0; j < 512; ++j) W[i][j] = (i * 7 + j) % 13 - 6;
  for (int i = 0; i < NB * 16; ++i) { X[i].d = 0.01f; for (int j = 0; j < 32; ++j) X[i].q[j] = (i + j) % 11 - 5; }
  for (int i = 0; i < NB; ++i) for (int j = 0; j < 16; ++j) S0[i][j] = 0.5f;
  printf("ns per block of 16x16x32 (8192 MAC):\n");
  printf("float only            %.2f\n", bench<1, 1>());
  printf("tiles only, no store  %.2f\n", bench<1, 2>());
  printf("tiles + store         %.2f\n", bench<1, 3>());
  printf("TDP only              %.2f\n", bench<1, 4>());
  printf("A contiguous+B+store  %.2f\n", bench<1, 5>());
  printf("A strided, no B, store %.2f\n", bench<1, 6>());
  printf("all, float reads other buffer %.2f\n", bench<2, 7>());
  printf("split ahead 1         %.2f\n", bench_split<1>());
  printf("split ahead 2         %.2f\n", bench_split<2>());
  printf("split ahead 3         %.2f\n", bench_split<3>());
  printf("batch 1               %.2f\n", bench_batch<1>());
  printf("batch 2               %.2f\n", bench_batch<2>());
  printf("batch 4               %.2f\n", bench_batch<4>());
  printf("late, ahead 1          %.2f\n", bench<1, 0, true>());
  printf("late, ahead 2          %.2f\n", bench<2, 0, true>());
  printf("late, ahead 3          %.2f\n", bench<3, 0, true>());
  printf("all, ahead 1          %.2f\n", bench<1, 0>());
  printf("all, ahead 2          %.2f\n", bench<2, 0>());
  printf("all, ahead 3          %.2f\n", bench<3, 0>());
}
