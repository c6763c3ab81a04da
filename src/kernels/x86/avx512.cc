// AVX-512 (F, BW, VL, DQ, VNNI) kernels: 16 f32 lanes. Compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512dq -mavx512vnni -mf16c -mfma; only called when cpuid says the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/attn_query.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "kernels/quant_blocks.h"

namespace cachet::avx512 {

namespace {

#include "kernels/x86/avx512_ops.inc"

}  // namespace

#include "kernels/x86/kernels_impl.inc"

constinit const Kernels kKernels = kTable;

}  // namespace cachet::avx512
