// AVX2 + FMA + F16C kernels: 8 f32 lanes. Compiled with -mavx2 -mfma -mf16c; only called when cpuid says
// the CPU has them. avx2_vnni.cc is this file again with -mavxvnni.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/attn_query.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "kernels/quant_blocks.h"

namespace cachet::avx2 {

namespace {

#include "kernels/x86/avx2_ops.inc"

}  // namespace

#include "kernels/x86/kernels_impl.inc"

constinit const Kernels kKernels = kTable;

}  // namespace cachet::avx2
