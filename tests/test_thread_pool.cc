#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"

namespace cachet {
namespace {

// Runs split(pool, n, fn, grain) over thread counts, sizes and grains; every index must be visited exactly once
// and every range must pass check(n, grain, b, e).
template <typename Split, typename Check>
void expect_every_index_once(Split split, Check check) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1001}) {
      for (int64_t grain : {1, 4, 16}) {
        std::vector<std::atomic<int>> hits(n);
        split(pool, n, [&](int t, int64_t b, int64_t e) {
          EXPECT_LT(t, threads);
          check(n, grain, b, e);
          for (int64_t i = b; i < e; ++i) hits[i]++;
        }, grain);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  expect_every_index_once(
      [](ThreadPool& p, int64_t n, const ThreadPool::RangeFn& fn, int64_t g) { p.parallel_for(n, fn, g); },
      [](int64_t n, int64_t grain, int64_t b, int64_t e) {
        EXPECT_LE(b, e);
        if (e < n) EXPECT_EQ(e % grain, 0);
      });
}

TEST(ThreadPool, ParallelChunksCoversEveryIndexOnce) {
  expect_every_index_once(
      [](ThreadPool& p, int64_t n, const ThreadPool::RangeFn& fn, int64_t g) { p.parallel_chunks(n, fn, g); },
      [](int64_t n, int64_t grain, int64_t b, int64_t e) {
        EXPECT_LT(b, e);
        EXPECT_EQ(b % grain, 0);
        if (e < n) EXPECT_EQ(e - b, grain);
      });
}

// A thread held up on its first chunk: the others take the rest of its range.
TEST(ThreadPool, ParallelChunksMovesWorkOffASlowThread) {
  ThreadPool pool(2);
  std::atomic<int> by_other{0};
  pool.parallel_chunks(64, [&](int t, int64_t b, int64_t) {
    if (t == 1) ++by_other;
    if (t == 0 && b == 0) {  // held until the other thread has done everything else (or 10 s)
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (by_other.load() < 63 && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  // Thread 1 owns 32 chunks and steals all of thread 0's but the one it is held in (all 64 if thread 0 starts late).
  EXPECT_GE(by_other.load(), 63);
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
