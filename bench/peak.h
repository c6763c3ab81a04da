// The arithmetic peaks a prefill is measured against: register-only loops of the instruction each kernel table
// multiplies with, on independent chains (more than latency x ports on every x86 core seen), each thread on its
// own. The roofline's denominators for bench_kernels' `peak%` and cachet_bench's `--peak-flops`.
#pragma once

#include "kernels/kernels.h"
#include "model/model.h"

namespace cachet::bench {

enum class PeakKind {
  kF32,   // f32 FMA of the table's width (2 FLOPs = 1 multiply-add per lane)
  kInt8,  // the table's int8 dot product: vpdpbusd (AVX-512 VNNI zmm, AVX-VNNI ymm), vpmaddubsw on AVX2
  kBf16,  // vdpbf16ps zmm (the AVX512_BF16 and AMX tables' packed float path); the f32 FMA peak elsewhere
};

// Multiply-adds per second of `threads` threads running `kind`'s loop for the table `isa` (0 where the CPU cannot
// run it), the median of `reps` runs. AVX2's int8 peak counts vpmaddubsw alone (32 byte products per
// instruction, without the widening adds a dot product also needs): an upper bound, so fractions of it are
// conservative.
double peak_macs(PeakKind kind, Isa isa, int threads, int reps);

// The peak a packed matmul over weights of type t runs against on table isa.
PeakKind peak_kind_of(DType t, Isa isa);

// Multiply-adds of one token through a model's matrices (experts as routed on average, the router whole), and the
// peak most of them run against on table isa. with_head: the output head too (a decoded token needs its logits;
// of a prompt only the last token does). Attention's are the caller's: they depend on the context.
struct TokenMacs {
  double macs = 0.0;
  PeakKind kind = PeakKind::kF32;
};
TokenMacs token_macs(const Model& model, Isa isa, bool with_head);

}  // namespace cachet::bench
