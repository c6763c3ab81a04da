// A vision encoder's attention: every patch of an image attends to every other (two-way), over thousands of
// patches, so it runs as GEMMs rather than the engine's flash tiles (built for decode and chunked prefill). Per
// head and block of query rows: the block's scores against every key (one sgemm), a softmax over each whole row
// (the kernel table's exp_sum), then the weights times the values (another), divided by the row's sum. Each output
// row comes from the same operations whatever the thread count or the order the blocks run in.
#pragma once

#include <cstdint>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"

namespace cachet {

class VitAttention {
 public:
  static constexpr int kBlock = 32;  // query rows per work item

  // out = softmax(scale q k^T) v per head. q, k, v, out: [T, H * hd] rows.
  void run(ThreadPool& pool, const float* q, const float* k, const float* v, int T, int H, int hd, float scale,
           float* out);
  size_t scratch_bytes() const;

 private:
  std::vector<AlignedBuffer<float>> scores_;  // per thread: [kBlock, T]
};

}  // namespace cachet
