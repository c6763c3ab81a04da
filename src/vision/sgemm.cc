// sgemm: OpenBLAS on one thread per call.
#include "vision/sgemm.h"

#include <cblas.h>

#include <mutex>

namespace cachet {

namespace {

void single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });  // our pool runs the blocks
}

}  // namespace

void sgemm(int m, int n, int k, const float* a, int64_t lda, const float* b, int64_t ldb, bool b_transposed,
           float* c, int64_t ldc) {
  single_threaded();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f, c, static_cast<int>(ldc));
}

std::string sgemm_core() {
  const char* s = openblas_get_corename();
  return s ? s : "";
}

}  // namespace cachet
