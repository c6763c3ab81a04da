// A fixed pool of worker threads for data-parallel kernels. The caller is worker 0; parallel_for splits
// [0, n) into one contiguous range per thread and returns when all are done. Workers spin briefly and then
// sleep on an atomic wait, so a decode step's dozens of parallel regions each cost microseconds.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace cachet {

class ThreadPool {
 public:
  // fn(thread_index, begin, end)
  using RangeFn = std::function<void(int, int64_t, int64_t)>;

  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Splits [0, n) into n_threads contiguous ranges (some may be empty), each a multiple of `grain`
  // except the last. Runs fn on each; returns after all have finished.
  void parallel_for(int64_t n, const RangeFn& fn, int64_t grain = 1);

  // Like parallel_for, but a thread that finishes its range early takes chunks of `grain` from the end of the
  // ranges still being worked on: fn may run several times per thread, on sub-ranges in any order. For work whose
  // items are independent (a matmul's row groups), so that a thread slowed by the machine (another process on its
  // core, a cold cache) does not hold up the others.
  void parallel_chunks(int64_t n, const RangeFn& fn, int64_t grain = 1);

  // Runs fn(thread_index) once on every thread.
  void run_on_all(const std::function<void(int)>& fn);

 private:
  void worker_loop(int index);

  // parallel_chunks' per-thread ranges of chunks, [front, back) packed in one word (front low, back high).
  struct alignas(64) ChunkRange {
    std::atomic<uint64_t> fb;
  };

  int n_threads_;
  std::unique_ptr<ChunkRange[]> chunk_ranges_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace cachet
