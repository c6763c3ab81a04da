// The AVX2 kernels with AVX-VNNI (the VEX-encoded 256-bit vpdpbusd of Alder Lake and later, and Zen 5) for
// the integer path: the AVX2 table's sources compiled with -mavxvnni added (V in avx2_ops.inc switches on
// __AVXVNNI__). Only chosen when cpuid reports AVX-VNNI; the results are the AVX2 table's, bit for bit.
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

namespace cachet::avx2_vnni {

namespace {

#include "kernels/x86/avx2_ops.inc"

}  // namespace

#include "kernels/x86/kernels_impl.inc"

constinit const Kernels kKernels = kTable;

}  // namespace cachet::avx2_vnni
