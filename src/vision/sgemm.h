// Single-precision GEMM for the vision encoders, through OpenBLAS (Debian's, which picks its kernels at run time
// for the CPU it runs on: no ISA-specific code of ours). The encoders' matmuls are large, dense and f32 (an image's
// thousands of patches against F16 / F32 weights): there a tuned BLAS runs near the CPU's peak where our
// dot-product-ordered gemm_nt (built so a token's logits never depend on its batch) does not. Each call runs on
// the calling thread; callers split work into fixed blocks, so results do not depend on the thread count.
#pragma once

#include <cstdint>
#include <string>

namespace cachet {

// C [m x n] = A [m x k] (rows lda apart) times B^T for B [n x k] (b_transposed) or B [k x n] (rows ldb apart).
void sgemm(int m, int n, int k, const float* a, int64_t lda, const float* b, int64_t ldb, bool b_transposed,
           float* c, int64_t ldc);

// The kernels OpenBLAS picked for this CPU ("Haswell", "SkylakeX", "Zen", ...).
std::string sgemm_core();

}  // namespace cachet
