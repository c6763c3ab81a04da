#include <atomic>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"

namespace cachet {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1001}) {
      for (int64_t grain : {1, 4, 16}) {
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for(
            n,
            [&](int t, int64_t b, int64_t e) {
              EXPECT_LT(t, threads);
              EXPECT_LE(b, e);
              if (e < n) EXPECT_EQ(e % grain, 0);
              for (int64_t i = b; i < e; ++i) hits[i]++;
            },
            grain);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(ThreadPool, ManyShortRegions) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 20000; ++r)
    pool.parallel_for(10, [&](int, int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 200000);
}

}  // namespace
}  // namespace cachet
